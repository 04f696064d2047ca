"""CURI episodes as an lm-evaluation-harness task folder (`curi.models.lm.export`): the prompt
reads back into the episode's scenes in both wordings, an episode's support text is stored
once, the manifest refuses another curi version or bank, prompt lengths are reported and a
prompt longer than a context refused; and the README's `curi lm export` command runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_curi

from curi.errors import BankError, ConfigError, TextFormatError
from curi.executor import BitScenes, execute
from curi.models.lm import task as lm_task
from curi.models.lm.export import export_tasks, task_name
from curi.models.lm.lengths import check_context, load_tokenizer, prompt_lengths
from curi.models.lm.prompt import check_answers, parse_prompt, scene_texts
from curi.scenes import records_to_props
from curi.splits import make_split

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folder(tiny_bank, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_tasks")
    split = make_split(tiny_bank, "counting")
    export_tasks(tiny_bank, [split], out, negatives=("hard", "easy"), n=3, progress=False)
    return out


def _records(bank, ids):
    return [{"objects": r["objects"]} for r in bank.scene_records(ids)]


def _strip(records):
    keys = ("size", "color", "material", "shape", "x", "y")
    return [[{k: o[k] for k in keys} for o in r["objects"]] for r in records]


@pytest.mark.parametrize("wording,answers", [("full", ("0", "1")), ("compact", ("no", "yes"))])
def test_prompt_reads_back_into_the_episodes_scenes(tiny_bank, tmp_path, wording, answers):
    split = make_split(tiny_bank, "concept_iid")
    export_tasks(
        tiny_bank, [split], tmp_path, n=2, wording=wording, answers=answers, progress=False
    )
    name = task_name("concept_iid", "hard")
    episodes = lm_task.read_table(tmp_path / f"{name}.episodes.jsonl.gz")
    docs = lm_task.read_table(tmp_path / f"{name}.docs.jsonl.gz")
    assert len(docs) == 2 * 25 and len(episodes) == 2
    for d in docs[::7]:
        e = episodes[d["episode"]]
        text = lm_task.doc_to_text(tmp_path, d)
        support, labels, query = parse_prompt(text, wording=wording, answers=answers)
        assert _strip(support) == _strip(_records(tiny_bank, e["support_ids"]))
        assert labels.tolist() == e["support_labels"]
        assert _strip([query]) == _strip(_records(tiny_bank, [e["query_ids"][d["position"]]]))
    # the support text is stored once per episode, not once per document
    assert all("example:" not in json.dumps(d) for d in docs)


def test_compact_wording_is_shorter_and_a_bad_prompt_names_its_line(tiny_bank):
    ids = np.arange(40)
    full, compact = scene_texts(tiny_bank, ids, "full"), scene_texts(tiny_bank, ids, "compact")
    assert sum(map(len, compact)) * 3 < sum(map(len, full))
    with pytest.raises(TextFormatError, match="line 2"):
        parse_prompt("context:\nexample: small red => 1\nrequest: scene: " + full[0])
    with pytest.raises(TextFormatError, match="line 2: 'zzz' is not a compact object"):
        parse_prompt("context:\nexample: zzz => 1\nrequest: scene: x", wording="compact")
    with pytest.raises(ConfigError, match="answers must be two distinct words"):
        check_answers(["a"])


def test_a_found_scene_has_the_truth_row_of_its_parsed_record(tiny_bank):
    """The oracle finds a prompt's scenes in the bank by their contents: executing every
    concept on the parsed records gives the bank's truth rows of the scenes found."""
    from curi.models.lm.oracle_lm import SceneIndex

    pytest.importorskip("lm_eval")
    ids = np.array([0, 17, 4242, 19_999])
    text = "context:\n" + "".join(f"example: {s} => 1\n" for s in scene_texts(tiny_bank, ids))
    support, _, _ = parse_prompt(text + "request: scene: " + scene_texts(tiny_bank, [5])[0])
    found = SceneIndex(tiny_bank).find(support)
    n, props = records_to_props(support)
    rows = execute(list(tiny_bank.concepts), BitScenes.from_arrays(n, props))  # (H, 1)
    bits = (rows[:, 0][:, None] >> np.arange(len(ids), dtype=np.uint64)) & np.uint64(1)
    truth = np.stack([tiny_bank.truth(int(i)) for i in range(len(tiny_bank))])[:, found]
    assert np.array_equal(bits.astype(bool), truth.astype(bool))


def test_manifest_refuses_another_curi_version_or_bank(folder, tiny_bank, tmp_path):
    manifest = lm_task.read_manifest(folder)
    assert set(manifest["tasks"]) == {"curi_counting_hard", "curi_counting_easy"}
    lm_task.check_manifest(manifest, folder, tiny_bank)
    with pytest.raises(ConfigError, match=r"written by curi 0\.0\.1, this is curi"):
        lm_task.check_manifest({**manifest, "curi_version": "0.0.1"}, folder)
    other = {**manifest, "bank": {**manifest["bank"], "digest": "0" * 16}}
    with pytest.raises(BankError, match="was exported from bank 'tiny'"):
        lm_task.check_manifest(other, folder, tiny_bank)
    with pytest.raises(ConfigError, match="is not a curi task folder"):
        lm_task.read_manifest(tmp_path)


def test_prompt_lengths_and_a_context_too_short(folder):
    def words(texts):  # a stand-in tokenizer: one token per word
        return [len(t.split()) for t in texts]

    lengths = prompt_lengths(folder, words)
    info = lengths["curi_counting_hard"]
    assert 0 < info["tokens"]["median"] <= info["tokens"]["max"] < info["chars"]["max"]
    longest = max(v["tokens"]["max"] for v in lengths.values())
    assert check_context(folder, words, longest) == lengths
    with pytest.raises(ConfigError, match=r"prompts of up to \d+ tokens do not fit .* of 50"):
        check_context(folder, words, 50)


def test_readme_export_command_runs(tiny_bank_dir, tmp_path, monkeypatch, capsys):
    """The README's `curi lm export` line, on the tiny bank, through the `curi` entry point in
    this process (its `lm_eval` line needs a downloaded model: tests/test_lm_models.py runs
    lm-eval's hf model on a tiny one built offline)."""
    from curi.cli import main

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Language models", 1)[1].split("\n## ", 1)[0]
    line = next(x for x in section.splitlines() if x.startswith("curi lm export "))
    args = line.split()[1:] + ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "n=2"]
    args = [a for a in args if not a.startswith("out=")] + [f"out={tmp_path / 'tasks'}"]
    monkeypatch.chdir(tmp_path)
    main([*args, "progress=false"])
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{") :])["tasks"] == str(tmp_path / "tasks")
    manifest = json.loads((tmp_path / "tasks" / "curi_tasks.json").read_text())
    assert all(re.fullmatch(r"curi_\w+_(hard|easy)", t) for t in manifest["tasks"])
    assert all(v["documents"] == 50 for v in manifest["tasks"].values())


@pytest.mark.parametrize("command", ["export", "rules"])
def test_a_split_name_too_long_for_a_file_name_is_one_line(
    command, tiny_bank_dir, tmp_path, monkeypatch, capsys
):
    """A 300-character split name ended in `OSError: File name too long` (the task files are
    named for the split)."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    split = "split={name: " + "a" * 300 + ", rule: random_groups}"
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "n=2", split, "out=tasks"]
    with pytest.raises(SystemExit) as e:
        main(["lm", command, *args, "progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"curi lm {command}: error: split name 'aaaa")
    assert "has 300 bytes; use at most 200" in err[0]
    assert not (tmp_path / "tasks").exists()


@pytest.mark.parametrize("wording", ["full", "compact"])
def test_an_exported_episode_file_gives_the_same_task(tiny_bank, tmp_path, wording):
    """From `curi episodes ... out=FILE`: the text written from the file's scene records is
    the text written from the bank, for the same episodes."""
    from curi.export import export_episodes

    split = make_split(tiny_bank, "concept_iid")
    eps = tmp_path / "eps.jsonl"
    export_episodes(tiny_bank, split, "test", eps, n=2, negatives="easy", progress=False)
    export_tasks(tiny_bank, [], tmp_path / "a", episode_file=eps, wording=wording, progress=False)
    export_tasks(
        tiny_bank, [split], tmp_path / "b", negatives=["easy"], n=2, wording=wording,
        progress=False,
    )  # fmt: skip
    name = task_name("concept_iid", "easy")
    for table in ("episodes", "docs"):
        a = lm_task.read_table(tmp_path / "a" / f"{name}.{table}.jsonl.gz")
        b = lm_task.read_table(tmp_path / "b" / f"{name}.{table}.jsonl.gz")
        assert a == b
    manifest = lm_task.read_manifest(tmp_path / "a")
    assert manifest["tasks"][name]["split_file"] == "curi_concept_iid_split.json"


def test_curi_lm_alone_lists_its_subcommands(capsys):
    from curi.models.lm.cli import lm

    lm(None)
    out = capsys.readouterr().out
    assert "lm export " in out and "lm compare " in out and "--help" in out


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_an_export_replaces_the_earlier_export_in_its_folder_as_a_whole(tiny_bank, tmp_path):
    """A second export to a folder leaves no task of the first (its YAML would still be tagged
    ``curi_tasks``), keeps a user's file, even one the old manifest names, and leaves no
    staging, list or lock behind."""
    out = tmp_path / "T"
    splits = [make_split(tiny_bank, s) for s in ("concept_iid", "counting")]
    export_tasks(tiny_bank, splits, out, n=1, progress=False)
    (out / "notes.txt").write_text("mine")
    manifest = json.loads((out / lm_task.MANIFEST).read_text())
    manifest["tasks"]["curi_x"] = {"split_file": "notes.txt"}
    (out / lm_task.MANIFEST).write_text(json.dumps(manifest))
    export_tasks(tiny_bank, [make_split(tiny_bank, "boolean")], out, n=1, progress=False)
    assert _names(out) == [
        "curi.yaml",
        "curi_boolean_hard.docs.jsonl.gz",
        "curi_boolean_hard.episodes.jsonl.gz",
        "curi_boolean_hard.yaml",
        "curi_boolean_split.json",
        "curi_tasks.json",
        "notes.txt",
        "utils.py",
    ]
    assert set(lm_task.read_manifest(out)["tasks"]) == {"curi_boolean_hard"}


def test_an_export_is_locked_and_refuses_a_file_in_one_line(tiny_bank, tmp_path):
    from curi.atomic import exclusive

    split, out = make_split(tiny_bank, "counting"), tmp_path / "T"
    with exclusive(out / lm_task.MANIFEST, what="another export", error=ConfigError):
        with pytest.raises(ConfigError, match="being written by another process") as e:
            export_tasks(tiny_bank, [split], out, n=1, progress=False)
    assert "\n" not in str(e.value) and not (out / lm_task.MANIFEST).exists()
    (tmp_path / "F").write_text("x")
    with pytest.raises(ConfigError, match=r"out=.*F is a file, not a folder"):
        export_tasks(tiny_bank, [split], tmp_path / "F", n=1, progress=False)


def test_a_fifo_manifest_is_one_line_not_a_hang(tiny_bank, tiny_bank_dir, tmp_path):
    """`curi lm compare` and lm-eval's loading of the task (its ``utils.load_documents``, as
    ``--include_path`` does), each in a process of its own stopped after 60 s: a FIFO in
    place of ``curi_tasks.json`` is refused, never read (it would block)."""
    out = tmp_path / "T"
    export_tasks(tiny_bank, [make_split(tiny_bank, "counting")], out, n=1, progress=False)
    (out / lm_task.MANIFEST).unlink()
    os.mkfifo(out / lm_task.MANIFEST)
    bank = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}"]
    r = run_curi("lm", "compare", *bank, f"tasks={out}", "results=R", cwd=tmp_path, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert "curi_tasks.json' is a FIFO, not a regular file" in lines[0]
    load = "import sys, utils; utils.load_documents(sys.argv[1])"
    cmd = [sys.executable, "-c", load, "curi_counting_hard"]
    r = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "curi_tasks.json' is a FIFO" in r.stderr.splitlines()[-1]


@pytest.mark.parametrize("path", ["/none/tokenizer", "./tok", "tok/tokenizer.json", "a/b/c"])
def test_a_missing_tokenizer_path_says_it_does_not_exist(path):
    """transformers answered "Repo id must be in the form 'repo_name' or ..."."""
    with pytest.raises(ConfigError, match=f"^tokenizer={re.escape(path)} does not exist"):
        load_tokenizer(path)


def test_a_bad_wording_names_the_closest(tiny_bank, tmp_path):
    from curi.errors import OptionError

    with pytest.raises(OptionError, match="wording must be one of full, compact.*compact"):
        export_tasks(tiny_bank, [], tmp_path, wording="compct", progress=False)
    assert not (tmp_path / "curi_tasks.json").exists()


def test_a_tokenizer_file_that_is_not_one_is_refused_before_the_export(tmp_path):
    """`curi lm export tokenizer=<a garbage tokenizer.json>` (or a FIFO) wrote the whole export
    and then ended in a traceback from the Rust binding's bare Exception (issue 44's sweep of
    bad inputs): `check_tokenizer`, run before the export, loads a file tokenizer (a FIFO is
    refused unread)."""
    from curi.models.lm.lengths import check_tokenizer

    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": 1}')
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, says in ((bad, "cannot open the tokenizer "), (fifo, "is a FIFO, not a regular")):
        with pytest.raises(ConfigError, match=says):
            check_tokenizer(str(path))
        with pytest.raises(ConfigError, match=says):
            load_tokenizer(str(path))
