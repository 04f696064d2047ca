"""curi: the CURI benchmark (productive concept learning under uncertainty), generated on one
machine from a seed. See README.md, and docs/ for the design, the speed and the fidelity to the
paper."""

__version__ = "0.1.0"

from curi.bank import BankConfig, ConceptBank, build_bank, load_bank, open_bank  # noqa: E402
from curi.concepts import Concept, parse  # noqa: E402
from curi.divergence import (  # noqa: E402
    DivergenceIndex,
    Divergences,
    atom_divergence,
    compound_divergence,
)
from curi.episodes import Episode, EpisodeSampler  # noqa: E402
from curi.errors import BankError, ConceptError, ConfigError, CuriError, SplitError  # noqa: E402
from curi.executor import evaluate  # noqa: E402
from curi.grammar import sample_concepts  # noqa: E402
from curi.posterior import Posterior  # noqa: E402
from curi.predictors import easiness  # noqa: E402
from curi.splits import Split, list_splits, make_split  # noqa: E402
from curi.tasks import RuleTaskSampler  # noqa: E402

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
