"""Sharded exports (``jobs=N``): the episodes written by N jobs as parts in a staging folder,
then published by one step into the single-job export, byte for byte; a failed job's part
redone alone by the next run; `curi episodes render ... jobs=N` the same files as one job."""

import json

import numpy as np
import pytest
from conftest import run_curi

import curi.export
import curi.export.write
from curi.errors import ConfigError, CuriError
from curi.export import export_episodes, read_episode_file
from curi.export.parts import staging_folder
from curi.jobs import Launcher
from curi.renderers.rerender import media
from curi.splits import make_split


@pytest.fixture(scope="module")
def split(tiny_bank):
    return make_split(tiny_bank, "counting")


@pytest.fixture(scope="module")
def small():
    return media("image", width=24, height=16)


def _export(tiny_bank, split, out, **kw):
    kw = {"n": 5, "shard_size": 2, "progress": False, **kw}
    return export_episodes(tiny_bank, split, "test", out, **kw)


def _bytes(result) -> dict:
    """Every file of an export (its files and card) by name."""
    return {p.name: p.read_bytes() for p in [*result["files"], result["card"]]}


@pytest.mark.parametrize(
    ("name", "with_media"),
    [("eps.tar", True), ("eps.parquet", True), ("eps.jsonl.gz", False), ("eps.jsonl", False)],
)
def test_jobs_give_the_single_job_export_byte_for_byte(
    tiny_bank, split, small, tmp_path, name, with_media
):
    m = small if with_media else None
    one = _export(tiny_bank, split, tmp_path / "one" / name, media=m)
    # 5 episodes in 3 jobs: ranges 0, 1-2, 3-4, across the tar shards 0-1, 2-3, 4
    three = _export(tiny_bank, split, tmp_path / "three" / name, media=m, jobs=3)
    assert _bytes(three) == _bytes(one)
    if name == "eps.tar":
        assert len(three["files"]) == 3
    assert sorted(p.name for p in (tmp_path / "three").iterdir()) == sorted(_bytes(one))
    assert not staging_folder(tmp_path / "three" / name).exists()


def test_submitit_jobs_give_the_single_job_export(tiny_bank, split, tmp_path):
    pytest.importorskip("submitit")
    one = _export(tiny_bank, split, tmp_path / "one" / "eps.tar", n=5, shard_size=2)
    launcher = Launcher("submitit_local", {"cpus_per_task": 1}, folder=tmp_path / "logs")
    out = tmp_path / "two" / "eps.tar"
    two = _export(tiny_bank, split, out, n=5, shard_size=2, jobs=2, launcher=launcher)
    assert _bytes(two) == _bytes(one)
    assert list((tmp_path / "logs" / ".submitit").iterdir())  # the jobs ran through submitit
    assert not staging_folder(out).exists()


_EXPORT_RANGE = curi.export.write._export_range


def _recording(monkeypatch, fail: int | None = None) -> list[int]:
    """Record the parts the export's jobs write; the job of part `fail` raises."""
    calls: list[int] = []

    def job(*args):
        part = args[-1]
        calls.append(part.number)
        if part.number == fail:
            raise RuntimeError("the renderer ran out of memory")
        return _EXPORT_RANGE(*args)

    monkeypatch.setattr(curi.export.write, "_export_range", job)
    return calls


def test_a_failed_job_is_redone_alone_and_finished_parts_are_reused(
    tiny_bank, split, tmp_path, monkeypatch
):
    one = _export(tiny_bank, split, tmp_path / "one" / "eps.tar")
    out = tmp_path / "jobs" / "eps.tar"
    calls = _recording(monkeypatch, fail=1)
    with pytest.raises(CuriError) as e:
        _export(tiny_bank, split, out, jobs=3)
    message = str(e.value)
    assert "\n" not in message and "job part-00001 (episodes 1..2) failed" in message
    assert "RuntimeError: the renderer ran out of memory" in message
    assert "the 2 finished parts of 3 are kept" in message
    assert calls == [0, 1, 2]
    assert not (tmp_path / "jobs" / "eps.tar.card.md").exists()  # nothing published
    parts = [p.name for p in staging_folder(out).rglob("part-*.done")]
    assert sorted(parts) == ["part-00000.done", "part-00002.done"]

    calls = _recording(monkeypatch)
    again = _export(tiny_bank, split, out, jobs=3)
    assert calls == [1]  # only the failed part
    assert _bytes(again) == _bytes(one)
    assert not staging_folder(out).exists()


def test_parts_of_other_settings_are_never_reused(tiny_bank, split, tmp_path, monkeypatch):
    out = tmp_path / "eps.jsonl"
    _recording(monkeypatch, fail=2)
    with pytest.raises(CuriError, match="part-00002"):
        _export(tiny_bank, split, out, jobs=3)
    calls = _recording(monkeypatch)
    other = _export(tiny_bank, split, out, jobs=3, seed=1)  # another seed: all redone
    assert calls == [0, 1, 2]
    single = _export(tiny_bank, split, tmp_path / "single" / "eps.jsonl", seed=1)
    assert _bytes(other) == _bytes(single)
    assert not staging_folder(out).exists()  # the other settings' parts removed too


def test_more_jobs_than_episodes_run_one_job_per_episode(tiny_bank, split, tmp_path, monkeypatch):
    calls = _recording(monkeypatch)
    out = _export(tiny_bank, split, tmp_path / "eps.jsonl", n=2, jobs=5)
    assert calls == [0, 1]
    assert [ep["index"] for ep in read_episode_file(out["episodes"])] == [0, 1]


@pytest.mark.parametrize("jobs", [0, -1, 10_001, 2.5, "two", True])
def test_bad_jobs_are_refused_in_one_line(tiny_bank, split, tmp_path, jobs):
    with pytest.raises(ConfigError, match=r"^jobs") as e:
        _export(tiny_bank, split, tmp_path / "eps.jsonl", jobs=jobs)
    assert "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())


def _cli(tiny_bank_dir, tmp_path, *args):
    return run_curi(
        "episodes",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "split=counting",
        "progress=false",
        *args,
        cwd=tmp_path,
    )


def test_cli_jobs_give_the_library_export(tiny_bank, tiny_bank_dir, split, tmp_path):
    one = _export(tiny_bank, split, tmp_path / "one" / "eps.tar", n=5, shard_size=2)
    out = tmp_path / "cli" / "eps.tar"
    r = _cli(tiny_bank_dir, tmp_path, "n=5", "shard_size=2", f"out={out}", "jobs=3")
    assert r.returncode == 0, r.stderr[-3000:]
    got = {p.name: p.read_bytes() for p in (tmp_path / "cli").iterdir()}
    assert got == _bytes(one)
    for jobs in ("0", "10001", "x"):
        r = _cli(tiny_bank_dir, tmp_path, "n=5", f"out={tmp_path / 'bad.jsonl'}", f"jobs={jobs}")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "jobs" in lines[0], r.stderr


def _tree(folder) -> dict:
    """Every file under `folder` by relative name: .npz as their arrays, others as bytes."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            name = p.relative_to(folder).as_posix()
            if p.suffix == ".npz":
                with np.load(p) as z:
                    out[name] = {k: z[k].tolist() for k in z.files}
            else:
                out[name] = p.read_bytes()
    return out


def test_cli_render_jobs_give_the_files_of_one_job(tiny_bank, split, tmp_path):
    exported = tmp_path / "eps.tar"  # its two shards
    _export(tiny_bank, split, exported, n=3, shard_size=2)
    args = ["modality=image", "modality.width=24", "modality.height=16", "progress=false"]
    trees = []
    for jobs in (1, 2):
        out = tmp_path / f"render{jobs}"
        r = run_curi(
            "episodes",
            "render",
            f"in={exported}",
            *args,
            f"out={out}",
            f"jobs={jobs}",
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert not staging_folder(out).exists()
        trees.append(_tree(out))
    assert trees[0] == trees[1]
    index = json.loads(trees[1]["index.json"])
    assert [e["index"] for e in index["episodes"]] == [0, 1, 2]
    assert len(trees[1]["metadata.jsonl"].splitlines()) == 3 * 50


def test_the_reader_starts_at_an_episode_skipping_whole_shards(tiny_bank, split, tmp_path):
    out = tmp_path / "eps.tar"
    _export(tiny_bank, split, out, n=5, shard_size=2)
    every = list(read_episode_file(out))
    assert [ep["index"] for ep in read_episode_file(out, start=2, limit=4)] == [2, 3]
    assert list(read_episode_file(out, start=3)) == every[3:]
    first = tmp_path / "eps-00000.tar"  # damaged (same size): read, it would be refused
    first.write_bytes(bytes(first.stat().st_size))
    with pytest.raises(curi.export.EpisodeFileError, match="SHA-256"):
        list(read_episode_file(out, start=1))
    assert list(read_episode_file(out, start=2)) == every[2:]


def test_cli_a_failed_job_ends_in_one_error_line(tiny_bank_dir, tmp_path, capsys, monkeypatch):
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    _recording(monkeypatch, fail=1)
    out = tmp_path / "eps.jsonl.gz"
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "split=counting", "n=4"]
    with pytest.raises(SystemExit) as e:
        main(["episodes", *args, f"out={out}", "jobs=2", "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    assert err[-1].startswith(f"curi episodes: error: out={out}: job part-00001 (episodes 2..3)")
    assert "failed: RuntimeError: the renderer ran out of memory" in err[-1]
    assert not out.exists() and len(list(staging_folder(out).rglob("*.done"))) == 1


# --- the staging folder is the command's own; parts are checked before they are published -----
def _victim(tmp_path):
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "keep.txt").write_text("x")
    return victim


def test_a_symlinked_staging_folder_is_refused_and_its_target_kept(tiny_bank, split, tmp_path):
    victim, out = _victim(tmp_path), tmp_path / "O" / "eps.jsonl"
    out.parent.mkdir()
    staging_folder(out).symlink_to(victim)
    with pytest.raises(ConfigError, match="is a symlink") as e:
        _export(tiny_bank, split, out, n=6, jobs=3)
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt", "sub"]
    assert not out.exists()


def test_a_staging_path_that_is_a_file_is_one_line(tiny_bank_dir, tmp_path, capsys, monkeypatch):
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "eps.jsonl"
    staging_folder(out).write_text("x")
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "n=6", f"out={out}", "jobs=3"]
    with pytest.raises(SystemExit) as e:
        main(["episodes", *args, "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1
    assert err[0].startswith("curi episodes: error: the staging folder") and "is a file" in err[0]
    assert staging_folder(out).read_text() == "x" and not out.exists()


def _parts_left(tiny_bank, split, out, monkeypatch) -> list:
    """Parts 0 and 2 of a 5-episode export in 3 jobs left finished by a run whose job 1
    failed; returns the folder's part markers' paths, in order."""
    _recording(monkeypatch, fail=1)
    with pytest.raises(CuriError, match="part-00001"):
        _export(tiny_bank, split, out, jobs=3)
    return sorted(staging_folder(out).rglob("part-*.done"))


def _fix_size(done, size: int) -> None:
    """Set the size a marker records for its tar (either format), leaving the rest."""
    meta = json.loads(done.read_text())
    if "bytes" in meta:
        meta["bytes"] = size
    for record in meta.get("files", {}).values():
        record["bytes"] = size
    done.write_text(json.dumps(meta))


def _flip(part, done):
    data = bytearray(part.read_bytes())
    at = data.index(b'"support_labels": [') + len(b'"support_labels": [')
    data[at : at + 1] = b"0" if data[at : at + 1] == b"1" else b"1"  # a label 1 -> 0
    part.write_bytes(bytes(data))


def _swap(part, done):  # another part's tar in its place, its size recorded
    other = part.with_name("part-00002.tar").read_bytes()
    part.write_bytes(other)
    _fix_size(done, len(other))


def _truncate(part, done):
    part.write_bytes(part.read_bytes()[:700])
    _fix_size(done, 700)


def _junk(part, done):
    part.write_bytes(b"junk" * 300)
    _fix_size(done, 1200)


def _deep(part, done):
    done.write_text("[" * 200_000)


def _old_marker(part, done):  # a marker of the format before digests: range and size only
    done.write_text(json.dumps({"start": 0, "stop": 1, "bytes": part.stat().st_size}))


@pytest.mark.parametrize("tamper", [_flip, _swap, _truncate, _junk, _deep, _old_marker])
def test_a_changed_part_is_redone_not_published(tiny_bank, split, tmp_path, monkeypatch, tamper):
    one = _export(tiny_bank, split, tmp_path / "one" / "eps.tar")
    out = tmp_path / "jobs" / "eps.tar"
    first = _parts_left(tiny_bank, split, out, monkeypatch)[0]
    tamper(first.with_suffix(".tar"), first)
    calls = _recording(monkeypatch)
    again = _export(tiny_bank, split, out, jobs=3)
    assert calls == [0, 1]  # the changed part is redone with the failed one
    assert _bytes(again) == _bytes(one)


def test_a_forged_part_with_a_valid_marker_is_refused_in_one_line(
    tiny_bank, split, tmp_path, monkeypatch
):
    """Another part's episodes under a marker rewritten to match them: the digest agrees, so
    publishing reads the episodes' keys and stops at the first out of place."""
    from curi.export.parts import Part

    out = tmp_path / "eps.jsonl"
    first = _parts_left(tiny_bank, split, out, monkeypatch)[0]
    tar = first.with_suffix(".tar")
    tar.write_bytes(tar.with_name("part-00002.tar").read_bytes())
    Part(first.parent, 0, 0, 1).finish(episodes=2)
    _recording(monkeypatch)
    with pytest.raises(CuriError, match="part-00000 .*holds episode 00000003 where 0 belongs") as e:
        _export(tiny_bank, split, out, jobs=3)
    assert "\n" not in str(e.value) and not out.exists()
    calls = _recording(monkeypatch)
    again = _export(tiny_bank, split, out, jobs=3)  # as the message says: redone
    single = _export(tiny_bank, split, tmp_path / "single" / "eps.jsonl")
    assert calls == [0] and _bytes(again) == _bytes(single)


def test_a_fifo_marker_redoes_its_part_without_blocking(
    tiny_bank, tiny_bank_dir, split, tmp_path, monkeypatch
):
    """The command in a process of its own, stopped after 60 s: a FIFO in place of a part's
    marker is read without waiting for a writer, and its part redone."""
    import os

    one = _export(tiny_bank, split, tmp_path / "one" / "eps.tar")
    out = tmp_path / "cli" / "eps.tar"
    first = _parts_left(tiny_bank, split, out, monkeypatch)[0]
    first.unlink()
    os.mkfifo(first)
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "split=counting", "n=5"]
    r = run_curi(
        "episodes", *args, "shard_size=2", f"out={out}", "jobs=3", "progress=false",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == _bytes(one)
