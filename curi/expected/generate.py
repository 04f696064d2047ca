"""Make the stored expected numbers from this code (docs/design.md, "Stored expected numbers"):
only for a deliberate change of the banks or of the episode procedure, the reason said in the
commit that changes the files.

    python -m curi.expected.generate tiny default        # curi/expected/tiny.json, default.json
    curi gap bank=tiny split=concept_iid negatives=[hard] episodes.test=2000 seed=0 \\
        output_dir=/tmp/g && python -m curi.expected.generate --gap /tmp/g/gap.json

Each bank is built in a temporary folder; its episodes are those of the reference path, stored
only when the stacked and export paths make the same ones."""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from collections.abc import Sequence
from pathlib import Path

from curi.atomic import remove, write_text
from curi.errors import ConfigError
from curi.expected.compare import GAP_ABSOLUTE, GAP_IGNORED, GAP_RELATIVE
from curi.expected.measure import EPISODES, EXPORT_EPISODES, PATHS, bank_record

__all__ = ["FORMAT", "GAP", "expected_from", "gap_expected", "generate_bank", "main"]

FORMAT = 1  # of the stored files
HERE = Path(__file__).resolve().parent
#: the stored gap row: (bank, split, negatives, test episodes, seed)
GAP = {"bank": "tiny", "split": "concept_iid", "negatives": "hard", "episodes": 2000, "seed": 0}


def _made_with() -> dict:
    """The versions that made the files: for the reader, never compared."""
    from importlib.metadata import version

    import numpy as np

    libs = {k: version(k) for k in ("curi", "numba")}
    return {**libs, "numpy": np.__version__, "python": platform.python_version()}


def expected_from(observed: dict) -> dict:
    """The record to store from a measured one (`bank_record`): each stream's reference
    episodes with the reference's alternates and the export's file digest.

    Raises:
        ConfigError: a path makes other episodes than the reference (nothing to store).
    """
    streams = {}
    for case, seeds in observed["streams"].items():
        for seed, paths in seeds.items():
            ref = paths["reference"]
            for path in PATHS[1:]:
                n = len(paths[path]["episodes"])
                if paths[path]["episodes"] != ref["episodes"][:n]:
                    raise ConfigError(f"{case} seed {seed}: {path} differs from the reference")
            streams.setdefault(case, {})[seed] = {
                "episodes": ref["episodes"],
                "first": ref["first"],
                "alternates": ref["alternates"],
                "export": paths["export"]["export"],
            }
    return {
        "format": FORMAT,
        "made_with": _made_with(),
        "sizes": {"episodes": EPISODES, "export_episodes": EXPORT_EPISODES},
        "bank": observed["bank"],
        "split": observed["split"],
        "streams": streams,
    }


def generate_bank(name: str) -> dict:
    """The record to store of the bank preset `name`, built in a temporary folder."""
    from curi.bank import build_bank, load_bank

    tmp = Path(tempfile.mkdtemp(prefix="curi-expected-"))
    try:
        bank = load_bank(build_bank(name, tmp / "data", progress=False), verify=False)
        (tmp / "episodes").mkdir()
        return expected_from(bank_record(bank, tmp / "episodes"))
    finally:
        remove(tmp, root=tmp.parent)


def gap_expected(path: str | Path) -> dict:
    """The record to store of the gap row `GAP` from the ``gap.json`` that `curi gap` wrote.

    Raises:
        ConfigError: the file holds no such row.
    """
    rows = json.loads(Path(path).read_text(encoding="utf-8"))
    want = (GAP["split"], GAP["negatives"], GAP["episodes"])
    row = next((r for r in rows if (r["split"], r["negatives"], r["episodes"]) == want), None)
    if row is None:
        raise ConfigError(f"{path} has no row {want}: run the `curi gap` command of this module")
    return {
        "format": FORMAT,
        "made_with": _made_with(),
        **GAP,
        "tolerance": {"relative": GAP_RELATIVE, "absolute": GAP_ABSOLUTE, "others": "exact"},
        "row": {k: v for k, v in row.items() if k not in GAP_IGNORED},
    }


def _dumps(value, indent: str = "") -> str:
    """`value` as JSON, one key a line, but each list of numbers or strings on one line (a
    diff then shows the stream or episode that changed)."""
    if isinstance(value, dict) and value:
        inner = indent + " "
        items = [f"{inner}{json.dumps(k)}: {_dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        inner = indent + " "
        return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in value) + f"\n{indent}]"
    return json.dumps(value)


def _write(name: str, record: dict, out: Path) -> None:
    write_text(out / f"{name}.json", _dumps(record) + "\n")
    print(f"wrote {out / f'{name}.json'}")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m curi.expected.generate [BANK ...] [--gap GAP_JSON] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m curi.expected.generate", description=__doc__)
    parser.add_argument("banks", nargs="*", help="bank presets to store (tiny, default)")
    parser.add_argument("--gap", help="the gap.json of the `curi gap` command above")
    parser.add_argument("--out", default=str(HERE), help="folder of the files (this package)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    for name in args.banks:
        _write(name, generate_bank(name), out)
    if args.gap:
        _write(f"gap_{GAP['bank']}", gap_expected(args.gap), out)


if __name__ == "__main__":
    main()
