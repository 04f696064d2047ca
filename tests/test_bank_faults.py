"""A damaged bank never loads wrong data and never raises anything but a `BankError`: every
file of a built bank and every field of its manifest is corrupted in turn (the lists are read
from the built manifest, so a new file or field is covered without editing this module); and
builds of one bank running at once, or killed mid-way or mid-swap, leave a bank that loads and
nothing stale (docs/reliability.md, "Bank: manifest, concurrent and interrupted builds")."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from curi import BankConfig, BankError, build_bank, load_bank

SMALL = BankConfig(name="b", num_scenes=2000, num_draws=4000, seed=0, workers=1)


# --- helpers ----------------------------------------------------------------------------------
def _reseal(m: dict) -> dict:
    """`m` with a correct ``manifest_sha256`` (an edit made by someone who knows the format):
    SHA-256 of the canonical JSON of everything else."""
    body = {k: v for k, v in m.items() if k != "manifest_sha256"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return {**m, "manifest_sha256": hashlib.sha256(blob).hexdigest()}


def _snapshot(bank) -> dict:
    """Everything a loaded bank serves, to compare a load with the original."""
    arrays = {
        k: np.array(getattr(bank, k))
        for k in (
            "truth_words",
            "truth_by_scene",
            "groups",
            "lengths",
            "log_prior",
            "pcfg_logprob",
            "counts",
            "eval_ids",
            "eval_concepts",
        )
    }
    arrays.update({f"scenes.{k}": np.array(v) for k, v in bank.scenes.arrays().items()})
    return {"concepts": list(bank.concepts), "config": dict(bank.config), "arrays": arrays}


def _same(a: dict, b: dict, *, config: bool = True) -> bool:
    if a["concepts"] != b["concepts"] or (config and a["config"] != b["config"]):
        return False
    return a["arrays"].keys() == b["arrays"].keys() and all(
        x.dtype == b["arrays"][k].dtype and np.array_equal(x, b["arrays"][k])
        for k, x in a["arrays"].items()
    )


def _outcome(path: Path, verify: bool, original: dict, *, config: bool = True) -> str:
    """``error`` (a BankError), ``same`` (loads the original data, and config unless told
    not to compare it) or ``WRONG DATA``; any other exception propagates and fails the test."""
    try:
        bank = load_bank(path, verify=verify)
    except BankError as e:
        assert "\n" not in str(e) and len(str(e)) < 1000, str(e)
        return "error"
    return "same" if _same(_snapshot(bank), original, config=config) else "WRONG DATA"


@pytest.fixture(scope="module")
def original(tiny_bank_dir) -> dict:
    return _snapshot(load_bank(tiny_bank_dir))


@pytest.fixture(scope="module")
def manifest(tiny_bank_dir) -> dict:
    return json.loads((tiny_bank_dir / "manifest.json").read_text())


@pytest.fixture()
def copy(tiny_bank_dir, tmp_path) -> Path:
    out = tmp_path / "tiny"
    shutil.copytree(tiny_bank_dir, out)
    return out


def _put(path: Path, data: bytes) -> None:
    """Replace a file by a new inode (a memory map of the old one stays valid)."""
    if path.is_dir():
        shutil.rmtree(path)
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _restore(copy: Path, src: Path, name: str) -> None:
    target = copy / name
    if target.is_dir():
        shutil.rmtree(target)
    _put(target, (src / name).read_bytes())


# --- every file ---------------------------------------------------------------------------------
def _reshaped(name: str, data: bytes, how: str) -> bytes:
    """The file with the same values under another shape or another dtype of the same size."""
    import io

    def redo(arr: np.ndarray) -> np.ndarray:
        if how == "reshape":
            return arr.reshape(-1) if arr.ndim > 1 else arr.reshape(1, -1)
        size = arr.dtype.itemsize
        return arr.view(f"i{size}" if arr.dtype.kind in "uf" else f"u{size}")

    buf = io.BytesIO()
    if name.endswith(".npy"):
        np.save(buf, redo(np.load(io.BytesIO(data))))
    elif name.endswith(".npz"):
        z = dict(np.load(io.BytesIO(data)))
        first = sorted(z)[0]
        np.savez(buf, **{**z, first: redo(z[first])})
    else:  # text: one concept more
        return data + data.split(b"\n")[0] + b"\n"
    return buf.getvalue()


def _corrupt(copy: Path, files: list[str], name: str, kind: str) -> None:
    f = copy / name
    data = f.read_bytes()
    if kind == "delete":
        f.unlink()
    elif kind == "directory":
        f.unlink()
        f.mkdir()
    elif kind == "truncate_half":
        _put(f, data[: len(data) // 2])
    elif kind == "truncate_last_byte":
        _put(f, data[:-1])
    elif kind == "empty":
        _put(f, b"")
    elif kind == "append":
        _put(f, data + b"\0" * 8)
    elif kind.startswith("flip_"):
        at = {"flip_header": 8, "flip_middle": len(data) // 2, "flip_last": len(data) - 1}[kind]
        _put(f, data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1 :])
    elif kind == "swap":  # with the next file of the bank
        other = files[(files.index(name) + 1) % len(files)]
        _put(f, (copy / other).read_bytes())
    elif kind in ("reshape", "retype"):
        _put(f, _reshaped(name, data, kind))
    else:
        raise AssertionError(kind)


FILE_FAULTS = [
    "delete",
    "directory",
    "empty",
    "truncate_half",
    "truncate_last_byte",
    "append",
    "swap",
    "reshape",
    "retype",
    "flip_header",
    "flip_middle",
    "flip_last",
]
# Without `verify` a loader reads headers, sizes and each file's first and last 64 KiB: a
# changed byte in the middle of a larger file is the one fault it cannot see.
CHEAP_BLIND = {"flip_middle"}


def test_manifest_lists_exactly_the_files_of_the_bank(tiny_bank_dir, manifest):
    on_disk = {
        p.relative_to(tiny_bank_dir).as_posix() for p in tiny_bank_dir.rglob("*") if p.is_file()
    }
    assert set(manifest["files"]) == on_disk - {"manifest.json"}
    for entry in manifest["files"].values():
        assert len(entry["sha256"]) == len(entry["sample_sha256"]) == 64 and entry["bytes"] > 0
        assert {"shape", "dtype"} <= set(entry) or {"arrays"} <= set(entry) or "lines" in entry


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "cheap"])
@pytest.mark.parametrize("kind", FILE_FAULTS)
def test_every_damaged_file_is_a_bank_error(tiny_bank_dir, copy, manifest, original, kind, verify):
    files = sorted(manifest["files"])
    bad = {}
    for name in files:
        if not verify and kind in CHEAP_BLIND and (copy / name).stat().st_size > 2 << 16:
            continue
        _corrupt(copy, files, name, kind)
        if (got := _outcome(copy, verify, original)) != "error":
            bad[name] = got
        _restore(copy, tiny_bank_dir, name)
    assert not bad, f"{kind} (verify={verify}) not refused: {bad}"
    assert _outcome(copy, True, original) == "same"


def test_a_file_from_another_bank_is_refused(tiny_bank_dir, copy, manifest, original, tmp_path):
    """The same file of a bank built with another seed (other concepts, same scene count)."""
    from conftest import TINY

    other = build_bank(BankConfig(**{**TINY.__dict__, "seed": 1}), tmp_path / "o", progress=False)
    bad = {}
    for name in sorted(manifest["files"]):
        _put(copy / name, (other / name).read_bytes())
        for verify in (True, False):
            if (got := _outcome(copy, verify, original)) != "error":
                bad[name, verify] = got
        _restore(copy, tiny_bank_dir, name)
    assert not bad, bad


# --- every manifest field -------------------------------------------------------------------------
def _paths(node, prefix=()):
    """Every field of the manifest (objects and leaves), as key paths."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


def _mutate(m: dict, path: tuple, how: str) -> dict:
    m = json.loads(json.dumps(m))
    parent = m
    for k in path[:-1]:
        parent = parent[k]
    key, value = path[-1], parent[path[-1]]
    if how == "delete":
        del parent[key]
    elif how == "null":
        parent[key] = None
    elif how == "wrong_type":
        parent[key] = [value] if not isinstance(value, list) else {"0": value}
    elif how == "as_string":
        parent[key] = str(value) if not isinstance(value, str) else 7
    elif how == "change":
        if isinstance(value, bool) or value is None:
            parent[key] = not value
        elif isinstance(value, int):
            parent[key] = value + 1
        elif isinstance(value, float):
            parent[key] = value * 2 + 0.5
        elif isinstance(value, str):
            parent[key] = value[:-1] + ("0" if value[-1:] != "0" else "1")
        elif isinstance(value, list):
            parent[key] = [*value, 1]
        else:
            parent[key] = {**value, "extra": 1}
    return m


FIELD_FAULTS = ["delete", "null", "wrong_type", "as_string", "change"]


@pytest.mark.parametrize("how", FIELD_FAULTS)
def test_every_manifest_field_edit_is_refused(copy, manifest, original, how):
    """Any edit breaks the manifest's own checksum. With the checksum recomputed (a forgery,
    which a checksum without a key cannot see), a deleted or mistyped field is still refused,
    and so is a changed config value (the files' sample digests bind the config); any other
    changed value is refused or loads exactly the original files: only a field that sizes
    nothing (a timing, a count the loader does not read) can change that way."""
    bad = {}
    for path in _paths(manifest):
        edited = _mutate(manifest, path, how)
        for reseal in (False, True) if path != ("manifest_sha256",) else (False,):
            (copy / "manifest.json").write_text(json.dumps(_reseal(edited) if reseal else edited))
            for verify in (True, False):
                got = _outcome(copy, verify, original, config=not reseal)
                lenient = reseal and how == "change" and path[0] != "config"
                ok = {"error", "same"} if lenient else {"error"}
                if got not in ok:
                    bad[".".join(path), reseal, verify] = got
    assert not bad, bad


def test_fields_that_size_the_bank_are_refused_even_resealed(copy, manifest, original):
    """The audit's case: ``config.num_scenes`` changed loaded and failed later (IndexError)."""
    for path in [
        ("config", "num_scenes"),
        ("config", "eval_per_concept"),
        ("counts", "concepts"),
        ("counts", "scenes"),
        ("counts", "eval_set"),
        ("files", "truth.npy", "shape"),
        ("files", "truth.npy", "dtype"),
        ("files", "concepts.txt", "lines"),
        ("files", "eval_ids.npy", "bytes"),
    ]:
        (copy / "manifest.json").write_text(json.dumps(_reseal(_mutate(manifest, path, "change"))))
        with pytest.raises(BankError, match="damaged"):
            load_bank(copy, verify=False)


def test_a_file_the_manifest_stops_listing_is_refused(copy, manifest):
    for name in manifest["files"]:
        m = json.loads(json.dumps(manifest))
        del m["files"][name]
        (copy / "manifest.json").write_text(json.dumps(_reseal(m)))
        with pytest.raises(BankError, match=f"does not list.*{name}"):
            load_bank(copy, verify=False)


@pytest.mark.parametrize(
    "text",
    [
        "null",
        "[]",
        "[1, 2]",
        "3",
        '"manifest"',
        "{}",
        "",
        "{",
        "\xff\xfe garbage",
        "[" * 100_000 + "]" * 100_000,
        '{"format": 3}',
        "NaN",
    ],
    ids=lambda t: repr(t[:12]),
)
def test_a_manifest_that_is_not_one_is_a_bank_error(copy, original, text):
    (copy / "manifest.json").write_bytes(text.encode("latin-1"))
    assert _outcome(copy, True, original) == "error"


def test_huge_or_missing_manifest(copy, original):
    (copy / "manifest.json").write_bytes(b" " * (2 << 20) + b"{}")
    with pytest.raises(BankError, match="bytes, not a bank manifest"):
        load_bank(copy)
    (copy / "manifest.json").unlink()
    (copy / "manifest.json").mkdir()
    assert _outcome(copy, True, original) == "error"


def _forge_config(copy: Path, manifest: dict, *, redigest: bool, **config) -> None:
    """Write a manifest whose config holds `config`, resealed; with `redigest`, every file's
    sample digest recomputed for that config too (a forger who knows the whole format)."""
    from curi.bank_format import sample_sha256

    m = json.loads(json.dumps(manifest))
    m["config"].update(config)
    if redigest:
        for name, entry in m["files"].items():
            entry["sample_sha256"] = sample_sha256(copy / name, m["config"])
    (copy / "manifest.json").write_text(json.dumps(_reseal(m)))


@pytest.mark.parametrize(
    "config, why",
    [
        ({"image_width": 0}, r"bank\.image_width must be an integer in \[8, 16384\], got 0"),
        ({"name": "../x"}, r"bank name '\.\./x' is not a plain name"),
        ({"name": "a" * 300}, "bank name has 300 characters; use at most 200"),
        ({"max_fraction": 1e-9}, "bank.min_positives=11 leaves no concept"),
        ({"location_bins": "sideways"}, "bank.location_bins"),
    ],
)
def test_a_manifest_config_the_builder_refuses_is_refused(copy, manifest, config, why):
    """The builder's own checks (`BankConfig.check`) run on a loaded manifest's config, even
    when every digest was recomputed to match it."""
    _forge_config(copy, manifest, redigest=True, **config)
    for verify in (True, False):
        with pytest.raises(
            BankError,
            match=f"damaged: its manifest.json states a config the "
            f"builder refuses \\({why}.*force=true",
        ) as e:
            load_bank(copy, verify=verify)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "config",
    [
        {"location_bins": "legacy"},  # one concept went from 688 matching scenes to 0
        {"location_bins": "spec"},
        {"layout": "clevr"},
        {"image_width": 480, "image_height": 320},
        {"seed": 7},
        {"max_depth": 5},
        {"min_positives": 12},
        {"name": "other"},
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_a_config_edit_with_the_manifest_resealed_is_refused(copy, manifest, config):
    """Options that change what a bank means (how location literals read, the camera ...) are
    bound to its files by their sample digests: resealing the manifest is not enough."""
    _forge_config(copy, manifest, redigest=False, **config)
    for verify in (True, False):
        with pytest.raises(BankError, match="built with another config.*checksum mismatch"):
            load_bank(copy, verify=verify)
    _forge_config(copy, manifest, redigest=False)  # the original config loads again
    load_bank(copy)


def test_a_format_3_bank_asks_for_a_rebuild(copy, manifest):
    """Format 3's sample digests did not bind the config: such banks are refused, not read
    with a config nothing vouches for."""
    from curi.bank_format import sample_sha256

    m = json.loads(json.dumps(manifest))
    m["format"] = 3
    for name, entry in m["files"].items():  # format 3: digests of the file alone
        body = (copy / name).read_bytes()
        head, tail = body[: 1 << 16], body[max(1 << 16, len(body) - (1 << 16)) :]
        entry["sample_sha256"] = hashlib.sha256(head + tail).hexdigest()
        assert entry["sample_sha256"] != sample_sha256(copy / name, m["config"])
    (copy / "manifest.json").write_text(json.dumps(_reseal(m)))
    with pytest.raises(BankError, match=r"format 3, this curi reads 4; rebuild it.*force=true"):
        load_bank(copy)


@contextmanager
def _deadline(seconds: int):
    """Fail the test instead of hanging when a read blocks (SIGALRM interrupts the open; the
    failure is no OSError, so no ``except OSError`` turns it into another error)."""

    def expire(signum, frame):
        pytest.fail(f"still blocked after {seconds} s")

    before = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def test_a_fifo_in_place_of_any_bank_file_is_refused_not_waited_on(copy, manifest):
    """A FIFO as ``manifest.json`` blocked `load_bank` forever (opening it waits for a
    writer); every file the loader opens must be a regular file."""
    for name in ["manifest.json", *sorted(manifest["files"])]:
        saved = (copy / name).read_bytes()
        (copy / name).unlink()
        os.mkfifo(copy / name)
        for verify in (True, False):
            with (
                _deadline(300),
                pytest.raises(BankError, match=f"{name}' is a FIFO, not a regular"),
            ):
                load_bank(copy, verify=verify)
        (copy / name).unlink()
        (copy / name).write_bytes(saved)
    load_bank(copy)


def test_an_old_format_bank_asks_for_a_rebuild(copy, manifest, tmp_path):
    old = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    old["files"] = {name: e["sha256"] for name, e in manifest["files"].items()}  # format 2
    old["format"] = 2
    (copy / "manifest.json").write_text(json.dumps(old))
    with pytest.raises(BankError, match=r"format 2, this curi reads \d+; rebuild it.*force=true"):
        load_bank(copy)


# --- concurrent and interrupted builds --------------------------------------------------------
DRIVER = r"""
import logging, os, shutil, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, format="%(message)s")
logging.getLogger("curi.bank").setLevel(logging.DEBUG)  # "reusing" is a DEBUG line
import curi.bank as bank
import curi.bank_build as bank_build
data, name, force, hook, marker = sys.argv[1:6]
cfg = bank.BankConfig(name=name, num_scenes=2000, num_draws=4000, seed=0, workers=1)

def hang():
    Path(marker).touch()
    time.sleep(60)

if hook == "slow":  # a build that goes on until told (a second one starts meanwhile)
    groups = bank_build._synonym_groups
    def slow(rows):
        Path(marker).touch()
        end = time.monotonic() + 900
        while not Path(marker + ".go").exists() and time.monotonic() < end:
            time.sleep(0.02)
        return groups(rows)
    bank_build._synonym_groups = slow
elif hook == "mid_build":
    bank_build._synonym_groups = lambda rows: hang()
elif hook == "after_aside":  # the old bank moved aside, the new one not yet renamed in
    rename = os.rename
    def hooked(src, dst, *a, **k):
        rename(src, dst, *a, **k)
        if ".old-" in str(dst):
            hang()
    os.rename = hooked
elif hook == "deleting_old":  # killed while deleting the old bank
    rmtree = shutil.rmtree
    def hooked(p, *a, **k):
        if ".old-" in str(p):
            (Path(p) / "truth.npy").unlink()
            hang()
        return rmtree(p, *a, **k)
    shutil.rmtree = hooked
bank.build_bank(cfg, data, progress=False, force=force == "1")
print("done")
"""


def _start(data: Path, marker: Path, *, force=False, hook="none") -> subprocess.Popen:
    args = [str(data), SMALL.name, "1" if force else "0", hook, str(marker)]
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the build never reached the hook"
        time.sleep(0.02)


def _open_files(pid: int) -> set[str]:
    out = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                out.add(os.readlink(fd))
            except OSError:
                pass
    except OSError:  # the process has ended
        pass
    return out


def _leftovers(data: Path) -> list[str]:
    """Hidden entries beside the bank other than its lock file."""
    return sorted(p.name for p in data.iterdir() if p.name.startswith(".") and p.suffix != ".lock")


@pytest.mark.parametrize("force", [False, True], ids=["reuse", "force"])
def test_concurrent_builds_of_one_bank_both_succeed(tmp_path, force):
    """The second builder waits for the first (it used to delete the first's temporary
    folder), then reuses the bank the first published."""
    data = tmp_path / "data"
    first = _start(data, tmp_path / "m1", hook="slow")
    _wait_for(tmp_path / "m1", first)  # the first is building
    second = _start(data, tmp_path / "m2", force=force)
    lock = str(data / f".{SMALL.name}.lock")
    end = time.monotonic() + 600
    try:
        while lock not in _open_files(second.pid):  # the second has reached the lock
            assert second.poll() is None and time.monotonic() < end, second.communicate()
            time.sleep(0.02)
        time.sleep(0.3)
    finally:
        (tmp_path / "m1.go").touch()
        outs = [p.communicate(timeout=600) for p in (first, second)]
    for p, (out, err) in zip((first, second), outs, strict=True):
        assert p.returncode == 0 and out.strip() == "done", err[-2000:]
    assert "waiting for another process" in outs[1][1]
    assert "reusing" in outs[1][1]
    assert len(load_bank(data / SMALL.name)) > 0
    assert _leftovers(data) == []


def test_killed_build_leaves_nothing_stale_and_the_next_build_succeeds(tmp_path):
    data = tmp_path / "data"
    proc = _start(data, tmp_path / "m", hook="mid_build")
    _wait_for(tmp_path / "m", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)
    assert not (data / SMALL.name).exists() and len(_leftovers(data)) == 1  # its temporary
    with pytest.raises(BankError, match="not found"):
        load_bank(data / SMALL.name)
    assert len(load_bank(build_bank(SMALL, data, progress=False))) > 0
    assert _leftovers(data) == []


@pytest.mark.parametrize("hook", ["after_aside", "deleting_old"])
def test_a_kill_during_the_forced_swap_leaves_a_bank(tmp_path, hook):
    """Killed between moving the old bank aside and renaming the new one in, or while
    deleting the old one: the next load finds a complete bank and removes the leftovers."""
    data = tmp_path / "data"
    want = load_bank(build_bank(SMALL, data, progress=False)).concepts
    proc = _start(data, tmp_path / "m", force=True, hook=hook)
    _wait_for(tmp_path / "m", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)
    assert any(".old-" in name for name in _leftovers(data))
    assert load_bank(data / SMALL.name).concepts == want
    assert _leftovers(data) == []
    assert load_bank(build_bank(SMALL, data, progress=False)).concepts == want


def test_stale_leftovers_are_cleaned_and_an_old_bank_put_back(tmp_path):
    data = tmp_path / "data"
    final = build_bank(SMALL, data, progress=False)
    for junk in (".b.old-999999", ".b.tmp-999999"):
        (data / junk).mkdir()
        (data / junk / "truth.npy").write_bytes(b"half")
    build_bank(SMALL, data, progress=False)  # reused; the leftovers go
    assert _leftovers(data) == []
    (data / ".b.old-999999").mkdir()
    load_bank(final)  # a load cleans too
    assert _leftovers(data) == []
    final.rename(data / ".b.old-999999")  # a swap killed before the new bank was renamed in
    assert len(load_bank(final)) > 0
    assert _leftovers(data) == []


def test_forked_workers_do_not_hold_the_build_lock(tmp_path):
    """A build's executing workers are forked while it holds the lock; one left running after
    its parent is gone must not block the next build."""
    from curi.bank import _build_lock

    final = tmp_path / "b"
    started, ready = os.pipe()
    with _build_lock(final, wait=True):
        pid = os.fork()
        if pid == 0:  # the child (its fork handlers have run): outlives the lock's holder
            os.write(ready, b"1")
            time.sleep(5)
            os._exit(0)
        assert os.read(started, 1) == b"1"
    try:
        with _build_lock(final, wait=False) as held:
            assert held is not None
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(started)
        os.close(ready)


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_special_file_in_place_of_the_build_lock_is_refused(tmp_path, kind):
    """A FIFO as ``.<name>.lock`` blocked the build forever (opened for writing, it waits for
    a reader); a symlink would lock a file elsewhere. Both are one BankError line (the alarm
    turns a regression into a failure, not a hang)."""
    lock = tmp_path / ".tiny.lock"
    os.mkfifo(lock) if kind == "fifo" else os.symlink(tmp_path / "elsewhere", lock)

    def hang(*_):
        pytest.fail("the build still blocks on its lock file after 300 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(300)
    try:
        with pytest.raises(BankError, match=r"lock file .*\.tiny\.lock is not a regular file"):
            build_bank("tiny", tmp_path, progress=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "tiny").exists()
