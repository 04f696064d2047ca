"""The concept language as a left-to-right token machine (CURI paper, Appendix B.1): a type
stack over the postfix language says which tokens may come next, so that every sequence a
decoder completes under its mask is a concept `curi.parse` accepts, within the grammar's depth.
Constants may be typed holes (``<color>``, ``<int>``, ...) that the search fills later."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from curi.concepts import BINARY_BOOL, CONSTANT_TYPES, NUMBERS, PROPERTY_FUNCS, QUANTIFIERS
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES

__all__ = [
    "END",
    "HOLES",
    "HOLE_VALUES",
    "MAX_LEVELS",
    "PAD",
    "BOS",
    "TOKENS",
    "State",
    "allowed",
    "completes",
    "concept_text",
    "start",
    "step",
    "to_holes",
]

PAD, BOS, END = "<pad>", "<bos>", "<end>"
#: A typed hole stands for any constant of its type; ``<int>`` is a location bin or a number.
HOLE_VALUES: dict[str, tuple[str, ...]] = {
    "<color>": COLORS,
    "<shape>": SHAPES,
    "<material>": MATERIALS,
    "<size>": SIZES,
    "<int>": NUMBERS,
}
HOLES = tuple(HOLE_VALUES)
_HOLE_OF = {"color": "<color>", "shape": "<shape>", "material": "<material>", "size": "<size>"}
_HOLE_OF["int"] = "<int>"
_LEAF_TYPES = {**CONSTANT_TYPES, **{h: ("int" if h == "<int>" else h[1:-1]) for h in HOLES}}
_OPS = tuple(PROPERTY_FUNCS) + BINARY_BOOL + ("not", "=", ">", "all", "any", "count=")
#: Every token a program sequence may hold: specials, constants, holes, variables, operators,
#: then the three ends (a quantifier, or `END` for a collapsed concept).
TOKENS: tuple[str, ...] = (
    (PAD, BOS) + tuple(CONSTANT_TYPES) + HOLES + ("x", "S", "S-x") + _OPS + QUANTIFIERS + (END,)
)
#: Deepest body tree (a leaf is one level): the grammar's draws nest max_depth - 1 = 5 levels.
MAX_LEVELS = 5
_ORDERED = ("size", "location", "number", "int")


@dataclass(frozen=True)
class Item:
    """One stack entry: ``B`` (bool), ``V`` (a value), ``P`` (a set's property), ``O`` (the
    object x), ``S`` (a set); `vtype` for V and P; `role` of a V (``first`` or ``second``
    operand of a comparison, ``arg`` of a set operator); `const` for a constant or hole."""

    kind: str
    vtype: str = ""
    role: str = ""
    level: int = 1
    const: bool = False


@dataclass(frozen=True)
class State:
    """The machine's state after a prefix: its stack, whether it used x or S-x, and S-x."""

    stack: tuple[Item, ...] = ()
    mentions_x: bool = False
    uses_sx: bool = False
    done: bool = False


def start() -> State:
    """The state before the first token."""
    return State()


def _unify(a: str, b: str) -> str | None:
    """The common type of two compared values (None: they cannot be compared)."""
    if a == "int":
        a, b = b, a
    if b == "int":
        return a if a in ("location", "number") else None
    return a if a == b else None


def _role_after(stack: tuple[Item, ...], vtype: str, const: bool) -> str | None:
    """The role of a new value on top of `stack` (None: no value of `vtype` fits there)."""
    prev = stack[-1] if stack else None
    if prev is None or prev.kind == "B":
        return "first"
    if prev.kind == "P":
        return "arg" if _unify(prev.vtype, vtype) is not None else None
    if prev.kind == "V" and prev.role == "first":
        if _unify(prev.vtype, vtype) is None or (prev.const and const):
            return None  # constant-only comparisons are rejected by the grammar
        return "second"
    return None


def _push_value(state: State, vtype: str, const: bool, level: int, rest) -> State | None:
    role = _role_after(rest, vtype, const)
    if role is None:
        return None
    return State(rest + (Item("V", vtype, role, level, const),), state.mentions_x, state.uses_sx)


def _leaf(state: State, tok: str) -> State | None:
    st = state.stack
    if st and st[-1].kind in ("O", "S"):
        return None  # x and S must take a property function first
    if st and st[-1].kind == "V" and st[-1].role in ("second", "arg"):
        return None  # an operand pair waits for its operator
    if st and st[-1].kind == "B" and st[-1].level >= MAX_LEVELS:
        return None  # a deepest bool cannot be joined to another
    if tok in ("x", "S", "S-x"):
        prev = st[-1] if st else None
        if tok == "S" or tok == "S-x":
            # a set starts a set operator: after a bool, at the start, or a count compared
            ok = prev is None or prev.kind == "B"
            ok = ok or (
                prev.kind == "V" and prev.role == "first" and prev.vtype in ("number", "int")
            )
        else:
            first = prev is not None and prev.kind == "V" and prev.role == "first"
            ok = prev is None or prev.kind in ("B", "P") or (first and prev.vtype != "number")
        if not ok:
            return None
        item = Item("O") if tok == "x" else Item("S")
        mx = state.mentions_x or tok != "S"
        return State(st + (item,), mx, state.uses_sx or tok == "S-x")
    return _push_value(state, _LEAF_TYPES[tok], True, 1, st)


def _property(state: State, tok: str) -> State | None:
    st = state.stack
    if not st or st[-1].kind not in ("O", "S"):
        return None
    vt = PROPERTY_FUNCS[tok]
    rest = st[:-1]
    if st[-1].kind == "O":
        return _push_value(state, vt, False, 2, rest)
    return State(rest + (Item("P", vt, "", 2),), state.mentions_x, state.uses_sx)


def _reduce(state: State, tok: str) -> State | None:
    st = state.stack
    if tok == "not":
        if not st or st[-1].kind != "B":
            return None
        args = st[-1:]
    elif len(st) < 2:
        return None
    else:
        args = st[-2:]
    level = 1 + max(a.level for a in args)
    if level > MAX_LEVELS:
        return None
    rest = st[: -len(args)]
    a = args[0]
    b = args[-1]
    if tok in BINARY_BOOL:
        if a.kind != "B" or b.kind != "B":
            return None
    elif tok in ("=", ">"):
        if a.kind != "V" or b.kind != "V" or b.role != "second":
            return None
        t = _unify(a.vtype, b.vtype)
        if t is None or (tok == ">" and t not in _ORDERED):
            return None
    elif tok in ("all", "any", "count="):
        if a.kind != "P" or b.kind != "V" or b.role != "arg":
            return None
        if tok == "count=":
            return _push_value(state, "number", False, level, rest)
        if rest and rest[-1].kind != "B":
            return None
    if rest and level >= MAX_LEVELS:
        return None  # a deepest bool with more below it could never be joined
    return State(rest + (Item("B", level=level),), state.mentions_x, state.uses_sx)


def _end(state: State, tok: str) -> State | None:
    st = state.stack
    if len(st) != 1 or st[0].kind != "B":
        return None
    if tok == END:
        ok = not state.mentions_x
    else:
        ok = state.mentions_x and not (tok == "for-all=" and state.uses_sx)
    return State(st, state.mentions_x, state.uses_sx, True) if ok else None


def step(state: State, tok: str) -> State | None:
    """The state after `tok`, or None when `tok` cannot come next: it breaks the grammar, or
    no continuation could join the stack within the depth limit (a dead end)."""
    if state.done or tok in (PAD, BOS):
        return None
    if tok in _LEAF_TYPES or tok in ("x", "S", "S-x"):
        out = _leaf(state, tok)
    elif tok in PROPERTY_FUNCS:
        out = _property(state, tok)
    elif tok in QUANTIFIERS or tok == END:
        return _end(state, tok)
    else:
        out = _reduce(state, tok)
    return out if out is not None and _can_join(out.stack) else None


@lru_cache(maxsize=200_000)
def _can_join(stack: tuple[Item, ...]) -> bool:
    """Whether the stack's pending trees could still be joined into one bool of at most
    `MAX_LEVELS` levels. The stack is bools, then at its top a run of operands waiting for
    their operator, which can only end as one bool (`_run_level`). A postfix program can only
    reduce at its top, so the bools below are joined one by one from the top down, each join
    one level above the higher of its two trees."""
    levels = [it.level for it in stack if it.kind == "B"]
    run = tuple(it for it in stack if it.kind != "B")
    root = _run_level(run) if run else levels.pop() if levels else 0
    for level in reversed(levels):
        root = 1 + max(level, root)
    return root <= MAX_LEVELS


def _run_level(run: tuple[Item, ...]) -> int:
    """The lowest level of the bool a run of waiting operands can end as: a comparison's first
    value and what is built of its second, or a set's property and its argument."""
    head, rest = run[0], run[1:]
    if head.kind == "V" and head.role == "first":
        if rest:
            second = _value_level(rest)
        elif not head.const:
            second = 1  # a constant
        else:  # a constant is compared with an object's property, or with a count
            second = 3 if head.vtype == "number" else 2
        return 1 + max(head.level, second)
    if head.kind == "P":  # all / any of the set's property and a value
        return 1 + max(head.level, _value_level(rest) if rest else 1)
    return 3  # x or S: a property, then a comparison or a set test


def _value_level(items: tuple[Item, ...]) -> int:
    """The lowest level of the value a partial operand ends as: x and a property (2), a
    count over a set (3), or the value already there."""
    head = items[0]
    if head.kind == "V":
        return head.level
    if head.kind == "O":
        return 2
    if head.kind == "P" and len(items) > 1:
        return 1 + max(head.level, _value_level(items[1:]))
    return 3  # S, or a set's property: count= of a value


@lru_cache(maxsize=200_000)
def allowed(state: State, holes: bool) -> tuple[int, ...]:
    """Ids (in `TOKENS`) of the tokens that may follow `state`: with `holes`, constants are
    emitted only as typed holes; without, only as concrete constants."""
    out = []
    for i, tok in enumerate(TOKENS):
        if (tok in HOLES and not holes) or (tok in CONSTANT_TYPES and holes):
            continue
        if step(state, tok) is not None:
            out.append(i)
    return tuple(out)


def completes(tokens) -> bool:
    """Whether the machine accepts `tokens` (a body, then its end) and finishes there."""
    state = start()
    for t in tokens:
        state = step(state, t)
        if state is None:
            return False
    return state.done


def concept_text(tokens: list[str]) -> str:
    """The postfix concept string of a completed token sequence (body, then its end)."""
    body, end = tokens[:-1], tokens[-1]
    tail = ["lambda", "S."] + ([] if end == END else [end])
    return " ".join(body + tail)


def to_holes(concept_tokens: list[str]) -> list[str]:
    """A canonical concept's tokens as a decoder target with typed holes: the body with each
    constant replaced by its hole, then its end (quantifier or `END`)."""
    body = concept_tokens[: concept_tokens.index("lambda")]
    quant = concept_tokens[-1] if concept_tokens[-1] in QUANTIFIERS else END
    return [_HOLE_OF[CONSTANT_TYPES[t]] if t in CONSTANT_TYPES else t for t in body] + [quant]


def to_sequence(concept_tokens: list[str]) -> list[str]:
    """A canonical concept's tokens as a decoder target with its constants kept."""
    body = concept_tokens[: concept_tokens.index("lambda")]
    quant = concept_tokens[-1] if concept_tokens[-1] in QUANTIFIERS else END
    return body + [quant]
