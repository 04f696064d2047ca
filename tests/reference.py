"""A deliberately simple scalar interpreter of concepts over scene records: the independent
reference the vectorised executor is checked against (one scene, one object at a time)."""

from __future__ import annotations

from curi.concepts import PROPERTY_FUNCS, Concept, Node, parse

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
