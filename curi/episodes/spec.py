"""What defines a stream of episodes (CURI paper, section 3 and Appendix D), in one value:
`EpisodeSpec`. Its fields are checked when it is made, before any bank or torch work;
`EpisodeSpec.check` checks it against a bank as soon as the bank opens, before any episode is
drawn. Every sampler (`EpisodeSampler`, the device sampler, `RuleTaskSampler`) and every
internal function that draws episodes takes one; the public entry points keep their keyword
arguments and build it (tests/test_episode_spec.py holds them to that)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from curi import validate
from curi.errors import ConfigError
from curi.posterior import NEGATIVES, NUM_NEGATIVES, NUM_POSITIVES
from curi.splits.base import SUBSETS, Split

__all__ = ["NEGATIVES", "NEGATIVE_SAMPLERS", "PAPER_SIZES", "QUERY_NEGATIVES", "EpisodeSpec"]

#: Episodes of a subset by default (the paper's sizes), by subset (`SUBSETS`).
PAPER_SIZES = {"train": 500_000, "val": 5_000, "test": 20_000}
#: Negatives of the query set: as the support's (`NEGATIVES`) or ``random`` (the original
#: release: random scenes not satisfying h, whatever the support used).
QUERY_NEGATIVES = (*NEGATIVES, "random")
#: How negatives are drawn: ``paper`` (Appendix D, the default) or ``matched`` (the same pools,
#: each negative with the object count and number of distinct colours of a positive:
#: docs/fidelity.md, "Shortcut audit").
NEGATIVE_SAMPLERS = ("paper", "matched")


@dataclass(frozen=True)
class EpisodeSpec:
    """A stream of episodes: episode i is a pure function of (bank, spec, i).

    Attributes:
        split: a `Split` or the name of one (`curi.splits.list_splits`), resolved by `check`.
        subset: ``train``, ``val`` or ``test`` (`SUBSETS`).
        negatives: ``hard`` (paper Appendix D) or ``easy`` (`NEGATIVES`).
        seed: the seed, an integer in [0, 2**63 - 1].
        query_negatives: the query set's negatives (`QUERY_NEGATIVES`); None: as `negatives`.
        negative_sampler: `NEGATIVE_SAMPLERS` (`curi.episodes.EpisodeSampler`).
        num_positives, num_negatives: positives and negatives per set (5 and 20).
        size: the number of episodes; None: the paper's size of the subset (`PAPER_SIZES`).
        shuffle: each set in a seeded random order (False: positives first).

    Raises:
        OptionError: a value outside its closed set, naming the field and the valid values.
        ConfigError: a seed or size that is not an integer in its range.
    """

    split: Split | str
    subset: str
    negatives: str = "hard"
    seed: int = 0
    query_negatives: str | None = None
    negative_sampler: str = "paper"
    num_positives: int = NUM_POSITIVES
    num_negatives: int = NUM_NEGATIVES
    size: int | None = None
    shuffle: bool = True

    def __post_init__(self) -> None:
        validate.choice(self.negatives, "negatives", NEGATIVES)
        validate.choice(self.negative_sampler, "negative_sampler", NEGATIVE_SAMPLERS)
        query = self.negatives if self.query_negatives is None else self.query_negatives
        validate.choice(query, "query_negatives", QUERY_NEGATIVES)
        validate.choice(self.subset, "subset", SUBSETS)
        size = PAPER_SIZES[self.subset] if self.size is None else self.size
        fields = {
            "query_negatives": query,
            "seed": validate.seed(self.seed),
            "size": validate.integer(size, "size", low=1, high=validate.MAX_EPISODES),
            "num_positives": validate.integer(self.num_positives, "num_positives", low=1),
            "num_negatives": validate.integer(self.num_negatives, "num_negatives", low=1),
            "shuffle": bool(self.shuffle),
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    @property
    def split_name(self) -> str:
        """The split's name."""
        return self.split.name if isinstance(self.split, Split) else str(self.split)

    def replace(self, **changes) -> EpisodeSpec:
        """This spec with `changes` (checked again)."""
        return dataclasses.replace(self, **changes)

    def check(self, bank) -> EpisodeSpec:
        """This spec with its split resolved (`curi.make_split`), once the bank can supply its
        episodes: the subset has concepts, each with 2 x num_positives positives (support and
        query), and the scenes outside the commonest concept hold the 2 x num_negatives
        distinct negatives at least twice over (so that drawing them by rejection ends fast).

        Raises:
            ConfigError: a subset without concepts, or a size the bank cannot supply, naming
                the field and its valid range.
        """
        from curi.splits import make_split

        split = self.split if isinstance(self.split, Split) else make_split(bank, self.split)
        concepts = split.subset(self.subset)
        if len(concepts) == 0:
            raise ConfigError(f"split {split.name!r} has no {self.subset} concepts in this bank")
        counts = np.asarray(bank.counts)[concepts]
        most = max(1, int(counts.min()) // 2)
        validate.integer(self.num_positives, "num_positives", low=1, high=most)
        outside = bank.num_scenes - int(counts.max())
        validate.integer(self.num_negatives, "num_negatives", low=1, high=max(1, outside // 4))
        if counts.min() < 2 * self.num_positives:
            raise ConfigError(f"some concepts have fewer than {2 * self.num_positives} positives")
        return self if split is self.split else dataclasses.replace(self, split=split)
