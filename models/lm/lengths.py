"""Prompt lengths of an exported task folder, in characters and in tokens of a model's
tokenizer, and the check that every prompt fits the model's context: lm-eval's Hugging Face
model cuts a longer prompt from the left (the first support examples) with only a warning."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from curi.errors import ConfigError
from curi.models.lm.task import doc_to_text, read_manifest, read_table
from curi.paths import regular_file

__all__ = ["check_context", "check_tokenizer", "load_tokenizer", "prompt_lengths"]

# A name of a model on the Hugging Face Hub: ``name`` or ``owner/name`` (letters, digits,
# ``-``, ``_``, ``.``); anything else given as a tokenizer is a path.
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def check_tokenizer(path: str | Path) -> None:
    """Refuse a tokenizer path that names nothing: a file or folder that is not there and that
    cannot be a model's name on the Hub either (``transformers`` then says "Repo id must be in
    the form ..."), and a file that is not a tokenizer.json (read: it is small and `tokenizers`
    loads it at once; a FIFO is refused unread). Cheap, so `curi lm export` checks it before
    its work.

    Raises:
        ConfigError: naming the path.
    """
    p = Path(path).expanduser()
    if p.exists():
        if not p.is_dir():
            _from_file(regular_file(p, "tokenizer"), path)
        return
    if str(path).endswith(".json") or not _HUB_NAME.fullmatch(str(path)):
        raise ConfigError(
            f"tokenizer={path} does not exist; give a tokenizer.json, a folder a "
            "tokenizer was saved to, or a model's name on the Hugging Face Hub"
        )


def load_tokenizer(path: str | Path):
    """A tokenizer: a ``tokenizer.json`` file (`tokenizers`) or a folder or name that
    ``transformers.AutoTokenizer`` opens. Returns a function text list -> token counts."""
    p = Path(path).expanduser()
    if p.is_file():
        tok = _from_file(p, path)
        return lambda texts: [len(e.ids) for e in tok.encode_batch(texts)]
    check_tokenizer(path)
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, ImportError) as e:
        raise ConfigError(f"cannot open the tokenizer {path}: {str(e).splitlines()[0]}") from None
    return lambda texts: [len(ids) for ids in tok(texts)["input_ids"]]


def _from_file(p: Path, path: str | Path):
    """The `tokenizers.Tokenizer` of the tokenizer.json `p` (given as `path`)."""
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(p))
    except Exception as e:  # the Rust binding raises a bare Exception on bad JSON
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"cannot open the tokenizer {path}: {first}") from None


def _stats(values) -> dict:
    v = np.asarray(values)
    return {"median": float(np.median(v)), "mean": round(float(v.mean()), 1), "max": int(v.max())}


def prompt_lengths(folder: str | Path, tokenizer=None) -> dict[str, dict]:
    """Per task: ``chars`` and (with `tokenizer`, a path or a `load_tokenizer` function)
    ``tokens`` of every prompt with its longer answer (``median``, ``mean``, ``max``)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    count = load_tokenizer(tokenizer) if isinstance(tokenizer, str | Path) else tokenizer
    answer = manifest["delimiter"] + max(manifest["answers"], key=len)
    out = {}
    for task in manifest["tasks"]:
        texts = [
            doc_to_text(folder, d) + answer for d in read_table(folder / f"{task}.docs.jsonl.gz")
        ]
        out[task] = {"chars": _stats([len(t) for t in texts])}
        if count is not None:
            out[task]["tokens"] = _stats(count(texts))
    return out


def check_context(folder: str | Path, tokenizer, max_length: int | None = None) -> dict:
    """`prompt_lengths` in tokens; with `max_length`, refuse prompts that do not fit.

    Raises:
        ConfigError: a prompt (with its answer) longer than `max_length` tokens, naming the
            task, how many and the longest.
    """
    lengths = prompt_lengths(folder, tokenizer)
    if max_length is not None:
        for task, info in lengths.items():
            if info["tokens"]["max"] > max_length:
                raise ConfigError(
                    f"{task}: prompts of up to {info['tokens']['max']} tokens do not fit the "
                    f"model's context of {max_length} (lm-eval would cut their first examples); "
                    "export with wording=compact, or use a model with a longer context"
                )
    return lengths
