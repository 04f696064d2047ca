"""Stored expected numbers against measured ones, each difference one short phrase that says
what moved ("bank moved: truth.npy", "episodes moved: concept_iid/hard seed 0 reference
(episode 0: concept, support_ids)"). Integers and digests compare exactly; floats of a gap row
exactly too, but the compound divergences within `GAP_RELATIVE` (docs/design.md, "Stored
expected numbers")."""

from __future__ import annotations

import math
from collections.abc import Mapping

from curi.expected.measure import FIELDS, PATHS, SPLIT

__all__ = ["GAP_ABSOLUTE", "GAP_RELATIVE", "compare_bank", "compare_gap_row", "compare_record"]

#: gap-row keys compared within a relative tolerance (all others exactly): their last digits
#: follow the order of a floating-point sum, which differs between machines (the 15th-16th
#: significant digit of 16 of 396 values of the default table on another machine)
GAP_RELATIVE = {"d_compound": 1e-12, "d_compound_random": 1e-12}
GAP_ABSOLUTE = 1e-15  # a divergence that is 0 but for rounding (2.2e-16) is within it
#: gap-row keys never compared: the time taken
GAP_IGNORED = ("seconds", "stage_seconds")


def _differences(expected: Mapping, observed: Mapping, where: str = "") -> list[str]:
    """``key expected -> observed`` for each differing (nested) key."""
    out = []
    for key in sorted(set(expected) | set(observed), key=str):
        e, o = expected.get(key), observed.get(key)
        if isinstance(e, Mapping) and isinstance(o, Mapping):
            out += _differences(e, o, f"{where}{key}.")
        elif e != o:
            out.append(f"{where}{key} {e} -> {o}")
    return out


def compare_bank(expected: Mapping, observed: Mapping) -> list[str]:
    """What moved between a stored bank (`curi.expected.measure.measure_bank`) and the one
    measured: files whose arrays (or text) differ by name, files that hold the same arrays in
    other bytes marked so, the manifest's config and counts key by key."""
    moved = []
    want, got = expected["files"], observed["files"]
    for name in sorted(set(want) | set(got)):
        e, o = want.get(name), got.get(name)
        if e is None:
            moved.append(f"{name} (not expected)")
        elif o is None:
            moved.append(f"{name} (missing)")
        elif e["content"] != o["content"]:
            moved.append(name)
        elif e["sha256"] != o["sha256"]:
            moved.append(f"{name} (same arrays, other file bytes)")
    for key in ("config", "counts"):
        moved += _differences(expected[key], observed[key], f"manifest {key}.")
    return [f"bank moved: {', '.join(moved)}"] if moved else []


def _first_moved(want: list[str], got: list[str], first_want: list, first_got: list) -> str:
    """Where a stream first differs: ``episode k: field, field`` (the fields named for the
    episodes stored raw), or how many episodes it has when one is a prefix of the other."""
    k = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if k is None:
        return f"{len(got)} episodes, not {len(want)}"
    if k < min(len(first_want), len(first_got)):
        fields = [f for f in FIELDS if first_want[k][f] != first_got[k][f]]
        return f"episode {k}: {', '.join(fields)}"
    return f"episode {k}"


def _compare_stream(name: str, want: Mapping, got: Mapping) -> list[str]:
    """What moved in one stream (case and seed) between the stored record and each path's."""
    moved = []
    for path in PATHS:
        if path not in got:
            continue
        obs = got[path]
        n = len(obs["episodes"])
        expected = want["episodes"][:n] if path == "export" else want["episodes"]
        if obs["episodes"] != expected:
            where = _first_moved(expected, obs["episodes"], want["first"], obs["first"])
            moved.append(f"episodes moved: {name} {path} ({where})")
        elif path == "reference" and obs["alternates"] != want["alternates"]:
            moved.append(f"episodes moved: {name} reference alternates")
        elif path == "export" and obs["export"] != want["export"]:
            moved.append(f"export moved: {name} (same episodes, other file bytes)")
    return moved


def compare_record(expected: Mapping, observed: Mapping, *, bank: str = "tiny") -> list[str]:
    """Everything that moved between a stored record (``curi/expected/<bank>.json``) and the
    one measured (`curi.expected.measure.bank_record`), one phrase each, prefixed with the
    bank's name but for ``tiny``."""
    moved = compare_bank(expected["bank"], observed["bank"])
    if expected["split"] != observed["split"]:
        moved.append(f"split moved: {SPLIT}")
    for case, seeds in expected["streams"].items():
        for seed, want in seeds.items():
            got = observed["streams"].get(case, {}).get(seed)
            name = f"{SPLIT}/{case} seed {seed}"
            if got is None:
                moved.append(f"episodes not measured: {name}")
            else:
                moved += _compare_stream(name, want, got)
    return moved if bank == "tiny" else [f"{bank}: {m}" for m in moved]


def compare_gap_row(expected: Mapping, observed: Mapping) -> list[str]:
    """What moved between a stored gap row and one computed (`curi.oracles.compositionality_gap`):
    each key of the stored row compared exactly (integers, strings, ``map_*``, ``cba_*``,
    ``d_atom*``), but those of `GAP_RELATIVE` within their relative tolerance (or
    `GAP_ABSOLUTE`)."""
    moved = []
    for key, want in expected.items():
        if key in GAP_IGNORED:
            continue
        got = observed.get(key)
        rel = GAP_RELATIVE.get(key)
        if rel is not None and isinstance(got, float):
            same = math.isclose(got, want, rel_tol=rel, abs_tol=GAP_ABSOLUTE)
        else:
            same = bool(got == want)
        if not same:
            moved.append(f"gap row moved: {key} {want!r} -> {got!r}")
    return moved
