"""Concepts of the language of thought: typed trees parsed from postfix strings (canonical or the
original release's format) and serialised back as postfix, tokens or readable text (paper Appendix
B.1)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from curi.errors import ConceptError
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES

__all__ = ["Node", "Concept", "parse", "VOCABULARY", "QUANTIFIERS", "PROPERTY_FUNCS", "MAX_NESTING"]

QUANTIFIERS = ("exists=", "for-all=")
# property function -> the value type it returns (on an object; on a set, a multiset of it)
PROPERTY_FUNCS = {
    "color?": "color",
    "shape?": "shape",
    "material?": "material",
    "size?": "size",
    "locationX?": "location",
    "locationY?": "location",
}
NUMBERS = tuple(str(i) for i in range(1, 9))
CONSTANT_TYPES = {
    **{c: "color" for c in COLORS},
    **{s: "shape" for s in SHAPES},
    **{m: "material" for m in MATERIALS},
    **{s: "size" for s in SIZES},
    **{n: "int" for n in NUMBERS},  # an integer literal is a location or a number by context
}
VARIABLES = {"x": "object", "S": "set", "S-x": "set"}
BINARY_BOOL = ("and", "or")
COMPARISONS = ("=", ">")
SET_OPS = ("all", "any", "count=")
ORDERED = ("size", "location", "number")
# Canonical vocabulary (tokens a canonical postfix string may contain).
VOCABULARY = (
    tuple(CONSTANT_TYPES)
    + tuple(VARIABLES)
    + tuple(PROPERTY_FUNCS)
    + BINARY_BOOL
    + ("not",)
    + COMPARISONS
    + SET_OPS
    + QUANTIFIERS
    + ("lambda", "S.")
)
# Original-release spellings.
_ALIASES = {"non-x-S": "S-x", "0.7": "large", "0.35": "small"}
_LEGACY_SET_OPS = {"exists=": "any", "for-all=": "all"}
_ARITY = {
    **{f: 1 for f in PROPERTY_FUNCS},
    "not": 1,
    **{op: 2 for op in BINARY_BOOL + COMPARISONS + SET_OPS},
}
# Deepest body tree `parse` accepts (a leaf is 1 level). The grammar's draws nest max_depth - 1
# levels (5 for the bank presets); the limit keeps every recursive walk over a tree (equality
# and hashing of `Node`, `Node.pretty`, the executor, canonical trees in curi/divergence.py)
# far from Python's recursion limit: equality, the deepest, uses 4 frames a level.
MAX_NESTING = 64
_QUOTE_CHARS = 80  # error messages quote at most this much of the input (docs/reliability.md)


@dataclass(frozen=True)
class Node:
    """One node of a concept tree: a token and its operand subtrees (in written order)."""

    op: str
    args: tuple[Node, ...] = ()

    def postfix(self) -> list[str]:
        """Tokens of this subtree in postfix order."""
        out: list[str] = []
        stack: list[tuple[Node, bool]] = [(self, False)]
        while stack:
            node, done = stack.pop()
            if done or not node.args:
                out.append(node.op)
                continue
            stack.append((node, True))
            stack.extend((a, False) for a in reversed(node.args))
        return out

    def walk(self):
        """Yield every node of the subtree, parents before children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.args))

    def pretty(self) -> str:
        """Readable infix form, e.g. ``color(x) = blue``."""
        op, a = self.op, self.args
        if not a:
            return op
        if op in PROPERTY_FUNCS:
            return f"{op[:-1]}({a[0].pretty()})"
        if op == "not":
            inner = a[0].pretty()
            return f"not {inner}" if a[0].op in BINARY_BOOL else f"not ({inner})"
        if op in BINARY_BOOL:
            return f"({a[0].pretty()} {op} {a[1].pretty()})"
        if op in COMPARISONS:
            return f"{a[0].pretty()} {op} {a[1].pretty()}"
        name = "count" if op == "count=" else op
        return f"{name}({a[0].pretty()}, {a[1].pretty()})"


@dataclass(frozen=True)
class Concept:
    """A concept: a boolean body and its quantifier (`exists=`, `for-all=`, or None when the
    concept is collapsed: it mentions neither ``x`` nor ``S-x``)."""

    body: Node
    quantifier: str | None

    def tokens(self) -> list[str]:
        """Canonical postfix tokens: body, ``lambda``, ``S.``, then the quantifier if any."""
        tail = ["lambda", "S."] + ([self.quantifier] if self.quantifier else [])
        return self.body.postfix() + tail

    def postfix(self) -> str:
        """The canonical postfix string (tokens joined by single spaces)."""
        return " ".join(self.tokens())

    def __len__(self) -> int:
        """Length in canonical tokens, counting ``lambda``, ``S.`` and the quantifier."""
        return len(self.tokens())

    def __str__(self) -> str:
        return self.postfix()

    @cached_property
    def mentions_x(self) -> bool:
        """Whether the body uses the bound object (``x`` or ``S-x``)."""
        return any(n.op in ("x", "S-x") for n in self.body.walk())

    def collapsed(self) -> Concept:
        """The same concept without its quantifier when its truth cannot depend on it."""
        return self if self.mentions_x else Concept(self.body, None)

    def pretty(self) -> str:
        """Readable form, e.g. ``exists x in S: color(x) = blue``."""
        body = self.body.pretty()
        if self.body.op in BINARY_BOOL:
            body = body[1:-1]
        if self.quantifier is None:
            return body
        q = "exists" if self.quantifier == "exists=" else "for all"
        return f"{q} x in S: {body}"


def _quote(text: str) -> str:
    """`text` quoted for an error message: in full when short, else its head and its length, so
    that a huge input never makes a huge message."""
    if len(text) <= _QUOTE_CHARS:
        return repr(text)
    return f"{text[:_QUOTE_CHARS]!r}... ({len(text):,} characters)"


def _type_error(msg: str, token: str, pos: int) -> ConceptError:
    return ConceptError(f"{msg} (token {_quote(token)} at position {pos})")


def _unify(ta: str, tb: str, op: str, pos: int) -> str:
    """The common value type of two comparison operands (integer literals adapt)."""
    if ta == "int":
        ta, tb = tb, ta
    if tb == "int" and ta in ("int", "location", "number"):
        return "number" if ta == "int" else ta
    if ta != tb or ta in ("bool", "object", "set") or ta.startswith("set"):
        raise _type_error(f"cannot compare {ta} with {tb}", op, pos)
    return ta


def _split_tail(text) -> tuple[list[str], str | None]:
    """The body tokens and quantifier of a concept string, its ``lambda S.`` checked.

    Raises:
        ConceptError: not a string, too short, or no ``lambda S.`` before the quantifier.
    """
    if not isinstance(text, str):
        raise ConceptError(f"a concept must be a string, got {type(text).__name__}")
    toks = text.split()
    if len(toks) < 3:
        raise ConceptError(
            f"concept {_quote(text)} is too short: expected '<body> lambda S. [quant]'"
        )
    quant = None
    if toks[-1] in QUANTIFIERS:
        quant = toks[-1]
        toks = toks[:-1]
    if toks[-2:] != ["lambda", "S."]:
        pos = len(toks) - 1
        raise _type_error("expected 'lambda S.' before the quantifier", toks[-1], pos)
    return toks[:-2], quant


def _result_type(tok: str, types: list[str], raw: str, pos: int) -> str:
    """The type of operator `tok` (canonical; `raw` as written, at `pos`) applied to operands
    of `types`.

    Raises:
        ConceptError: the operands' types do not fit the operator.
    """
    if tok in PROPERTY_FUNCS:
        vt = PROPERTY_FUNCS[tok]
        if types[0] == "object":
            return vt
        if types[0] == "set":
            return "set:" + vt
        raise _type_error(f"{tok} applies to an object or a set, not {types[0]}", raw, pos)
    if tok in BINARY_BOOL or tok == "not":
        if any(t != "bool" for t in types):
            raise _type_error(f"{tok} needs boolean operands, got {types}", raw, pos)
        return "bool"
    if tok in COMPARISONS:
        vt = _unify(types[0], types[1], raw, pos)
        if tok == ">" and vt not in ORDERED:
            raise _type_error(f"'>' is not defined for {vt}", raw, pos)
        return "bool"
    # all / any / count=
    if not types[0].startswith("set:"):
        raise _type_error(f"{tok} needs a set's property first, got {types[0]}", raw, pos)
    _unify(types[0][4:], types[1], raw, pos)
    return "number" if tok == "count=" else "bool"


def parse(text: str) -> Concept:
    """Parse a concept from its postfix string (canonical or original-release format).

    Args:
        text: e.g. ``"x color? blue = lambda S. exists="``.

    Returns:
        The type-checked `Concept`.

    Raises:
        ConceptError: unknown token, wrong arity, type error, missing ``lambda S.``, a missing
            quantifier in a concept that uses ``x``, or a body nested deeper than `MAX_NESTING`
            levels; the message names the token and position and quotes at most the first 80
            characters of the input.
    """
    body_toks, quant = _split_tail(text)
    stack: list[tuple[Node, str, int]] = []  # (node, type, levels)
    for pos, raw in enumerate(body_toks):
        tok = _ALIASES.get(raw, raw)
        tok = _LEGACY_SET_OPS.get(tok, tok)
        if tok in CONSTANT_TYPES:
            stack.append((Node(tok), CONSTANT_TYPES[tok], 1))
            continue
        if tok in VARIABLES:
            stack.append((Node(tok), VARIABLES[tok], 1))
            continue
        if tok not in _ARITY:
            raise ConceptError(
                f"unknown token {_quote(raw)} at position {pos}; known: {VOCABULARY}"
            )
        n = _ARITY[tok]
        if len(stack) < n:
            raise _type_error(f"operator needs {n} operand(s), found {len(stack)}", raw, pos)
        operands = stack[-n:]
        del stack[-n:]
        levels = 1 + max(d for _, _, d in operands)
        if levels > MAX_NESTING:
            msg = f"concept nests deeper than the limit of {MAX_NESTING} levels"
            raise _type_error(msg, raw, pos)
        out = _result_type(tok, [t for _, t, _ in operands], raw, pos)
        stack.append((Node(tok, tuple(nd for nd, _, _ in operands)), out, levels))
    if len(stack) != 1:
        raise ConceptError(
            f"concept {_quote(text)} leaves {len(stack)} values on the stack; expected one boolean"
        )
    body, t, _ = stack[0]
    if t != "bool":
        raise ConceptError(f"concept {_quote(text)} has a body of type {t}; expected bool")
    concept = Concept(body, quant)
    if quant is None and concept.mentions_x:
        raise ConceptError(
            f"concept {_quote(text)} uses x but has no quantifier: end it with 'exists=' or "
            "'for-all='"
        )
    return concept
