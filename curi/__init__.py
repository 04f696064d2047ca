"""curi: the CURI benchmark (productive concept learning under uncertainty), generated on one
machine from a seed. See README.md, and docs/ for the design, the speed and the fidelity to the
paper."""

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from curi.lazy import lazy_names

# The public names, each imported from its module on first use (PEP 562), so that `curi
# --help`, which imports this package, does not pay for numpy, scipy and the whole core.
_EXPORTS = {
    "curi.bank": ["BankConfig", "ConceptBank", "build_bank", "load_bank", "open_bank"],
    "curi.concepts": ["Concept", "parse"],
    "curi.divergence": ["DivergenceIndex", "Divergences", "atom_divergence", "compound_divergence"],
    "curi.episodes": ["Episode", "EpisodeSampler", "EpisodeSpec"],
    "curi.errors": ["BankError", "ConceptError", "ConfigError", "CuriError", "SplitError"],
    "curi.executor": ["evaluate"],
    "curi.grammar": ["sample_concepts"],
    "curi.posterior": ["Posterior"],
    "curi.predictors": ["easiness"],
    "curi.splits": ["Split", "list_splits", "make_split"],
    "curi.tasks": ["RuleTaskSampler"],
}
__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)


if TYPE_CHECKING:  # the same names, for type checkers and editors
    from curi.bank import BankConfig, ConceptBank, build_bank, load_bank, open_bank
    from curi.concepts import Concept, parse
    from curi.divergence import (
        DivergenceIndex,
        Divergences,
        atom_divergence,
        compound_divergence,
    )
    from curi.episodes import Episode, EpisodeSampler, EpisodeSpec
    from curi.errors import BankError, ConceptError, ConfigError, CuriError, SplitError
    from curi.executor import evaluate
    from curi.grammar import sample_concepts
    from curi.posterior import Posterior
    from curi.predictors import easiness
    from curi.splits import Split, list_splits, make_split
    from curi.tasks import RuleTaskSampler

__all__ = [
    "BankConfig",
    "BankError",
    "Concept",
    "ConceptBank",
    "ConceptError",
    "ConfigError",
    "DivergenceIndex",
    "Divergences",
    "Episode",
    "EpisodeSampler",
    "EpisodeSpec",
    "Posterior",
    "RuleTaskSampler",
    "CuriError",
    "Split",
    "SplitError",
    "atom_divergence",
    "build_bank",
    "compound_divergence",
    "easiness",
    "evaluate",
    "list_splits",
    "load_bank",
    "make_split",
    "open_bank",
    "parse",
    "sample_concepts",
]
