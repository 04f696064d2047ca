"""Few-shot episodes (CURI paper, section 3 and Appendix D), their one home: what defines a
stream of them (`EpisodeSpec`, `spec`), the reference sampler that builds episode i on demand
(`EpisodeSampler`, `sampler`), many at once (`batch`) and the compiled draws both make with
`curi.pcg` (`draws`)."""

from curi.episodes.sampler import Episode, EpisodeSampler
from curi.episodes.spec import (
    NEGATIVE_SAMPLERS,
    NEGATIVES,
    PAPER_SIZES,
    QUERY_NEGATIVES,
    EpisodeSpec,
)

__all__ = [
    "Episode",
    "EpisodeSampler",
    "EpisodeSpec",
    "NEGATIVES",
    "NEGATIVE_SAMPLERS",
    "PAPER_SIZES",
    "QUERY_NEGATIVES",
]
