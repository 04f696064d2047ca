"""Every deadline in the tests is a hang guard, not a speed check (issue 44, item 1): an AST scan
of tests/*.py lists each one (a ``timeout=``, a thread's or process's ``join``/``wait``, an
``alarm``, a ``_deadline(...)``, a ``time.monotonic() + N``, a ``timeout`` parameter's default)
and fails on one under `MIN_SECONDS` or one it cannot resolve to a number; and, in a slow test,
the tests that carry deadlines pass with 13 busy-loop processes beside them.

A hang lasts for ever, so a guard far above the test's time costs nothing when it passes; one
near it fails on a busy machine (a 10-second guard failed at load 15 on a test that takes 16 s
alone). Guards here are at least 60 s and at least 10x the guarded work's quiet time (the
second is judged where each one is written; this scan enforces the first)."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MIN_SECONDS = 60
BUSY_LOOPS = 13  # processes spinning beside the guarded tests (load ~15 on the 2-core CI)

# Calls whose time limit is part of what the test checks, not a guard against a hang: (file,
# enclosing function, the call as `ast.unparse` writes it) -> why. Keep it minimal.
NOT_GUARDS: dict[tuple[str, str, str], str] = {}

_CLOCKS = {"monotonic", "time", "perf_counter"}


@dataclass(frozen=True)
class Deadline:
    """One time limit in a test file: where, what call, and its seconds (None: unresolved)."""

    file: str
    line: int
    function: str
    call: str
    seconds: float | None
    forwarded: bool = False  # a parameter of the enclosing function: checked at its callers

    def __str__(self) -> str:
        value = "unresolved" if self.seconds is None else f"{self.seconds:g} s"
        return f"{self.file}:{self.line} in {self.function}: {self.call} ({value})"


def _constants(tree: ast.Module) -> dict[str, ast.expr]:
    """The module's top-level ``NAME = value`` assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            if isinstance(node.targets[0], ast.Name):
                out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            out[node.target.id] = node.value
    return out


def _seconds(node: ast.expr, consts: dict[str, ast.expr], depth: int = 0) -> float | None:
    """`node` as a number: a literal, arithmetic of literals, or a module constant holding one."""
    if depth > 10:
        return None
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id in consts:
        return _seconds(consts[node.id], consts, depth + 1)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _seconds(node.operand, consts, depth + 1)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
        a, b = _seconds(node.left, consts, depth + 1), _seconds(node.right, consts, depth + 1)
        if a is None or b is None:
            return None
        return a * b if isinstance(node.op, ast.Mult) else a + b
    return None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _is_clock(node: ast.expr) -> bool:
    """``time.monotonic()`` and its kind."""
    return isinstance(node, ast.Call) and not node.args and _callee(node) in _CLOCKS


def _limits(node: ast.AST) -> list[tuple[ast.AST, ast.expr]]:
    """(the construct, its time limit) for each deadline `node` itself is (none, one or more)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        pos = [*args.posonlyargs, *args.args]
        pairs = list(zip(pos[len(pos) - len(args.defaults) :], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
        return [(node, d) for a, d in pairs if a.arg in ("timeout", "seconds", "deadline")]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        if _is_clock(node.left):
            return [(node, node.right)]
        if _is_clock(node.right):
            return [(node, node.left)]
        return []
    if not isinstance(node, ast.Call):
        return []
    out = [(node, k.value) for k in node.keywords if k.arg == "timeout" and not _is_none(k.value)]
    name = _callee(node)
    if node.args and name in ("_deadline", "deadline", "alarm"):
        out.append((node, node.args[0]))
    elif name in ("join", "wait") and len(node.args) == 1:
        literal = _seconds(node.args[0], {})  # "sep".join(parts) is no deadline; t.join(5) is
        if literal is not None:
            out.append((node, node.args[0]))
    return out


def _params(fn: ast.AST) -> set[str]:
    a = getattr(fn, "args", None)
    if a is None:
        return set()
    return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}


def _embedded(node: ast.AST) -> ast.Module | None:
    """A string that is a program (``python -c CODE`` of a child process), parsed."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    if "\n" not in node.value or "import " not in node.value:
        return None
    try:
        return ast.parse(node.value)
    except SyntaxError:
        return None


def deadlines(path: Path) -> list[Deadline]:
    """Every deadline in the test file `path`, and in the programs it holds as strings (their
    lines counted from the string's), in source order."""
    return _scan(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), path.name, 0)


def _scan(tree: ast.Module, file: str, offset: int) -> list[Deadline]:
    consts = _constants(tree)
    found = []

    def visit(node: ast.AST, where: list[ast.AST]) -> None:
        fn = where[-1] if where else None
        for construct, limit in _limits(node):
            if isinstance(construct, ast.Call) and _callee(construct) == "alarm":
                if _seconds(limit, consts) == 0:
                    continue  # alarm(0) cancels
            if isinstance(construct, ast.FunctionDef | ast.AsyncFunctionDef):
                owner, text = construct, f"def {construct.name}(... = {ast.unparse(limit)})"
            else:
                owner, text = fn, ast.unparse(construct)
            forwarded = isinstance(limit, ast.Name) and limit.id in _params(owner)
            name = getattr(owner, "name", "<module>")
            seconds = _seconds(limit, consts)
            line = offset + construct.lineno
            found.append(Deadline(file, line, name, text, seconds, forwarded))
        code = _embedded(node)
        if code is not None:
            found.extend(_scan(code, file, offset + node.lineno - 1))
        inner = (
            [*where, node] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else where
        )
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, [])
    return sorted(found, key=lambda d: d.line)


def all_deadlines() -> list[Deadline]:
    """Every deadline in tests/*.py (conftest.py and the helpers included)."""
    return [d for path in sorted(TESTS.glob("*.py")) for d in deadlines(path)]


def _allowed(d: Deadline) -> bool:
    return (d.file, d.function, d.call) in NOT_GUARDS


def test_every_deadline_in_the_tests_is_at_least_a_minute():
    found = all_deadlines()
    assert len(found) > 20, "the scan finds the tests' deadlines"
    short = [
        str(d)
        for d in found
        if not d.forwarded and not _allowed(d) and (d.seconds is None or d.seconds < MIN_SECONDS)
    ]
    assert not short, "deadlines under a minute or unresolved (a hang guard):\n" + "\n".join(short)


def test_every_exception_names_a_call_that_is_there():
    """An allow-list entry whose call is gone would silently excuse a new one of that name."""
    there = {(d.file, d.function, d.call) for d in all_deadlines()}
    assert set(NOT_GUARDS) <= there, set(NOT_GUARDS) - there


def _settings_without_deadline(node: ast.expr, consts: dict[str, ast.expr]) -> bool:
    """`node` is ``settings(..., deadline=None)`` or ``settings(PARENT, ...)`` of one such."""
    if isinstance(node, ast.Name) and node.id in consts:
        return _settings_without_deadline(consts[node.id], consts)
    if not (isinstance(node, ast.Call) and _callee(node) == "settings"):
        return False
    for k in node.keywords:
        if k.arg == "deadline":
            return _is_none(k.value)
    return any(_settings_without_deadline(a, consts) for a in node.args)


def test_no_hypothesis_test_keeps_its_per_example_deadline():
    """Hypothesis fails an example that takes over 200 ms unless told otherwise: a speed check
    a busy machine fails. Every ``@given`` test says ``deadline=None``."""
    timed = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        consts = _constants(tree)
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = [d for d in fn.decorator_list if isinstance(d, ast.Call)]
            if any(_callee(d) == "given" for d in calls) and not any(
                _settings_without_deadline(d, consts) for d in calls
            ):
                timed.append(f"{path.name}:{fn.lineno} {fn.name}")
    assert not timed, timed


# --- the guarded tests beside busy loops ----------------------------------------------------


def _carries(node: ast.AST, helpers: set[str]) -> bool:
    """`node` holds a deadline, or calls one of the module's functions that holds one."""
    for sub in ast.walk(node):
        if _limits(sub) or (isinstance(sub, ast.Call) and _callee(sub) in helpers):
            return True
    return False


def guarded_tests(path: Path) -> list[str]:
    """Node ids of the tests in `path` that carry a deadline themselves or through a helper of
    their module (not through conftest's `run_curi`, whose default guard every command test
    has: those would be most of the suite)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tops = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    helpers = {n.name for n in tops if not n.name.startswith("test_") and _carries(n, set())}
    rel = f"{TESTS.name}/{path.name}"
    ids = [f"{rel}::{n.name}" for n in tops if n.name.startswith("test_")]
    ids = [
        i
        for i, n in zip(ids, [t for t in tops if t.name.startswith("test_")], strict=True)
        if _carries(n, helpers)
    ]
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        ids += [
            f"{rel}::{cls.name}::{m.name}"
            for m in cls.body
            if isinstance(m, ast.FunctionDef)
            and m.name.startswith("test_")
            and _carries(m, helpers)
        ]
    return ids


@pytest.mark.slow  # minutes: run and reported in docs/benchmarks.md (CI time)
def test_the_guarded_tests_pass_beside_13_busy_loops(tmp_path):
    """The tests that carry deadlines, run as CI runs them (the project's pytest options: two
    workers, slow tests deselected), with `BUSY_LOOPS` processes spinning beside them. The inner
    run's output goes to a log as it is written (its path printed first; -vv outweighs the
    project's -q, so each test is named as it ends): a run stopped before its end still names
    the tests that failed so far."""
    ids = [
        i for p in sorted(TESTS.glob("test_*.py")) if p != Path(__file__) for i in guarded_tests(p)
    ]
    assert len(ids) > 20, ids
    log = tmp_path / "guarded.log"
    print(f"{len(ids)} guarded tests; their output: {log}", flush=True)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BUSY_LOOPS)]
    t0 = time.monotonic()
    try:
        with log.open("w") as out:
            r = subprocess.run(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfE", "-vv", *ids],
                cwd=TESTS.parent,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=7200,  # a hang guard: the run takes minutes
            )
    finally:
        for p in busy:
            p.kill()
            p.wait(timeout=60)
    text = log.read_text()
    print(f"{len(ids)} guarded tests beside {BUSY_LOOPS} busy loops: {time.monotonic() - t0:.0f} s")
    print(text[-2000:])
    failed = [line for line in text.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert r.returncode == 0, "\n".join(failed) or text[-6000:]
