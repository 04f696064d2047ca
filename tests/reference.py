"""A deliberately simple scalar interpreter of concepts over scene records: the independent
reference the vectorised executor is checked against (one scene, one object at a time)."""

from __future__ import annotations

import random

from curi.concepts import PROPERTY_FUNCS, Concept, Node, parse
from curi.scenes import COLORS, MATERIALS, MAX_OBJECTS, NUM_BINS, SHAPES, SIZES

_ORDER = {"small": 0, "large": 1}


def _prop(obj: dict, func: str):
    name = func[:-1]
    if name == "locationX":
        return obj["x"]
    if name == "locationY":
        return obj["y"]
    return obj[name]


def _rank(v):
    return _ORDER.get(v, v)


def _eval(node: Node, objs: list[dict], x: int | None):
    op, a = node.op, node.args
    if not a:
        if op == "x":
            return ("obj", x)
        if op == "S":
            return ("set", list(range(len(objs))))
        if op == "S-x":
            return ("set", [i for i in range(len(objs)) if i != x])
        return int(op) if op.isdigit() else op
    if op in PROPERTY_FUNCS:
        kind, v = _eval(a[0], objs, x)
        if kind == "obj":
            return _prop(objs[v], op)
        return ("values", [_prop(objs[i], op) for i in v])
    if op == "not":
        return not _eval(a[0], objs, x)
    left, right = _eval(a[0], objs, x), _eval(a[1], objs, x)
    if op == "and":
        return left and right
    if op == "or":
        return left or right
    if op == "=":
        return left == right
    if op == ">":
        return _rank(left) > _rank(right)
    values = left[1]
    if op == "all":
        return all(v == right for v in values)
    if op == "any":
        return any(v == right for v in values)
    if op == "count=":
        return sum(v == right for v in values)
    raise ValueError(op)


def reference_eval(concept: Concept | str, record: dict) -> bool:
    """Truth of `concept` on one scene record, by direct interpretation."""
    c = concept if isinstance(concept, Concept) else parse(concept)
    objs = record["objects"]
    if c.quantifier is None:
        return bool(_eval(c.body, objs, None))
    results = (bool(_eval(c.body, objs, i)) for i in range(len(objs)))
    return any(results) if c.quantifier == "exists=" else all(results)


# --- random inputs that stress numbers and locations (docs/reliability.md) ----------------------
_VALUES = {
    "color?": COLORS,
    "shape?": SHAPES,
    "material?": MATERIALS,
    "size?": SIZES,
    "locationX?": tuple(str(i) for i in range(1, NUM_BINS + 1)),
    "locationY?": tuple(str(i) for i in range(1, NUM_BINS + 1)),
}
_DIGITS = tuple(str(i) for i in range(1, 9))  # every integer literal the parser accepts


def _number(r: random.Random) -> str:
    """An integer literal 1..8 or a ``count=`` over S or S-x (values 0..MAX_OBJECTS)."""
    if r.random() < 0.5:
        return r.choice(_DIGITS)
    func = r.choice(tuple(_VALUES))
    value = r.choice(_VALUES[func]) if r.random() < 0.7 else f"x {func}"
    return f"{r.choice(('S', 'S-x'))} {func} {value} count="


def _location(r: random.Random) -> str:
    return r.choice(_DIGITS) if r.random() < 0.5 else f"x {r.choice(('locationX?', 'locationY?'))}"


def _atom(r: random.Random) -> str:
    u = r.random()
    if u < 0.6:  # numbers: counts and literals, either order, literal against literal too
        return f"{_number(r)} {_number(r)} {r.choice(('=', '>'))}"
    if u < 0.85:  # locations against literals 1..8 and each other
        return f"{_location(r)} {_location(r)} {r.choice(('=', '>'))}"
    func = r.choice(("locationX?", "locationY?"))
    return f"{r.choice(('S', 'S-x'))} {func} {_location(r)} {r.choice(('all', 'any'))}"


def _body(r: random.Random, depth: int = 0) -> str:
    u = r.random()
    if depth < 2 and u < 0.15:
        return f"{_body(r, depth + 1)} not"
    if depth < 2 and u < 0.4:
        return f"{_body(r, depth + 1)} {_body(r, depth + 1)} {r.choice(('and', 'or'))}"
    return _atom(r)


def number_concepts(n: int, seed: int) -> list[str]:
    """`n` random valid concepts built from number and location templates: every literal 1..8 on
    either side of ``=`` and ``>``, counts over S and S-x, quantified when they use x."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        body = _body(r)
        uses_x = any(t in ("x", "S-x") for t in body.split())
        quant = r.choice((" exists=", " for-all=")) if uses_x or r.random() < 0.3 else ""
        out.append(f"{body} lambda S.{quant}")
    return out


def substitute_literals(concepts: list[str], seed: int) -> list[str]:
    """The concepts that hold an integer literal, each literal replaced by a random one of 1..8
    (the grammar's numbers are 1..3 only, so its draws alone never exercise 4..8)."""
    r = random.Random(seed)
    out = []
    for c in concepts:
        toks = c.split()
        if any(t.isdigit() for t in toks):
            out.append(" ".join(r.choice(_DIGITS) if t.isdigit() else t for t in toks))
    return out


def crowded_records(n: int, seed: int) -> list[dict]:
    """`n` scene records of 1..MAX_OBJECTS objects whose values come from small per-scene pools,
    so that counts reach every value 0..MAX_OBJECTS and locations every bin 1..8."""
    r = random.Random(seed)
    keys = {"color?": "color", "shape?": "shape", "material?": "material", "size?": "size"}
    out = []
    for _ in range(n):
        k = r.randint(1, MAX_OBJECTS)
        pools = {
            f: r.sample(v, r.choice((1, 2, len(v))) if len(v) > 2 else r.choice((1, len(v))))
            for f, v in _VALUES.items()
        }
        objs = []
        for _ in range(k):
            o = {keys[f]: r.choice(pools[f]) for f in keys}
            o["x"] = int(r.choice(pools["locationX?"]))
            o["y"] = int(r.choice(pools["locationY?"]))
            objs.append(o)
        out.append({"objects": objs})
    return out
