"""Static rejections of sampled concepts (paper Appendix B.2): shapes of concepts that are
degenerate whatever the scenes are, so they are dropped before execution."""

from __future__ import annotations

from curi.concepts import PROPERTY_FUNCS, Concept, Node

__all__ = ["static_rejection", "REASONS"]

REASONS = ("forall_with_S-x", "self_comparison", "set_contains_self")


def _is_prop_of(node: Node, var: str) -> str | None:
    """The property function when `node` is ``var F``, else None."""
    if node.op in PROPERTY_FUNCS and node.args[0].op == var:
        return node.op
    return None


def static_rejection(concept: Concept) -> str | None:
    """The reason `concept` is statically rejected (one of `REASONS`), or None to keep it.

    - ``for-all=`` together with ``S-x`` anywhere (for every object, something about the others:
      the same as a statement about all objects);
    - a comparison of an object's property with the same property of the same object
      (``x F x F =`` or ``>``);
    - ``S F x F any`` / ``all`` with the same F (x is in S: trivially true or degenerate).
    """
    nodes = list(concept.body.walk())
    if concept.quantifier == "for-all=" and any(n.op == "S-x" for n in nodes):
        return "forall_with_S-x"
    for n in nodes:
        if n.op in ("=", ">"):
            fa, fb = _is_prop_of(n.args[0], "x"), _is_prop_of(n.args[1], "x")
            if fa is not None and fa == fb:
                return "self_comparison"
        if n.op in ("any", "all"):
            fa, fb = _is_prop_of(n.args[0], "S"), _is_prop_of(n.args[1], "x")
            if fa is not None and fa == fb:
                return "set_contains_self"
    return None
