"""The dataset card of an export, ``<out>.card.md`` beside it: where it lives, its YAML front
matter (the dataset-card convention of the Hugging Face Hub), which lists every file of the
export with its episode count, size and SHA-256, the reader of that front matter, and the
card's text (docs/reliability.md, "Exports")."""

from __future__ import annotations

from pathlib import Path

from curi.errors import EpisodeFileError
from curi.paths import read_text

__all__ = ["AGAIN", "CARD_FORMAT", "card_of", "card_path", "card_text", "read_card"]

CARD_FORMAT = 1  # version of the card's front matter (the list of files and their checksums)
AGAIN = "export it again with `curi episodes ... out=FILE`"


def card_path(out: str | Path) -> Path:
    """The dataset card of the export ``out``: ``<out>.card.md`` beside it (for tar shards,
    ``out`` is the ``<name>.tar`` given to `curi.export.export_episodes`)."""
    out = Path(out)
    return out.with_name(out.name + ".card.md")


def read_card(out: str | Path) -> dict | None:
    """The front matter of the card of the export ``out`` (`card_path`), checked: its file
    list, the format of its front matter and that it describes ``out``; None when there is no
    card, or a card without front matter (written before curi listed an export's files).

    Raises:
        EpisodeFileError: a card that cannot be read, is malformed, or describes another
            export.
    """
    out = Path(out)
    card = card_path(out)
    return card_of(out, card) if card.is_file() else None


def load_card(card: Path) -> dict | None:
    """The front matter of a card; None when it has none (a card written before curi listed
    the files of an export)."""
    import yaml

    text = read_text(card, "card", EpisodeFileError)
    if not text.startswith("---\n"):
        return None
    end = text.find("\n---\n", 3)
    try:
        meta = yaml.safe_load(text[4:end]) if end > 0 else None
    except yaml.YAMLError:
        meta = None
    files = meta.get("files") if isinstance(meta, dict) else None
    entry = {"name": str, "episodes": int, "bytes": int, "sha256": str}
    ok = (
        isinstance(files, list)
        and meta.get("curi_export") == CARD_FORMAT
        and isinstance(meta.get("export"), str)
        and all(
            isinstance(f, dict) and all(isinstance(f.get(k), t) for k, t in entry.items())
            for f in files
        )
        and meta.get("episodes") == sum(f["episodes"] for f in files)
    )
    if not ok:
        raise EpisodeFileError(f"the card {card} is malformed (its file list); {AGAIN}")
    return meta


def card_of(export: Path, card: Path) -> dict | None:
    """The front matter of `card` (`load_card`), once it describes `export`."""
    meta = load_card(card)
    if meta is not None and meta["export"] != export.name:
        raise EpisodeFileError(
            f"the card {card} describes the export {meta['export']!r}, not {export.name}; {AGAIN}"
        )
    return meta


def card_text(meta: dict, bank, split, written: str) -> str:
    """The card of an export: `meta` as YAML front matter, then what the export holds
    (`written` says how it is stored) and how to regenerate it."""
    import yaml

    n = meta["episodes"]
    return (
        f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n\n"
        f"# CURI episodes: {split.name} / {meta['subset']}\n\n"
        f"- episodes: {n} (indices 0..{n - 1} of `EpisodeSampler`), {written}\n"
        f"- negatives: {meta['negatives']} (query: {meta['query_negatives']}); "
        f"seed: {meta['seed']}\n"
        f"- bank: {bank.path} ({len(bank)} concepts, {bank.num_scenes} scenes, "
        f"curi {bank.manifest['version']})\n"
        f"- split sizes: {split.sizes()}\n"
        "- format: each episode is a JSON object: `concept_text` (canonical postfix), "
        "`support_ids`, `support_labels`, `query_ids`, `query_labels` (1 positive, 0 "
        "negative, in a seeded random order), `support_records` / `query_records` (every "
        "object's shape, color, material, size, location bins x / y, 3D position, rotation "
        "and pixel centre).\n"
        + (
            f"- rendered files: `<key>.support_NN{meta['media']}` per scene (tar), or the "
            "`support_*s` / `query_*s` columns (parquet)\n"
            if meta["media"]
            else ""
        )
        + "- files: the front matter above lists each with its episode count, size in bytes and "
        "SHA-256; readers check them.\n"
        "- regenerate exactly: the same bank config, split, subset, negatives and seed.\n"
    )
