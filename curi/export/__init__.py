"""Exporting episodes with their scene records, so they can be re-rendered in any modality
later: JSON lines (optionally gzip-compressed), parquet or WebDataset tar shards, each with a
small dataset card, optionally with every scene's rendered file (PNG or WAV bytes); and the
one reader of those files, which checks every episode (docs/reliability.md, "Exports").

The modules: `card` (the dataset card: its path, front matter and reader), `files` (formats,
shard names, the files an export owns), `media` (rendered files, found through entry
points), `formats` (the three writers), `write` (`export_episodes`), `read`
(`read_episode_file`), `parts` (sharded exports written by jobs). The public names below are
imported from their modules on first use (PEP 562), so that importing one module (`parts`,
by a command's checks) does not import the sampler."""

from typing import TYPE_CHECKING

from curi.lazy import lazy_names

_EXPORTS = {
    "curi.errors": ["EpisodeFileError"],
    "curi.export.card": ["CARD_FORMAT", "card_path", "read_card"],
    "curi.export.files": ["FORMATS"],
    "curi.export.formats": ["parquet_schema"],
    "curi.export.media": ["MEDIA_GROUP", "Media", "check_media", "get_media", "list_media"],
    "curi.export.read": ["check_episode_file", "count_episodes", "read_episode_file"],
    "curi.export.write": [
        "check_export_options",
        "check_export_path",
        "check_render_options",
        "export_episodes",
    ],
}
__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names, for type checkers and editors
    from curi.errors import EpisodeFileError
    from curi.export.card import CARD_FORMAT, card_path, read_card
    from curi.export.files import FORMATS
    from curi.export.formats import parquet_schema
    from curi.export.media import MEDIA_GROUP, Media, check_media, get_media, list_media
    from curi.export.read import check_episode_file, count_episodes, read_episode_file
    from curi.export.write import (
        check_export_options,
        check_export_path,
        check_render_options,
        export_episodes,
    )

__all__ = [
    "CARD_FORMAT",
    "EpisodeFileError",
    "FORMATS",
    "MEDIA_GROUP",
    "Media",
    "card_path",
    "check_episode_file",
    "check_export_options",
    "check_export_path",
    "check_media",
    "check_render_options",
    "count_episodes",
    "export_episodes",
    "get_media",
    "list_media",
    "parquet_schema",
    "read_card",
    "read_episode_file",
]
