"""Audit of the concept parser and executor (docs/reliability.md, "Concepts: parser and
executor"): random valid concepts with numbers and locations 1..8 against the reference
interpreter, and malformed inputs against the parser. Prints the figures of the table.

    python benchmarks/audit_concepts.py
"""

import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the reference
import numpy as np
from reference import crowded_records, number_concepts, reference_eval, substitute_literals

import curi.concepts as cc
from curi import ConceptError, parse, sample_concepts
from curi.bits import unpack_rows
from curi.divergence import atoms, compounds
from curi.executor import BitScenes, execute
from curi.scenes import records_to_props, sample_scenes

print("tree:", cc.__file__)

# 1. executor: random valid concepts with numbers and locations 1..8 vs the reference
concepts = (
    number_concepts(4000, seed=100)
    + substitute_literals([t for t, _ in sample_concepts(20000, seed=101)], seed=102)[:1000]
)
concepts = [parse(c) for c in concepts]
records = crowded_records(200, seed=103) + sample_scenes(200, seed=104).records(range(200))
bs = BitScenes.from_arrays(*records_to_props(records))
got = unpack_rows(execute(concepts, bs), len(records))
tb = execute(concepts, bs.to("cpu")).numpy().view(np.uint64)
want = np.array([[reference_eval(c, r) for r in records] for c in concepts])
bad = (got != want).any(axis=1)
print(
    f"executor: {len(concepts)} concepts x {len(records)} scenes; wrong concepts {bad.sum()}, "
    f"wrong (concept, scene) pairs {(got != want).sum()}; "
    f"numpy==torch {np.array_equal(tb, execute(concepts, bs))}"
)
with_8 = np.array([any(t == "8" for t in c.tokens()) for c in concepts])
print(
    f"  concepts with the literal 8: {with_8.sum()}, of which wrong {(bad & with_8).sum()}; "
    f"wrong without an 8: {(bad & ~with_8).sum()}"
)
for t in ["S color? blue count= 8 = lambda S.", "8 7 > lambda S."]:
    c = parse(t)
    print(
        "  ",
        t,
        "->",
        int(unpack_rows(execute([c], bs), len(records))[0].sum()),
        "of",
        len(records),
        "scenes; reference",
        sum(reference_eval(c, r) for r in records),
    )

# 2. parser: malformed, unusual, deep and huge inputs
r = random.Random(7)
VOC = cc.VOCABULARY + ("non-x-S", "0.7", "0.35", "0", "9", "10", "-1", "foo", "")


def junk():
    return "".join(
        chr(r.choice([r.randint(32, 126), r.randint(0, 0x2FFF), 0, 9, 10]))
        for _ in range(r.randint(0, 8))
    )


def tok():
    return r.choice(VOC) if r.random() < 0.85 else junk()


valid = [t for t, _ in sample_concepts(400, seed=11)] + number_concepts(200, seed=12)
cases = []
for _ in range(5000):
    cases.append(
        (
            "random tokens",
            " ".join(tok() for _ in range(r.randint(0, 20)))
            + r.choice(["", " lambda S.", " lambda S. exists="]),
        )
    )
for _ in range(5000):
    t = r.choice(valid).split()
    for _ in range(r.randint(1, 3)):
        op, i = r.randrange(6), r.randint(0, len(t))
        if op == 0:
            t = t[:i]
        elif op == 1:
            t = t[i:]
        elif op == 2 and i < len(t):
            del t[i]
        elif op == 3:
            t.insert(i, tok())
        elif op == 4 and i < len(t):
            t[i] = tok()
        elif op == 5 and len(t) > 1:
            j = r.randrange(len(t))
            i = min(i, len(t) - 1)
            t[i], t[j] = t[j], t[i]
    cases.append(("mutations", " ".join(t)))
for text in valid[:: len(valid) // 100]:
    t = text.split()
    cases += [
        ("truncations/deletions", " ".join(v))
        for v in [t[:i] for i in range(len(t))]
        + [t[i:] for i in range(1, len(t))]
        + [t[:i] + t[i + 1 :] for i in range(len(t))]
    ]
leaf = "x color? red ="
for d in range(3, 403):
    k = d - 3
    cases.append(("deep nesting 3..402", leaf + " not" * k + " lambda S. exists="))
    cases.append(("deep nesting 3..402", leaf + " x color? red = and" * k + " lambda S. exists="))
for c in [
    "q" * 5_000_000,
    "x color? red = " * 50_000 + "lambda S. exists=",
    leaf + " not" * 1_000_000 + " lambda S. exists=",
    "(" * 1_000_000 + " lambda S.",
    "red " * 1_000_000,
    " ".join(r.choice(cc.VOCABULARY) for _ in range(500_000)),
]:
    cases.append(("huge (0.5-5 MB)", c))
for c in [None, 3, b"x color? red = lambda S. exists=", ["x"], 2.5]:
    cases.append(("non-strings", c))

small = BitScenes.from_arrays(*records_to_props(records[:24]))
rows = defaultdict(Counter)
longest = Counter()
for kind, text in cases:
    try:
        c = parse(text)
    except ConceptError as e:
        n = len(str(e))
        longest[kind] = max(longest[kind], n)
        rows[kind]["clean error" if n <= 600 else "BAD: message > 600 chars"] += 1
        continue
    except Exception as e:
        rows[kind][f"BAD: {type(e).__name__}"] += 1
        continue
    try:
        assert parse(c.postfix()) == c
        hash(c)
        c.pretty()
        atoms(c)
        compounds(c)
        g = unpack_rows(execute([c], small), 24)[0]
        w = [reference_eval(c, rec) for rec in records[:24]]
        rows[kind][
            "accepted, usable" if g.tolist() == w else "BAD: accepted, wrong truth values"
        ] += 1
    except RecursionError:
        rows[kind]["BAD: accepted, RecursionError later"] += 1
total = Counter()
for kind, cnt in rows.items():
    n = sum(cnt.values())
    total.update(cnt)
    print(
        f"parser | {kind} | {n} | "
        + ", ".join(f"{k} {v}" for k, v in sorted(cnt.items()))
        + f" | longest message {longest[kind]:,}"
    )
print("parser total", sum(total.values()), dict(total))
