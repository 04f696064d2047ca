"""The prompt of a CURI episode for a language model: the support scenes in words with their
labels, then one query scene, in the text form of `curi.renderers.text` (``context:``, one
``example: <scene> => <answer>`` line per support scene, ``request: scene: <scene>``), the
answer read as the log-likelihood of ``" => <answer>"``. Two scene wordings: ``full`` (the
renderer's clauses, ``small red rubber cube at (3, 5)``) and ``compact`` (seven characters an
object, ``srdrc35``); and the parser that reads a prompt back into scene records."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np

from curi.errors import ConfigError, TextFormatError
from curi.renderers.text import parse_input, scene_text
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES
from curi.validate import choice

__all__ = [
    "DELIMITER",
    "WORDINGS",
    "check_answers",
    "parse_prompt",
    "prompt_head",
    "record_text",
    "scene_texts",
]

WORDINGS = ("full", "compact")
#: What joins a prompt and its answer (lm-eval's ``target_delimiter``), as in an example line.
DELIMITER = " => "
REQUEST = "request: scene: "

# compact codes, one per value: size 1 letter, colour 2, material 1, shape 1, then x and y
_SIZE = {"small": "s", "large": "l"}
_COLOR = {
    "gray": "gy",
    "red": "rd",
    "blue": "bl",
    "green": "gn",
    "brown": "br",
    "purple": "pu",
    "cyan": "cy",
    "yellow": "ye",
}
_MATERIAL = {"rubber": "r", "metal": "m"}
_SHAPE = {"cube": "c", "sphere": "s", "cylinder": "y"}
_COMPACT = re.compile(r"([sl])(gy|rd|bl|gn|br|pu|cy|ye)([rm])([csy])([1-8])([1-8])")
_FROM = {
    "size": {v: k for k, v in _SIZE.items()},
    "color": {v: k for k, v in _COLOR.items()},
    "material": {v: k for k, v in _MATERIAL.items()},
    "shape": {v: k for k, v in _SHAPE.items()},
}


def check_answers(answers: Sequence[str]) -> tuple[str, str]:
    """The two answer words (negative, positive): distinct, non-empty, one line each, without
    the delimiter.

    Raises:
        ConfigError: anything else.
    """
    a = [str(x) for x in answers] if not isinstance(answers, str) else []
    if len(a) != 2 or a[0] == a[1] or any(not w.strip() or "\n" in w or "=>" in w for w in a):
        raise ConfigError(
            f"answers must be two distinct words (negative, positive), got {answers!r}"
        )
    return a[0], a[1]


# every object's clause in each wording, by its code (size, colour, material, shape, x, y)
_CODES = list(itertools.product(SIZES, COLORS, MATERIALS, SHAPES, range(9), range(9)))
_OBJECTS = {
    "full": [f"{z} {c} {m} {s} at ({x}, {y})" for z, c, m, s, x, y in _CODES],
    "compact": [
        f"{_SIZE[z]}{_COLOR[c]}{_MATERIAL[m]}{_SHAPE[s]}{x}{y}" for z, c, m, s, x, y in _CODES
    ],
}
_JOIN = {"full": "; ", "compact": " "}


def scene_texts(bank, ids: Sequence[int], wording: str = "full") -> list[str]:
    """The text of the bank's scenes `ids` in a wording (``full``: the text of
    `curi.renderers.text.scene_text`), one clause table lookup per object."""
    choice(wording, "wording", WORDINGS)
    ids = np.asarray(ids, np.int64)
    counts = np.asarray(bank.scenes.n_objects)[ids].tolist()
    p = np.asarray(bank.scenes.props)[ids].astype(
        np.int32
    )  # (K, 5, 6): shape, color, material, size, x, y
    code = ((((p[..., 3] * 8 + p[..., 1]) * 2 + p[..., 2]) * 3 + p[..., 0]) * 9 + p[..., 4]) * 9
    code = (code + p[..., 5]).tolist()  # (K, 5); padding slots are never read
    table, join = _OBJECTS[wording], _JOIN[wording]
    return [join.join([table[c] for c in row[:n]]) for n, row in zip(counts, code, strict=True)]


def record_text(record: dict, wording: str = "full") -> str:
    """One scene record (`ConceptBank.scene_records`, or an exported episode's) in a wording."""
    if wording == "full":
        return scene_text(record)
    objs = record["objects"] if isinstance(record, dict) else record
    try:
        return " ".join(
            f"{_SIZE[o['size']]}{_COLOR[o['color']]}{_MATERIAL[o['material']]}{_SHAPE[o['shape']]}"
            f"{int(o['x'])}{int(o['y'])}"
            for o in objs
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"the record is not a scene record: {e!r}") from None


def prompt_head(support: Sequence[str], labels: Sequence[int], answers: Sequence[str]) -> str:
    """The support part of a prompt: ``context:`` and one example line per support scene."""
    lines = ["context:"]
    lines += [
        f"example: {s}{DELIMITER}{answers[int(y)]}" for s, y in zip(support, labels, strict=True)
    ]
    return "\n".join(lines) + "\n"


def _full(scene: str, line: int) -> str:
    """A compact scene as the full wording (for `parse_input`)."""
    out = []
    for token in scene.split(" "):
        m = _COMPACT.fullmatch(token)
        if m is None:
            raise TextFormatError(f"line {line}: {token[:20]!r} is not a compact object")
        size, color, material, shape = (_FROM[k][m[i + 1]] for i, k in enumerate(_FROM))
        out.append(f"{size} {color} {material} {shape} at ({m[5]}, {m[6]})")
    return "; ".join(out)


def parse_prompt(
    text: str, *, wording: str = "full", answers: Sequence[str] = ("0", "1")
) -> tuple[list[dict], np.ndarray, dict]:
    """Read a prompt back into its support records, their labels and the query record, with
    the parser of `curi.renderers.text` (the answer words are read as 0 / 1 first).

    Returns:
        (support records ``{"objects": [...]}``, (S,) int labels, the query record).

    Raises:
        TextFormatError: a line that is not in the format, naming it.
    """
    neg, pos = check_answers(answers)
    word = {neg: "0", pos: "1"}
    lines = text.rstrip("\n").split("\n")
    for n, line in enumerate(lines):
        if line.startswith("example: "):
            scene, sep, label = line[len("example: ") :].rpartition(DELIMITER)
            if not sep or label not in word:
                raise TextFormatError(
                    f"line {n + 1}: expected 'example: <scene>{DELIMITER}{neg}|{pos}'"
                )
            scene = _full(scene, n + 1) if wording == "compact" else scene
            lines[n] = f"example: {scene}{DELIMITER}{word[label]}"
        elif line.startswith(REQUEST) and wording == "compact":
            lines[n] = REQUEST + _full(line[len(REQUEST) :], n + 1)
    parsed = parse_input("\n".join(lines))
    if parsed["request"]["kind"] != "scene" or parsed["context_rules"]:
        raise TextFormatError("a CURI episode prompt asks about one scene and states no rule")
    labels = np.array([e["label"] for e in parsed["support"]], np.int8)
    support = [{"objects": e["objects"]} for e in parsed["support"]]
    return support, labels, {"objects": parsed["request"]["objects"]}
