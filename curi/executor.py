"""Vectorised concept execution by bit-slicing (docs/design.md, "Bit-sliced execution").

Scenes are turned once into bit planes: for every property, object slot and bit of the value's
code, one bit per scene, 64 scenes to a machine word. A concept is then evaluated for all scenes
at once with bitwise logic: equality and ``>`` are comparator circuits over the planes, ``count=``
is a ripple adder, quantifiers reduce over the object slots. Values that depend on the bound
object carry one row per slot of ``x``. The same code runs on numpy arrays (CPU) and on torch
tensors (any device); both give identical bits. Every code width is derived from the vocabulary
it must hold, so each value the parser accepts is represented exactly (docs/design.md,
"Bit-sliced execution"; docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curi.bits import pack_rows, unpack_rows
from curi.concepts import CONSTANT_TYPES, NUMBERS, PROPERTY_FUNCS, Concept, Node, parse
from curi.errors import ConceptError
from curi.scenes import (
    COLORS,
    MATERIALS,
    MAX_OBJECTS,
    MIN_OBJECTS,
    NUM_BINS,
    PROPERTIES,
    SHAPES,
    SIZES,
    Scenes,
    records_to_props,
)
from curi.validate import choice

__all__ = ["LOCATION_BINS", "BitScenes", "evaluate", "execute"]

#: How an integer literal compared with a location reads (docs/concepts.md, "Semantics"):
#: ``spec`` (bins 1..8, the literal k is bin k) or ``legacy`` (the original release binned 0..7
#: while its constants are 1..8: the literal k is then our bin k + 1, and 8 is never met;
#: docs/fidelity.md). Only the literal's code changes, so one set of scene planes serves both.
LOCATION_BINS = ("spec", "legacy")


def _width(max_code: int) -> int:
    """Bits that hold every code 0..max_code."""
    return max(1, int(max_code).bit_length())


_MAX_LITERAL = max(int(n) for n in NUMBERS)  # the largest integer literal the parser accepts
# Bits per value code, by value type. Locations are coded bin - 1 (bins 1..NUM_BINS; a literal
# 1.._MAX_LITERAL compared with a location is coded the same way). Numbers are counts
# 0..MAX_OBJECTS or literals 1.._MAX_LITERAL: 4 bits, as the literal 8 needs them (3 bits once
# turned 8 into 0). Counts themselves are summed in _COUNT_BITS planes, padded to the number width.
_VALUE_BITS = {
    "color": _width(len(COLORS) - 1),
    "shape": _width(len(SHAPES) - 1),
    "material": _width(len(MATERIALS) - 1),
    "size": _width(len(SIZES) - 1),
    "location": _width(max(NUM_BINS, _MAX_LITERAL) - 1),
    "number": _width(max(MAX_OBJECTS, _MAX_LITERAL)),
}
_COUNT_BITS = _width(MAX_OBJECTS)
_NBITS = {p: _VALUE_BITS[PROPERTY_FUNCS[p + "?"]] for p in PROPERTIES}
_FUNC_PROP = {f: f[:-1] for f in PROPERTY_FUNCS}
_CODE = {v: i for vocab in (COLORS, SHAPES, MATERIALS, SIZES) for i, v in enumerate(vocab)}


@dataclass
class BitScenes:
    """Scenes as bit planes (see module docstring); arrays are numpy or torch.

    Attributes:
        num_scenes: N.
        valid: (5, W) words, bit set where object slot k exists.
        planes: property -> (bits, 5, W) words, bit b of the slot's value code.
        scene_mask: (W,) words, bit set for real scenes (clears the padding of the last word).
        location_bins: how location literals read (`LOCATION_BINS`).
    """

    num_scenes: int
    valid: object
    planes: dict[str, object]
    scene_mask: object
    location_bins: str = "spec"

    @property
    def num_words(self) -> int:
        return int(self.scene_mask.shape[-1])

    @classmethod
    def from_arrays(
        cls, n_objects: np.ndarray, props: np.ndarray, *, location_bins: str = "spec"
    ) -> BitScenes:
        """Build planes from columnar arrays: n_objects (N,), props (N, 5, 6) with location
        bins 1..8; `location_bins` says how location literals read (`LOCATION_BINS`)."""
        choice(location_bins, "location_bins", LOCATION_BINS)
        n = len(n_objects)
        props = np.asarray(props)
        slot_ok = np.arange(MAX_OBJECTS)[None, :] < np.asarray(n_objects)[:, None]  # (N, 5)
        planes = {}
        for j, name in enumerate(PROPERTIES):
            code = props[..., j].astype(np.int16)
            if name.startswith("location"):
                code = code - 1
            code = np.where(slot_ok, code, 0)
            bits = np.stack([(code >> b) & 1 for b in range(_NBITS[name])])  # (B, N, 5)
            planes[name] = pack_rows(bits.transpose(0, 2, 1))  # (B, 5, W)
        mask = pack_rows(np.ones((1, n), bool))[0]
        return cls(n, pack_rows(slot_ok.T), planes, mask, location_bins)

    @classmethod
    def from_scenes(cls, scenes: Scenes, *, location_bins: str = "spec") -> BitScenes:
        return cls.from_arrays(scenes.n_objects, scenes.props, location_bins=location_bins)

    def to(self, device) -> BitScenes:
        """A torch copy on `device` (int64 words, same bits)."""
        import torch

        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a).view(np.int64)).to(device)

        return BitScenes(
            self.num_scenes,
            t(self.valid),
            {k: t(v) for k, v in self.planes.items()},
            t(self.scene_mask),
            self.location_bins,
        )


# --- bitwise algebra where an operand may be a Python bool (a constant plane) --------------
def _and(a, b):
    if a is True:
        return b
    if b is True:
        return a
    if a is False or b is False:
        return False
    return a & b


def _or(a, b):
    if a is False:
        return b
    if b is False:
        return a
    if a is True or b is True:
        return True
    return a | b


def _not(a):
    if isinstance(a, bool):
        return not a
    return ~a


def _xor(a, b):
    if isinstance(a, bool) and isinstance(b, bool):
        return a != b
    if isinstance(a, bool):
        return _not(b) if a else b
    if isinstance(b, bool):
        return _not(a) if b else a
    return a ^ b


def _xnor(a, b):
    if isinstance(a, bool):
        return b if a else _not(b)
    if isinstance(b, bool):
        return a if b else _not(a)
    return ~(a ^ b)


def _eq(a: list, b: list):
    """Bitwise equality of two bit-sliced integers (lists of planes, LSB first)."""
    out = True
    for x, y in zip(a, b, strict=True):
        out = _and(out, _xnor(x, y))
    return out


def _gt(a: list, b: list):
    """Bitwise a > b for bit-sliced unsigned integers (LSB first)."""
    out, same = False, True
    for x, y in zip(reversed(a), reversed(b), strict=True):
        out = _or(out, _and(same, _and(x, _not(y))))
        same = _and(same, _xnor(x, y))
    return out


def _const_planes(value: int, nbits: int) -> list:
    """A constant as bit planes (Python bools, which fold into the circuits)."""
    if not 0 <= value < 1 << nbits:  # never drop high bits silently
        raise ValueError(f"value code {value} does not fit in {nbits} bits")
    return [bool((value >> b) & 1) for b in range(nbits)]


@dataclass
class _Val:
    """A non-boolean value: `planes` LSB first, each (X, W) with X in {1, 5} or a bool."""

    vtype: str  # color, shape, material, size, location, number, or int (a literal)
    planes: list | None = None
    literal: int | None = None

    def coded(self, vtype: str, nbits: int, location_shift: int = 1) -> list:
        """The value as `nbits` planes: a literal's constant code (a location literal k is
        code k - `location_shift`), or the stored planes padded with constant zeros."""
        if self.planes is not None:
            return self.planes + [False] * (nbits - len(self.planes))
        code = self.literal - location_shift if vtype == "location" else self.literal
        return _const_planes(code, nbits)


@dataclass
class _SetProp:
    prop: str
    excludes_x: bool


class _Evaluator:
    def __init__(self, bs: BitScenes):
        self.bs = bs
        self.bits = dict(_VALUE_BITS)
        self.location_shift = 1
        if bs.location_bins == "legacy":  # literal codes 0..8: one more (constant) plane
            self.bits["location"] = _width(_MAX_LITERAL)
            self.location_shift = 0
        # membership of object slot i in S-x, for every slot of x: (5, W) with row i cleared
        self._minus_x = {}

    def member(self, i: int, excludes_x: bool):
        """Membership bits of object slot i in S (1, W) or in S-x (5, W: one row per x)."""
        v = self.bs.valid[i : i + 1]
        if not excludes_x:
            return v
        if i not in self._minus_x:
            m = v.repeat(MAX_OBJECTS, 0) if isinstance(v, np.ndarray) else v.repeat(MAX_OBJECTS, 1)
            m[i] = 0
            self._minus_x[i] = m
        return self._minus_x[i]

    def compare(self, op: str, a: _Val, b: _Val):
        vtype = a.vtype if a.vtype != "int" else b.vtype
        if vtype == "int":
            vtype = "number"
        nb, shift = self.bits[vtype], self.location_shift
        pa, pb = a.coded(vtype, nb, shift), b.coded(vtype, nb, shift)
        return _eq(pa, pb) if op == "=" else _gt(pa, pb)

    def set_op(self, op: str, sp: _SetProp, v: _Val):
        vtype = PROPERTY_FUNCS[sp.prop + "?"]
        nb = self.bits[vtype]
        planes = self.bs.planes[sp.prop]
        stored = planes.shape[0]
        target = v.coded(vtype, nb, self.location_shift)
        acc = True if op == "all" else False
        count = [False] * _COUNT_BITS  # counts reach MAX_OBJECTS at most: no overflow
        for i in range(MAX_OBJECTS):
            elem = [planes[b, i : i + 1] for b in range(stored)] + [False] * (nb - stored)
            hit = _eq(elem, target)
            m = self.member(i, sp.excludes_x)
            if op == "all":
                acc = _and(acc, _or(hit, _not(m)))
            elif op == "any":
                acc = _or(acc, _and(hit, m))
            else:  # ripple-add one bit into the bit-sliced count
                carry = _and(hit, m)
                for b in range(len(count)):
                    count[b], carry = _xor(count[b], carry), _and(count[b], carry)
        if op == "count=":
            pad = [False] * (_VALUE_BITS["number"] - _COUNT_BITS)  # constant planes: free
            return _Val("number", planes=count + pad)
        return acc

    def node(self, n: Node):
        op, args = n.op, n.args
        if not args:
            if op == "S" or op == "S-x":
                return op
            if op == "x":
                return "x"
            if op.isdigit():
                return _Val("int", literal=int(op))
            return _Val(CONSTANT_TYPES[op], literal=_CODE[op])
        if op in PROPERTY_FUNCS:
            prop = _FUNC_PROP[op]
            if args[0].op == "x":
                p = self.bs.planes[prop]
                return _Val(PROPERTY_FUNCS[op], planes=[p[b] for b in range(p.shape[0])])
            return _SetProp(prop, args[0].op == "S-x")
        vals = [self.node(a) for a in args]
        if op == "and":
            return _and(vals[0], vals[1])
        if op == "or":
            return _or(vals[0], vals[1])
        if op == "not":
            return _not(vals[0])
        if op in ("=", ">"):
            return self.compare(op, vals[0], vals[1])
        return self.set_op(op, vals[0], vals[1])

    def concept(self, c: Concept):
        body = self.node(c.body)  # (X, W) or bool
        bs = self.bs
        if isinstance(body, bool):
            res = bs.scene_mask if body else bs.scene_mask & 0
        elif body.shape[0] == 1 or c.quantifier is None:
            res = body[0]
        elif c.quantifier == "exists=":
            res = _reduce_or(body & bs.valid)
        else:
            res = _reduce_and(body | ~bs.valid)
        return res & bs.scene_mask


def _reduce_or(a):
    out = a[0]
    for k in range(1, a.shape[0]):
        out = out | a[k]
    return out


def _reduce_and(a):
    out = a[0]
    for k in range(1, a.shape[0]):
        out = out & a[k]
    return out


def execute(concepts, bs: BitScenes):
    """Truth rows of `concepts` on the scenes of `bs`.

    Args:
        concepts: `Concept`s or postfix strings.
        bs: scenes as bit planes (numpy or torch).

    Returns:
        (len(concepts), W) words of the same array type as `bs` (bit s of row i: concept i
        holds on scene s; padding bits are zero).
    """
    ev = _Evaluator(bs)
    rows = [ev.concept(c if isinstance(c, Concept) else parse(c)) for c in concepts]
    if isinstance(bs.scene_mask, np.ndarray):
        return np.stack(rows) if rows else np.zeros((0, bs.num_words), np.uint64)
    import torch

    return torch.stack(rows) if rows else bs.scene_mask.new_zeros((0, bs.num_words))


def evaluate(
    concept: Concept | str, records: list[dict], *, location_bins: str = "spec"
) -> np.ndarray:
    """Evaluate one concept on a few scene records (each object needs shape, color, material,
    size, x and y). Returns a boolean array, one entry per record. `location_bins`: how location
    literals read (`LOCATION_BINS`; a bank's ``config["location_bins"]``).

    Records must be scenes as CURI draws them, of `MIN_OBJECTS`..`MAX_OBJECTS` objects (paper
    section 3): on one object, ``S-x`` is empty and a concept such as "all the others are
    blue" would hold vacuously, which no scene of the benchmark can show.

    Raises:
        ConceptError: the concept string does not parse, or a record holds too few or too
            many objects or an unknown property value.
    """
    c = concept if isinstance(concept, Concept) else parse(concept)
    try:
        n_obj, props = records_to_props(records, min_objects=MIN_OBJECTS)
    except ValueError as e:
        raise ConceptError(f"cannot evaluate {str(c)!r} on these records: {e}") from None
    bs = BitScenes.from_arrays(n_obj, props, location_bins=location_bins)
    return unpack_rows(execute([c], bs), len(records))[0]
