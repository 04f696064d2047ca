"""The on-disk format of a concept bank (paper Appendix B.2 says what a bank holds; this module
says how it is stored): the files a bank directory must hold, the shape and dtype of each as a
function of the counts the manifest states, the manifest that records them and checksums
itself, and the checks `curi.load_bank` runs before it trusts anything (docs/reliability.md,
"Bank: manifest, concurrent and interrupted builds").

Format 4 manifest (``manifest.json``)::

    {"format": 4, "version": ..., "config": {...}, "counts": {...}, "timings_s": {...},
     "workers": ..., "files": {NAME: ENTRY, ...}, "manifest_sha256": HEX}

Each ENTRY holds the file's ``sha256``, its ``sample_sha256`` (checked on every load, cheap)
and its size in ``bytes``, and what the format requires of it: ``shape`` and ``dtype``
(``.npy``), ``arrays`` (name -> shape and dtype, ``.npz``) or ``lines`` (``.txt``).
``manifest_sha256`` is the SHA-256 of the manifest's canonical JSON (sorted keys, no spaces,
ASCII) without that field, so a damaged or hand-edited manifest is refused. The
``sample_sha256`` of a file hashes the canonical JSON of the bank's ``config`` before the
file's first and last 64 KiB: it binds the config that made the data to the data, so a config
edited in the manifest (``location_bins``, the image size) is refused even with
``manifest_sha256`` recomputed. Both guard against accidents and hand edits, not against
someone who recomputes every digest (they have no key).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import numpy.lib.format as npy

from curi.bits import num_words
from curi.errors import BankError
from curi.paths import regular_file
from curi.rejection import REASONS
from curi.scenes import MAX_OBJECTS, PROPERTIES

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "check_files",
    "check_manifest",
    "describe",
    "layout",
    "read_manifest",
    "sample_sha256",
    "seal",
    "sha256",
]

# 2: adds truth_by_scene.npy; 3: the manifest checksums itself, records shapes; 4: the sample
# digests bind the config
FORMAT_VERSION = 4
MANIFEST = "manifest.json"
_MAX_MANIFEST_BYTES = 1 << 20  # a bank's manifest is about 5 KB
_SAMPLE = 1 << 16
_DIGESTS = ("sha256", "sample_sha256")
_COUNTS = (
    "draws",
    "successful_draws",
    "unique_draws",
    "executed",
    "too_rare",
    "too_frequent",
    "concepts",
    "synonym_groups",
    "scenes",
    "eval_set",
)
TIMINGS = ("scenes", "sampling", "rejection", "execution", "transposing", "filtering", "writing")
REBUILD = "rebuild it (add force=true to the command)"


def _damaged(path: Path, what: str) -> BankError:
    return BankError(f"bank at {path} is damaged: {what}; {REBUILD}")


def _regular(path: Path, f: Path, what: str) -> None:
    """Refuse `f` of the bank at `path` unless it is a regular file: opening a FIFO for
    reading blocks until a writer comes, forever if none does."""
    try:
        regular_file(f, what, BankError)
    except BankError as e:
        raise _damaged(path, str(e)) from None


def _dt(x) -> str:
    return np.dtype(x).str


def layout(config: dict, counts: dict) -> dict[str, dict]:
    """Every file format 3 requires, with its shape and dtype (the arrays of ``concepts.npz``,
    the lines of ``concepts.txt``), from the bank's config and counts: H concepts, N scenes,
    E evaluation scenes."""
    h, n, e = counts["concepts"], config["num_scenes"], counts["eval_set"]
    objs = [n, MAX_OBJECTS]

    def arr(shape, dtype):
        return {"shape": list(shape), "dtype": _dt(dtype)}

    per_concept = {
        "group": np.int32,
        "length": np.int16,
        "log_prior": np.float64,
        "pcfg_logprob": np.float64,
        "count": np.int64,
    }
    return {
        "concepts.npz": {"arrays": {k: arr([h], t) for k, t in per_concept.items()}},
        "concepts.txt": {"lines": h},
        "eval_concepts.npy": arr([e], np.int32),
        "eval_ids.npy": arr([e], np.int64),
        "scenes/n_objects.npy": arr([n], np.uint8),
        "scenes/pixel.npy": arr([*objs, 3], np.float32),
        "scenes/position.npy": arr([*objs, 3], np.float32),
        "scenes/props.npy": arr([*objs, len(PROPERTIES)], np.int8),
        "scenes/rotation.npy": arr(objs, np.float32),
        "truth.npy": arr([h, num_words(n)], "<u8"),
        "truth_by_scene.npy": arr([n, num_words(h)], "<u8"),
    }


def sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 16 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def sample_sha256(path: Path, config: dict) -> str:
    """SHA-256 of the bank's `config` (canonical JSON) and a file's first and last 64 KiB (all
    of it when smaller): cheap enough for every load, it tells apart files of equal shape and
    dtype (two swapped scene arrays, the same file of another bank), sees damage at either
    end, and refuses a manifest whose config is not the one the files were built with."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = hashlib.sha256(_canonical_json(config))
        h.update(f.read(_SAMPLE))
        if size > _SAMPLE:
            f.seek(max(_SAMPLE, size - _SAMPLE))
            h.update(f.read())
    return h.hexdigest()


def _npy_header(f, size: int, what: str) -> dict:
    """Shape and dtype from an open ``.npy`` stream of `size` bytes, refusing a header that does
    not parse, Fortran order, objects, and a size other than header + data (truncation)."""
    try:
        version = npy.read_magic(f)
        read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
        if version not in read:
            raise ValueError(f"unsupported .npy version {version}")
        shape, fortran, dtype = read[version](f)
    except Exception as e:  # noqa: BLE001 -- numpy parses a damaged header with ast/tokenize
        raise ValueError(f"{what} is not a valid .npy file ({str(e)[:120]})") from None
    if fortran or dtype.hasobject:
        raise ValueError(f"{what} holds {'Fortran-ordered' if fortran else 'object'} data")
    want = f.tell() + math.prod(shape) * dtype.itemsize
    if size != want:
        raise ValueError(f"{what} has {size} bytes, its header needs {want} (truncated?)")
    return {"shape": list(shape), "dtype": dtype.str}


def describe(path: Path, name: str) -> dict:
    """What a bank file is, read cheaply (headers, sizes): ``bytes`` and, by kind, ``shape``
    and ``dtype``, ``arrays`` or ``lines`` (the last reads the file; `check_files` leaves it to
    `ConceptBank`, which reads the text anyway).

    Raises:
        ValueError: the file does not parse as its kind.
        OSError: the file is missing or unreadable.
    """
    f = path / name
    size = f.stat().st_size
    if name.endswith(".npy"):
        with open(f, "rb") as fh:
            return {"bytes": size, **_npy_header(fh, size, name)}
    if name.endswith(".npz"):
        arrays = {}
        try:
            with zipfile.ZipFile(f) as z:
                for info in z.infolist():
                    key = info.filename.removesuffix(".npy")
                    with z.open(info) as fh:
                        arrays[key] = _npy_header(fh, info.file_size, f"{name}:{key}")
        except (zipfile.BadZipFile, EOFError, NotImplementedError) as e:
            raise ValueError(f"{name} is not a valid .npz file ({e})") from None
        return {"bytes": size, "arrays": dict(sorted(arrays.items()))}
    return {"bytes": size, "lines": f.read_bytes().count(b"\n")}


def _canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _canonical(manifest: dict) -> bytes:
    return _canonical_json({k: v for k, v in manifest.items() if k != "manifest_sha256"})


def seal(manifest: dict) -> dict:
    """`manifest` with its own checksum ``manifest_sha256`` added."""
    return {**manifest, "manifest_sha256": hashlib.sha256(_canonical(manifest)).hexdigest()}


def read_manifest(path: Path, hint: str) -> object:
    """The parsed ``manifest.json`` of the bank at `path` (any JSON value; `check_manifest`
    says whether it is a manifest).

    Raises:
        BankError: no manifest, not a regular file, unreadable, too large or not JSON.
    """
    f = path / MANIFEST
    if not f.exists():  # a dangling symlink too
        raise BankError(f"{path} has no {MANIFEST}: not a complete bank; {hint}")
    _regular(path, f, "its manifest")
    try:
        if f.stat().st_size > _MAX_MANIFEST_BYTES:
            raise _damaged(path, f"{MANIFEST} has {f.stat().st_size} bytes, not a bank manifest")
        return json.loads(f.read_bytes())
    except FileNotFoundError:
        raise BankError(f"{path} has no {MANIFEST}: not a complete bank; {hint}") from None
    except (OSError, ValueError, RecursionError) as e:  # JSON and UTF-8 errors are ValueErrors
        raise _damaged(path, f"{MANIFEST} is unreadable or not JSON ({str(e)[:120]})") from None


def _match(value, schema, where: str) -> str | None:
    """Where `value` differs from `schema` (a type, or a dict of schemas with exactly these
    keys), or None. Types are strict: a bool is no int, an int no float."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return f"{where} is {type(value).__name__}, not an object"
        missing, extra = sorted(set(schema) - set(value)), sorted(set(value) - set(schema))
        if missing or extra:
            return f"{where or 'the manifest'} lacks {missing} / has unknown {extra}"
        for k, sub in schema.items():
            if (bad := _match(value[k], sub, f"{where}.{k}".lstrip("."))) is not None:
                return bad
        return None
    if type(value) is not schema:
        return f"{where} is {type(value).__name__}, not {schema.__name__}"
    if schema in (int, float) and not (math.isfinite(value) and value >= 0):
        return f"{where} is {value}, not a finite number >= 0"
    return None


def _same(a, b) -> bool:
    """Equal including types (``993.0`` is not ``993``)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def check_manifest(path: Path, manifest: object, config_types: dict[str, type]) -> dict:
    """Check everything a manifest states before anything is read by it: that it is a format
    3 manifest object, its own checksum, every field's presence and type, the counts' own
    invariants, and that it lists exactly the files `layout` requires with exactly their
    shapes and dtypes. Returns the manifest.

    Args:
        config_types: each `BankConfig` identity field with its type.

    Raises:
        BankError: naming the first thing that is wrong.
    """
    if not isinstance(manifest, dict):
        raise _damaged(path, f"{MANIFEST} holds a {type(manifest).__name__}, not an object")
    fmt = manifest.get("format")
    if fmt != FORMAT_VERSION or type(fmt) is not int:
        raise BankError(
            f"bank at {path} has format {fmt!r}, this curi reads {FORMAT_VERSION}; {REBUILD}"
        )
    try:
        own = hashlib.sha256(_canonical(manifest)).hexdigest()
    except (ValueError, TypeError, RecursionError):
        own = None
    if manifest.get("manifest_sha256") != own:
        raise _damaged(path, f"{MANIFEST} does not match its own checksum (edited or corrupt)")
    schema = {
        "format": int,
        "version": str,
        "config": config_types,
        "counts": {**dict.fromkeys(_COUNTS, int), "static_rejections": dict.fromkeys(REASONS, int)},
        "timings_s": dict.fromkeys(TIMINGS, float),
        "workers": int,
        "files": dict,
        "manifest_sha256": str,
    }
    if (bad := _match(manifest, schema, "")) is not None:
        raise _damaged(path, f"{MANIFEST}: {bad}")
    _check_counts(path, manifest["config"], manifest["counts"])
    want, files = layout(manifest["config"], manifest["counts"]), manifest["files"]
    if set(files) != set(want):
        missing, extra = sorted(set(want) - set(files)), sorted(set(files) - set(want))
        raise _damaged(path, f"{MANIFEST} does not list {missing} / lists unknown {extra}")
    for name, spec in want.items():
        entry = files[name] if isinstance(files[name], dict) else {}
        stated = {k: v for k, v in entry.items() if k not in (*_DIGESTS, "bytes")}
        if (
            not all(isinstance(entry.get(d), str) and len(entry[d]) == 64 for d in _DIGESTS)
            or _match(entry.get("bytes"), int, "bytes") is not None
            or not _same(stated, spec)
        ):
            raise _damaged(
                path,
                f"{MANIFEST} records {name} as {json.dumps(entry)[:300]}; its counts require "
                f"{json.dumps(spec)} with its digests and size in bytes",
            )
    return manifest


def _check_counts(path: Path, config: dict, counts: dict) -> None:
    """The invariants every build satisfies between the counts and the config."""
    c = counts
    rejected = sum(c["static_rejections"].values())
    rules = {
        "counts.draws == config.num_draws": c["draws"] == config["num_draws"],
        "counts.scenes == config.num_scenes": c["scenes"] == config["num_scenes"],
        "unique_draws <= successful_draws <= draws": (
            c["unique_draws"] <= c["successful_draws"] <= c["draws"]
        ),
        "executed + static_rejections <= unique_draws": c["executed"] + rejected
        <= c["unique_draws"],
        "concepts + too_rare + too_frequent == executed": (
            c["concepts"] + c["too_rare"] + c["too_frequent"] == c["executed"]
        ),
        "synonym_groups <= concepts": c["synonym_groups"] <= c["concepts"],
        "eval_set == concepts * config.eval_per_concept": (
            c["eval_set"] == c["concepts"] * config["eval_per_concept"]
        ),
    }
    broken = [rule for rule, ok in rules.items() if not ok]
    if broken:
        raise _damaged(path, f"{MANIFEST} counts break {broken}")


def check_files(path: Path, manifest: dict, *, verify: bool) -> None:
    """Check every file the (checked) manifest lists: a regular file (a FIFO would block its
    reader), and its size, shape, dtype and `sample_sha256` (of the manifest's config and the
    file) as recorded (cheap: headers and 128 KiB a file); with `verify`, its SHA-256 too
    (reads everything).

    Raises:
        BankError: naming the file and what is wrong with it.
    """
    for name, entry in manifest["files"].items():
        f = path / name
        if not f.exists():
            raise BankError(f"bank at {path} is missing {name}; {REBUILD}")
        _regular(path, f, "file")
        try:
            actual = describe(path, name) if not name.endswith(".txt") else None
            size = f.stat().st_size
        except (OSError, ValueError) as e:
            raise _damaged(path, str(e)[:300]) from None
        if size != entry["bytes"]:
            raise _damaged(path, f"{name} has {size} bytes, the manifest records {entry['bytes']}")
        if actual is not None:
            stated = {k: v for k, v in entry.items() if k not in _DIGESTS}
            if not _same(actual, stated):
                found, recorded = json.dumps(actual), json.dumps(stated)
                raise _damaged(path, f"{name} is {found}, the manifest records {recorded}")
        sample = sample_sha256(f, manifest["config"])
        if sample != entry["sample_sha256"] or verify and sha256(f) != entry["sha256"]:
            raise BankError(
                f"bank file {f} is corrupt or was built with another config than the manifest "
                f"states (checksum mismatch); {REBUILD}"
            )
