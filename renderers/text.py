"""Text modality (docs/rules.md, "The text form"; Conceptual SCAN is text to text): a scene as
one clause per object (size, colour, material, shape, location), a rule as its program, a
rule-query task as one ``input`` per request (the context, then the request) with the
``target`` ``"reply qualifier"``; and the parser that reads an input back.

Not a `Renderer` of the registry: those give float tensors that an encoder of
`curi.models` reads, and every registered modality is trained; text goes to a
sequence-to-sequence model of the user's choice instead (JSON lines and parquet,
`curi.renderers.text_export`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from curi.errors import TextFormatError  # re-exported: its documented place
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES

__all__ = ["TextFormatError", "TextRenderer", "parse_input", "scene_text"]

_KINDS = ("implies", "equals", "excludes")
# one clause per (size, colour, material, shape): "small red rubber cube"
_CLAUSE = [
    [[[f"{z} {c} {m} {s}" for s in SHAPES] for m in MATERIALS] for c in COLORS] for z in SIZES
]
_AT = [[f" at ({x}, {y})" for y in range(9)] for x in range(9)]
_OBJECT = re.compile(r"(\w+) (\w+) (\w+) (\w+) at \((\d), (\d)\)")


def scene_text(record: dict) -> str:
    """One scene record (`ConceptBank.scene_records`) as text: its objects' clauses, in the
    record's order, joined by ``"; "``, e.g. ``small red rubber cube at (3, 5); ...``.

    Raises:
        ValueError: an object with an unknown property value or without a location.
    """
    parts = []
    for k, o in enumerate(record["objects"] if isinstance(record, dict) else record):
        try:
            clause = _CLAUSE[SIZES.index(o["size"])][COLORS.index(o["color"])][
                MATERIALS.index(o["material"])
            ][SHAPES.index(o["shape"])]
            parts.append(clause + _AT[int(o["x"])][int(o["y"])])
        except (KeyError, ValueError, IndexError) as e:
            raise ValueError(f"object {k} of the record is not a scene object: {e!r}") from None
    return "; ".join(parts)


class TextRenderer:
    """Scenes and rule-query tasks as text.

    Args:
        bank: the `ConceptBank` whose scene ids tasks refer to (scene text is then read from
            its arrays, not from records, which is much faster); None to render records only.
    """

    name = "text"

    def __init__(self, bank=None):
        self.bank = bank
        if bank is not None:
            scenes = bank.scenes
            self._n = np.asarray(scenes.n_objects)
            self._props = np.asarray(scenes.props)  # (N, 5, 6): shape, color, material, size, x, y

    def scenes(self, ids: Sequence[int]) -> list[str]:
        """The text of the bank's scenes `ids` (same as `scene_text` of their records)."""
        if self.bank is None:
            raise ValueError("TextRenderer(bank) is needed to render scenes by id")
        ids = np.asarray(ids, np.int64)
        counts = self._n[ids].tolist()
        props = self._props[ids].tolist()
        out = []
        for n, objs in zip(counts, props, strict=True):
            out.append(
                "; ".join(_CLAUSE[o[3]][o[1]][o[2]][o[0]] + _AT[o[4]][o[5]] for o in objs[:n])
            )
        return out

    def context(self, task: dict, support: Sequence[str] | None = None) -> list[str]:
        """The context lines of a task (``task.to_dict()`` form): one ``example: <scene> =>
        <label>`` per support example, one ``rule: <kind> <program> => 1`` per asserted rule.
        `support`: the support scenes' text, when already rendered (e.g. from records)."""
        if support is None:
            support = self.scenes([e["id"] for e in task["support"]])
        lines = [
            f"example: {s} => {e['label']}" for s, e in zip(support, task["support"], strict=True)
        ]
        lines += [f"rule: {r['kind']} {r['rule']} => 1" for r in task["context_rules"]]
        return lines

    def rows(
        self,
        task: dict,
        *,
        support: Sequence[str] | None = None,
        scenes: dict[int, str] | None = None,
    ) -> list[dict]:
        """One row per request of a task: ``input`` (context, then ``request: ...``),
        ``target`` (``"reply qualifier"``) and the structured fields beside them.

        Args:
            task: a task's ``to_dict()``.
            support, scenes: text already rendered for the support scenes (in order) and for
                the requested scenes (by id); otherwise read from the bank.
        """
        head = "\n".join(["context:", *self.context(task, support), ""])
        asked = [r["id"] for r in task["requests"] if r["kind"] == "scene"]
        if scenes is None:
            scenes = dict(zip(asked, self.scenes(asked), strict=True)) if asked else {}
        out = []
        for j, r in enumerate(task["requests"]):
            is_scene = r["kind"] == "scene"
            ask = f"scene: {scenes[r['id']]}" if is_scene else f"{r['kind']} {r['rule']}"
            out.append(
                {
                    "input": f"{head}request: {ask}",
                    "target": f"{r['reply']} {r['qualifier']}",
                    "task": task.get("index"),
                    "request": j,
                    "concept": task["concept"],
                    "kind": r["kind"],
                    "rule": None if is_scene else r["rule"],
                    "scene": r["id"] if is_scene else None,
                    "label": r.get("label"),
                    "reply": r["reply"],
                    "qualifier": r["qualifier"],
                    "context_rules": len(task["context_rules"]),
                }
            )
        return out


def parse_input(text: str) -> dict:
    """Read an ``input`` written by `TextRenderer.rows` back into structured fields.

    Returns:
        ``{"support": [{"objects": [...], "label"}], "context_rules": [{"kind", "rule"}],
        "request": {"kind": "scene", "objects": [...]} | {"kind", "rule"}}``, objects with
        ``size``, ``color``, ``material``, ``shape``, ``x``, ``y``.

    Raises:
        TextFormatError: a line that is not in the format, naming it.
    """
    lines = text.split("\n")
    if not lines or lines[0] != "context:":
        raise TextFormatError("line 1: expected 'context:'")
    out: dict = {"support": [], "context_rules": [], "request": None}
    for n, line in enumerate(lines[1:], start=2):
        head, _, rest = line.partition(": ")
        if head == "example":
            scene, sep, label = rest.rpartition(" => ")
            if not sep or label not in ("0", "1"):
                raise TextFormatError(f"line {n}: expected 'example: <scene> => 0|1'")
            out["support"].append({"objects": _objects(scene, n), "label": int(label)})
        elif head == "rule":
            kind, _, program = rest.removesuffix(" => 1").partition(" ")
            if kind not in _KINDS or not rest.endswith(" => 1"):
                raise TextFormatError(f"line {n}: expected 'rule: <kind> <program> => 1'")
            out["context_rules"].append({"kind": kind, "rule": program})
        elif head == "request" and n == len(lines):
            kind, _, body = rest.partition(" ")
            if kind == "scene:":
                out["request"] = {"kind": "scene", "objects": _objects(body, n)}
            elif kind in _KINDS:
                out["request"] = {"kind": kind, "rule": body}
            else:
                raise TextFormatError(f"line {n}: unknown request kind {kind!r}")
        else:
            raise TextFormatError(f"line {n}: unexpected {line[:60]!r}")
    if out["request"] is None:
        raise TextFormatError(f"line {len(lines)}: the input ends without a request")
    return out


def _objects(scene: str, line: int) -> list[dict]:
    objs = []
    for clause in scene.split("; "):
        m = _OBJECT.fullmatch(clause)
        if (
            m is None
            or m[1] not in SIZES
            or m[2] not in COLORS
            or m[3] not in MATERIALS
            or m[4] not in SHAPES
        ):
            raise TextFormatError(f"line {line}: {clause[:60]!r} is not an object clause")
        objs.append(
            {
                "size": m[1],
                "color": m[2],
                "material": m[3],
                "shape": m[4],
                "x": int(m[5]),
                "y": int(m[6]),
            }
        )
    return objs
