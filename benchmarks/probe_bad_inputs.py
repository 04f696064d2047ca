"""A sweep of bad inputs across every `curi` command, as a careless user or an attacker types
them (wrong types, numbers out of range, unknown keys and values, missing, garbage, FIFO,
symlink or folder inputs, output places that cannot be written, empty strings, huge numbers,
bad split and episode files, bad concept strings), each run as a fresh `curi` process in an
empty working folder and judged: the exit status expected (2: a refusal), stderr exactly one
non-empty line starting with ``curi`` (a Python warning line counts too), no traceback, and
nothing left in the working folder. The project's own list of bad inputs (issue 44: "a sweep
of bad inputs ends in one line every time"); `tests/test_probe_bad_inputs.py` runs a few of
them, this script all (minutes).

    python benchmarks/probe_bad_inputs.py [--jobs 2] [--timeout 120] [--only WORD]
                                          [--notes FILE]

It builds the tiny bank, a saved split and an exported episode file in a temporary folder
first; `benchmarks/bench_refusals.py`'s timed refusals are included as they are.
"""

from __future__ import annotations

import argparse
import gzip
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_refusals, when imported

import bench_refusals  # noqa: E402

__all__ = ["Probe", "Result", "inputs", "judge", "make_exports", "probes", "run_probe"]

TIMEOUT = 120  # seconds a probe may run (a loaded machine); a refusal takes a few


@dataclass(frozen=True)
class Probe:
    """One bad command line: what is wrong, the arguments after ``curi``, the exit statuses
    that are right (2: refused; another where the command documents one), extra env."""

    what: str
    args: tuple[str, ...]
    codes: tuple[int, ...] = (2,)
    env: dict = field(default_factory=dict)


@dataclass
class Result:
    code: int | None  # None: stopped after the timeout
    stderr: str
    seconds: float
    left: list[str]


def inputs(tmp: Path) -> dict[str, Path]:
    """The bad input files and folders of the probes, made under `tmp` (cheap: no curi run)."""
    p = {name: tmp / name for name in NAMES}
    p["file"].write_text("x")
    p["empty.jsonl"].write_text("")
    p["empty.json"].write_text("")
    p["garbage.jsonl"].write_text("this is not json\n")
    p["garbage.json"].write_text("{not json")
    p["list.json"].write_text("[1, 2, 3]\n")
    p["deep.json"].write_text("[" * 100_000 + "]" * 100_000)
    p["binary.jsonl"].write_bytes(bytes(range(256)) * 64)
    p["wrong_types.jsonl"].write_text('{"support": 5, "query": "x", "concept": 3}\n')
    p["half.jsonl.gz"].write_bytes(gzip.compress(b'{"a": 1}\n' * 1000)[:200])
    p["garbage.parquet"].write_bytes(b"PAR1" + b"\0" * 64)
    p["garbage.tar"].write_bytes(b"x" * 1024)
    p["text.pt"].write_text("not a checkpoint\n")
    p["empty.pt"].write_bytes(b"")
    with zipfile.ZipFile(p["junk_zip.pt"], "w") as z:
        z.writestr("archive/data.pkl", b"junk")
    p["int_pickle.pt"].write_bytes(pickle.dumps(12345))
    p["dict_pickle.pt"].write_bytes(pickle.dumps({"model": 1, "config": "abc", "step": -1}))
    p["folder"].mkdir(exist_ok=True)
    for name in ("fifo", "fifo.jsonl", "fifo.json", "fifo.pt"):
        if not p[name].exists():
            os.mkfifo(p[name])
    for name, target in (("dangling", "nowhere"), ("link_to_fifo.jsonl", "fifo.jsonl")):
        if not p[name].is_symlink():
            p[name].symlink_to(tmp / target)
    p["results"].mkdir(exist_ok=True)
    p["split_other_format.json"].write_text('{"format": "curi-split", "version": 99}')
    p["split_no_parts.json"].write_text('{"format": "curi-split", "version": 1, "name": "s"}')
    p["model_results.json"].write_text('{"concept_iid": "high"}')
    p["tokenizer.json"].write_text('{"model": 1}')
    p["tasks.jsonl"].write_text('{"id": 0, "requests": 5}\n')
    p["predictions.jsonl"].write_text('{"id": "zero", "answer": []}\n')
    p["rules_short.txt"].write_text("(foo\n")
    p["rules_word.txt"].write_text("x colour? blue = lambda S. exists=\n")
    p["rules_types.txt"].write_text("x color? 3 = lambda S. exists=\n")
    p["rules_none.txt"].write_text("# no rule here\n\n")
    p["rules_readable.txt"].write_text("exists x in S: color(x) = blue\n")
    return p


NAMES = (
    *"file empty.jsonl empty.json garbage.jsonl garbage.json list.json deep.json".split(),
    *"binary.jsonl wrong_types.jsonl half.jsonl.gz garbage.parquet garbage.tar".split(),
    *"text.pt empty.pt junk_zip.pt int_pickle.pt dict_pickle.pt folder fifo".split(),
    *"fifo.jsonl fifo.json fifo.pt dangling link_to_fifo.jsonl results".split(),
    *"split_other_format.json split_no_parts.json model_results.json tokenizer.json".split(),
    *"tasks.jsonl predictions.jsonl rules_short.txt rules_word.txt rules_types.txt".split(),
    *"rules_none.txt rules_readable.txt".split(),
)


def make_exports(tmp: Path, data: Path, timeout: int = 600) -> dict[str, Path]:
    """Good files the probes then spoil: a saved split and a small episode export of the
    tiny bank in `data`, and spoilt copies of them."""
    split, eps = tmp / "split.json", tmp / "eps.jsonl"
    for args in (["split", f"save={split}"], ["episodes", "n=2", f"out={eps}"]):
        cmd = [*_CURI, *args, f"data_dir={data}", "bank=tiny", "progress=false"]
        subprocess.run(cmd, cwd=tmp, check=True, capture_output=True, timeout=timeout)
    text = split.read_text()
    (tmp / "split_floats.json").write_text(text.replace('"train": [', '"train": [1.5, ', 1))
    (tmp / "split_outside.json").write_text(text.replace('"train": [', '"train": [99999, ', 1))
    (tmp / "split_other_bank.json").write_text(text.replace('"num_concepts": ', '"x": ', 1))
    line = eps.read_text().splitlines()[0]
    (tmp / "eps_cut.jsonl").write_text(line[: len(line) // 2] + "\n")
    return {"split.json": split, "eps.jsonl": eps, **{n: tmp / n for n in SPOILT}}


SPOILT = ("split_floats.json", "split_outside.json", "split_other_bank.json", "eps_cut.jsonl")


_CURI = [sys.executable, "-c", "from curi.cli import main; main()"]


def _command(name: str, defaults: dict[str, str], *args: str) -> tuple[str, ...]:
    """``name`` with `args` and each of `defaults` whose key `args` does not set (cheap
    settings, so a probe the command wrongly accepts ends soon, and its failure shows)."""
    keys = {a.split("=", 1)[0].lstrip("+~") for a in args}
    rest = [f"{k}={v}" for k, v in defaults.items() if k not in keys]
    return (*name.split(), *args, *rest)


def _family(name: str, defaults: dict[str, str], rows: list[tuple[str, ...]]) -> list[Probe]:
    """The probes of command `name`: each row is (what is wrong, its arguments...)."""
    return [Probe(f"{name}, {what}", _command(name, defaults, *args)) for what, *args in rows]


def probes(tmp: Path, data: Path) -> list[Probe]:
    """Every probe: the bad inputs are under `tmp` (`inputs`, `make_exports`), the tiny bank
    in `data`."""
    p = {n: tmp / n for n in (*NAMES, *SPOILT, "eps.jsonl")}
    out = [Probe(what, tuple(args)) for what, args in bench_refusals.cases(tmp)]
    for family in (_top, _gap, _train, _eval, _sweeps, _split_show, _episodes, _lm, _rules):
        out += family(tmp, data, p)
    return out


def _top(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    bank = {"bank": "tiny", "data_dir": str(tmp / "bank_data"), "progress": "false"}
    out = [
        Probe("an empty command", ("",)),
        Probe("an option for a command", ("--nosuch",)),
        Probe("a command's unknown flag", ("gap", "--nosuch")),
        Probe("lm, an unknown subcommand", ("lm", "nosuch")),
        Probe(
            "CURI_DATA_DIR a file", ("split", "bank=tiny"), env={"CURI_DATA_DIR": str(p["file"])}
        ),
    ]
    out += _family("check", {}, [("a bad boolean", "default_bank=maybe"), ("a key", "nosuch=1")])
    return out + _family("bank", bank, [
        ("scenes negative", "bank.num_scenes=-1"),
        ("scenes a word", "bank.num_scenes=many"),
        ("scenes an expression", "bank.num_scenes=10**12"),
        ("scenes huge", "bank.num_scenes=1000000000000"),
        ("an unknown preset", "bank=nosuch"),
        ("seed negative", "bank.seed=-1"),
        ("workers negative", "bank.workers=-3"),
        ("name escapes", "bank.name=../escape"),
        ("name empty", "bank.name="),
        ("name with a slash", "bank.name=a/b"),
        ("name too long", f"bank.name={'a' * 300}"),
        ("data_dir under /proc", "data_dir=/proc/x"),
        ("data_dir a FIFO", f"data_dir={p['fifo']}"),
        ("data_dir a dangling link", f"data_dir={p['dangling']}"),
        ("draws zero", "bank.num_draws=0"),
        ("an unknown key", "bank.nosuch=1"),
    ])  # fmt: skip


def _gap(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    d = {"data_dir": str(data), "bank": "tiny", "splits": "[concept_iid]", "negatives": "[hard]",
         "episodes.test": "8", "workers": "1", "progress": "false"}  # fmt: skip
    return _family("gap", d, [
        ("seed negative", "seed=-1"),
        ("seed a word", "seed=abc"),
        ("seed huge", "seed=99999999999999999999999"),
        ("seed a float", "seed=0.5"),
        ("episodes zero", "episodes.test=0"),
        ("episodes negative", "episodes.test=-5"),
        ("episodes huge", "episodes.test=1000000000000000"),
        ("an unknown negatives", "negatives=[medium]"),
        ("no negatives", "negatives=[]"),
        ("an unknown prior", "prior=nosuch"),
        ("an unknown likelihood", "likelihood=nosuch"),
        ("an unknown negative_sampler", "negative_sampler=nosuch"),
        ("workers negative", "workers=-1"),
        ("progress_every negative", "progress_every=-1"),
        ("progress_every a word", "progress_every=often"),
        ("no splits", "splits=[]"),
        ("a split rule unknown", "splits=[{name: x, rule: nosuch}]"),
        ("a split option out of range", "splits=[{name: x, rule: random_groups, fractions: [2]}]"),
        ("split file missing", f"split={tmp / 'missing.json'}"),
        ("split file garbage", f"split={p['garbage.json']}"),
        ("split file empty", f"split={p['empty.json']}"),
        ("split file a list", f"split={p['list.json']}"),
        ("split file nested deep", f"split={p['deep.json']}"),
        ("split file a FIFO", f"split={p['fifo.json']}"),
        ("split file of another version", f"split={p['split_other_format.json']}"),
        ("split file without parts", f"split={p['split_no_parts.json']}"),
        ("split file with floats", f"split={p['split_floats.json']}"),
        ("split file index outside", f"split={p['split_outside.json']}"),
        ("split file of another bank", f"split={p['split_other_bank.json']}"),
        ("output_dir empty", "output_dir="),
        ("output_dir a FIFO", f"output_dir={p['fifo']}"),
        ("output_dir a dangling link", f"output_dir={p['dangling']}"),
        ("data_dir a FIFO", f"data_dir={p['fifo']}"),
        ("an unknown bank", "bank=nosuch"),
        ("a bank key changed", "bank.num_scenes=7"),
        ("a new key with +", "+nosuch=1"),
        ("the bank group deleted", "~bank"),
        ("an option deleted", "~seed"),
        ("a flag abbreviated", "--multi"),
        ("an unknown launcher", "hydra/launcher=nosuch"),
        ("hydra's run dir under /proc", "hydra.run.dir=/proc/x"),
    ])  # fmt: skip


def _train(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    d = {"data_dir": str(data), "bank": "tiny", "train": "tiny", "device": "cpu",
         "progress": "false"}  # fmt: skip
    return _family("train", d, [
        ("steps zero", "train.steps=0"),
        ("steps a word", "train.steps=abc"),
        ("lr negative", "train.lr=-1"),
        ("lr nan", "train.lr=nan"),
        ("lr inf", "train.lr=inf"),
        ("warmup past the steps", "train.warmup_steps=100"),
        ("an unknown train preset", "train=nosuch"),
        ("an unknown modality", "modality=nosuch"),
        ("an unknown pooling", "pooling=nosuch"),
        ("an unknown learner", "learner=nosuch"),
        ("embed_dim zero", "embed_dim=0"),
        ("embed_dim huge", "embed_dim=10000000000"),
        ("an unknown device", "device=tpu"),
        ("cuda:N malformed", "device=cuda:x"),
        ("an unknown negatives", "negatives=medium"),
        ("the train group deleted", "~train"),
        ("resume missing", f"resume={tmp / 'missing.pt'}"),
        ("resume a text file", f"resume={p['text.pt']}"),
        ("resume a FIFO", f"resume={p['fifo.pt']}"),
        ("resume an empty folder", f"resume={p['folder']}"),
        ("an unknown split", "split=nosuch"),
        ("split file garbage", f"split={p['garbage.json']}"),
        ("seed a list", "seed=[1,2]"),
        ("batch size huge", "train.batch_size=100000000000"),
    ])  # fmt: skip


CHECKPOINTS = [
    ("a text file", "text.pt"),
    ("an empty file", "empty.pt"),
    ("a folder without checkpoints", "folder"),
    ("a FIFO", "fifo.pt"),
    ("a dangling link", "dangling"),
    ("a zip of junk", "junk_zip.pt"),
    ("a pickled integer", "int_pickle.pt"),
    ("a pickled dict", "dict_pickle.pt"),
]


def _eval(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    e = {"episodes": "8", "oracles": "false", "device": "cpu", "progress": "false",
         "data_dir": str(data)}  # fmt: skip
    d = {"data_dir": str(data), "bank": "tiny", "max_concepts": "4",
         "episodes_per_concept": "2", "progress": "false"}  # fmt: skip
    bad = [(f"checkpoint {what}", f"checkpoint={p[key]}") for what, key in CHECKPOINTS]
    out = _family("eval", e, [("no checkpoint",), ("checkpoint empty", "checkpoint="), *bad])
    return out + _family("difficulty", d, [
        *bad,
        ("threshold a word", "threshold=hard"),
        ("threshold above 1", "threshold=2"),
        ("an unknown predictor", "predictors=[nosuch]"),
        ("max_concepts zero", "max_concepts=0"),
        ("episodes per concept zero", "episodes_per_concept=0"),
        ("no splits", "splits=[]"),
        ("checkpoints a list", "checkpoints=[a,b]"),
    ])  # fmt: skip


def _sweeps(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    bank = {"data_dir": str(data), "bank": "tiny", "progress": "false"}
    b = {**bank, "train": "tiny", "episodes": "8", "only": "[schema-relation_net]",
         "splits": "[concept_iid]", "oracles": "false", "device": "cpu"}  # fmt: skip
    cv = {**bank, "seeds": "[0]", "episodes.test": "8", "paper_splits": "false", "workers": "1"}
    a = {**bank, "splits": "[concept_iid]", "negatives": "[hard]", "episodes.train": "8",
         "episodes.test": "8"}  # fmt: skip
    local = "hydra/launcher=submitit_local"
    missing = f"output_dir={tmp / 'missing'}"
    return [
        *_family("baselines", b, [
            ("an unknown configuration", "only=[nosuch]"),
            ("no seeds", "seeds=[]"),
            ("a negative seed", "seeds=[-1]"),
            ("no configurations", "configs=[]"),
            ("episodes zero", "episodes=0"),
            ("an unknown negatives", "negatives=both"),
            ("cpus_per_task negative", local, "hydra.launcher.cpus_per_task=-2"),
            ("an unknown launcher option", local, "hydra.launcher.nosuch=1"),
        ]),
        *_family("baselines collect", {}, [
            ("a missing folder", missing),
            ("no output_dir",),
            ("a FIFO", f"output_dir={p['fifo']}"),
        ]),
        *_family("curve", cv, [
            ("step above 1", "step=2"),
            ("step negative", "step=-0.1"),
            ("no seeds", "seeds=[]"),
            ("mcd.train above 1", "mcd.train=1.5"),
            ("an unknown compounds", "mcd.compounds=nosuch"),
            ("model_results missing", f"model_results={tmp / 'm.json'}"),
            ("model_results not numbers", f"model_results={p['model_results.json']}"),
            ("model_results garbage", f"model_results={p['garbage.json']}"),
            ("workers negative", "workers=-3"),
        ]),
        *_family("curve collect", {}, [
            ("a missing folder", missing),
            ("a file", f"output_dir={p['file']}"),
        ]),
        *_family("audit", a, [
            ("max_iter zero", "max_iter=0"),
            ("threads zero", "threads=0"),
            ("train episodes zero", "episodes.train=0"),
            ("an unknown negative_sampler", "negative_sampler=nosuch"),
            ("output_dir a file", f"output_dir={p['file']}"),
        ]),
    ]  # fmt: skip


def _split_show(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    d = {"data_dir": str(data), "bank": "tiny", "progress": "false"}
    out = _family("split", d, [
        ("an unknown split", "split=nosuch"),
        ("fractions above 1", "split.fractions=[0.5,0.5,0.5]"),
        ("fractions negative", "split.fractions=[1.2,-0.1,-0.1]"),
        ("fractions a word", "split.fractions=most"),
        ("an unknown rule", "split.rule=nosuch"),
        ("mcd train above 1", "split=mcd", "split.train=2"),
        ("an unknown split key", "split.nosuch=1"),
        ("save not .json", f"save={tmp / 'x.txt'}"),
        ("split file a folder", f"split={p['folder']}"),
    ])  # fmt: skip
    return out + _family("show", {**d, "out": "o"}, [
        ("scene past the end", "scene=99999999"),
        ("scene a word", "scene=abc"),
        ("scene huge", "scene=99999999999999999999999"),
        ("episode negative", "episode=-1"),
        ("episode a word", "episode=abc"),
        ("sheet_scale zero", "sheet_scale=0"),
        ("an unknown subset", "episode=0", "subset=nosuch"),
        ("out empty", "out="),
        ("out a FIFO", f"out={p['fifo']}"),
        ("threads zero", "threads=0"),
    ])  # fmt: skip


def _episodes(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    d = {"data_dir": str(data), "bank": "tiny", "n": "2", "out": "e.jsonl", "progress": "false"}
    r = {"in": str(p["eps.jsonl"]), "out": "r", "limit": "1", "progress": "false"}
    out = _family("episodes", d, [
        ("n negative", "n=-1"),
        ("n a word", "n=abc"),
        ("n huge", "n=100000000000000"),
        ("out an unknown suffix", "out=x.csv"),
        ("out empty", "out="),
        ("out a folder", f"out={p['folder']}"),
        ("an unknown media", "media=video", "out=e.parquet"),
        ("media in jsonl", "media=image"),
        ("shard_size zero", "shard_size=0", "out=e.tar"),
        ("an unknown subset", "subset=nosuch"),
        ("an unknown query_negatives", "query_negatives=nosuch"),
        ("jobs zero", "jobs=0"),
        ("threads negative", "threads=-1"),
    ])  # fmt: skip
    return out + _family("episodes render", r, [
        ("in garbage", f"in={p['garbage.jsonl']}"),
        ("in empty", f"in={p['empty.jsonl']}"),
        ("in binary", f"in={p['binary.jsonl']}"),
        ("in of wrong types", f"in={p['wrong_types.jsonl']}"),
        ("in cut short", f"in={p['eps_cut.jsonl']}"),
        ("in a folder", f"in={p['folder']}"),
        ("in a truncated gzip", f"in={p['half.jsonl.gz']}"),
        ("in garbage parquet", f"in={p['garbage.parquet']}"),
        ("in garbage tar", f"in={p['garbage.tar']}"),
        ("in a link to a FIFO", f"in={p['link_to_fifo.jsonl']}"),
        ("an unknown modality", "modality=nosuch"),
        ("limit negative", "limit=-1"),
        ("limit zero", "limit=0"),
        ("out under /proc", "out=/proc/x"),
        ("out empty", "out="),
    ])  # fmt: skip


def _lm(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    d = {"data_dir": str(data), "bank": "tiny", "n": "2", "out": "lm", "progress": "false"}
    c = {"data_dir": str(data), "bank": "tiny", "tasks": str(p["folder"]),
         "results": str(p["results"]), "out": "c.json", "progress": "false"}  # fmt: skip
    out = [
        Probe(
            "lm export, no out", _command("lm export", {k: v for k, v in d.items() if k != "out"})
        )
    ]
    out += _family("lm export", d, [
        ("n zero", "n=0"),
        ("an unknown wording", "wording=nosuch"),
        ("one answer word", "answers=[x]"),
        ("the same answer twice", "answers=[a,a]"),
        ("empty answers", "answers=['','']"),
        ("max_length zero", "max_length=0"),
        ("tokenizer garbage", f"tokenizer={p['tokenizer.json']}"),
        ("tokenizer a FIFO", f"tokenizer={p['fifo.json']}"),
        ("eval_scenes negative", "eval_scenes=-1"),
        ("episodes file garbage", f"episodes={p['garbage.jsonl']}"),
        ("no negatives", "negatives=[]"),
    ])  # fmt: skip
    out += _family(
        "lm compare", c, [("empty folders",), ("results a file", f"results={p['file']}")]
    )
    return out + _family("lm rules", d, [
        ("theta 0.5", "theta=0.5"),
        ("an unknown kind", "kinds=[nosuch]"),
        ("n zero", "n=0"),
        ("max_gen_toks zero", "max_gen_toks=0"),
        ("an unknown hypotheses", "hypotheses=nosuch"),
    ])  # fmt: skip


def _rules(tmp: Path, data: Path, p: dict[str, Path]) -> list[Probe]:
    d = {"data_dir": str(data), "bank": "tiny", "n": "2", "out": "r", "progress": "false"}
    s = {"tasks": str(p["tasks.jsonl"]), "predictions": str(p["predictions.jsonl"])}
    out = _family("rules", d, [
        ("rule_rate above 1", "rule_rate=1.5"),
        ("no kinds", "kinds=[]"),
        ("scene_requests negative", "scene_requests=-1"),
        ("candidates zero", "candidates=0"),
        ("context_rules negative", "context_rules=-1"),
        ("rules given as a list", "rules=['x color? blue = lambda S. exists=']"),
        ("a rule that does not parse", f"rules={p['rules_short.txt']}"),
        ("a rule of an unknown word", f"rules={p['rules_word.txt']}"),
        ("a rule ill-typed", f"rules={p['rules_types.txt']}"),
        ("a rules file of comments only", f"rules={p['rules_none.txt']}"),
        ("a rule in the readable form", f"rules={p['rules_readable.txt']}"),
        ("rules a FIFO", f"rules={p['fifo']}"),
        ("out a file", f"out={p['file']}"),
    ])  # fmt: skip
    return out + _family("score", s, [
        ("tasks of wrong types",),
        ("tasks garbage", f"tasks={p['garbage.jsonl']}"),
        ("tasks empty", f"tasks={p['empty.jsonl']}"),
        ("tasks a FIFO", f"tasks={p['fifo.jsonl']}"),
        ("tasks binary", f"tasks={p['binary.jsonl']}"),
        ("predictions a folder", f"predictions={p['folder']}"),
    ])  # fmt: skip


def run_probe(probe: Probe, cwd: Path, timeout: int = TIMEOUT, env: dict | None = None) -> Result:
    """Run `probe` as a user would (a fresh `curi` process in `cwd`, its own process group,
    stopped with its children after `timeout` seconds), with `env` (default: this process's)
    and the probe's own variables."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [*_CURI, *probe.args],
        cwd=cwd,
        env={**(os.environ if env is None else env), **probe.env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        err = proc.communicate(timeout=timeout)[1]
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        err, code = proc.communicate()[1], None
    left = sorted(x.name for x in cwd.iterdir())
    return Result(code, err, time.perf_counter() - t, left)


def judge(probe: Probe, r: Result) -> str:
    """Empty when `r` is a refusal in one line (`probe`'s exit status, stderr one non-empty
    line starting with ``curi``, no traceback, nothing left behind), else what is wrong."""
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    if r.code is None:
        return f"still running after {r.seconds:.0f} s"
    if "Traceback" in r.stderr:
        return f"a traceback ({len(lines)} lines): {lines[-1][:100]!r}"
    if r.code not in probe.codes:
        return f"exit {r.code}, {len(lines)} line(s): {(lines or [''])[0][:100]!r}"
    if len(lines) != 1:
        return f"{len(lines)} lines: {' / '.join(x[:60] for x in lines[:3])!r}"
    if not lines[0].startswith("curi"):
        return f"not a curi line: {lines[0][:100]!r}"
    if r.left:
        return f"left {r.left} in the working folder"
    return ""


def sweep(tmp: Path, data: Path, chosen: list[Probe], jobs: int, timeout: int) -> list[tuple]:
    """(probe, result, verdict) of every chosen probe, `jobs` at a time; an empty data
    folder is the default one (no probe reaches the user's own; it is not one a probe names:
    a bank is built on its own in the default one)."""
    env = {**os.environ, "CURI_DATA_DIR": str(tmp / "default_data")}

    def one(i: int) -> tuple:
        cwd = tmp / "work" / str(i)
        cwd.mkdir(parents=True)
        r = run_probe(chosen[i], cwd, timeout, env)
        verdict = judge(chosen[i], r)
        print(f"{i + 1}/{len(chosen)} {r.seconds:.0f} s {chosen[i].what}: {verdict or 'ok'}",
              file=sys.stderr, flush=True)  # fmt: skip
        return chosen[i], r, verdict

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, range(len(chosen))))


def table(rows: list[tuple], load: tuple[float, float], spent: float) -> str:
    """The markdown table of a sweep with its summary line."""
    ok = sum(1 for *_, v in rows if not v)
    one = sum(1 for *_, v in rows if not v or v.startswith("left "))  # judged last
    head = [
        f"{len(rows)} probes: {one} one line, {ok} of them leaving nothing behind; load "
        f"average {load[0]:.1f} before, {load[1]:.1f} after; {spent:.0f} s.",
        "",
        "| # | what | exit | s | verdict: the one line, or what is wrong |",
        "|---|---|---|---|---|",
    ]
    body = []
    for i, (probe, r, verdict) in enumerate(rows, 1):
        line = next((x for x in r.stderr.splitlines() if x.strip()), "")
        shown = (f"ok: {line[:110]}" if not verdict else f"**{verdict}**").replace("|", "\\|")
        body.append(f"| {i} | {probe.what} | {r.code} | {r.seconds:.1f} | {shown} |")
    return "\n".join(head + body)


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--jobs", type=int, default=2, help="probes at a time (2 at most on 2 cores)")
    a.add_argument("--timeout", type=int, default=TIMEOUT, help="seconds a probe may run")
    a.add_argument("--only", help="run only the probes whose description contains this")
    a.add_argument("--notes", type=Path, help="also write the table to this file")
    args = a.parse_args()
    with tempfile.TemporaryDirectory(prefix="curi-probes-") as name:
        tmp = Path(name)
        data = tmp / "data"
        subprocess.run(
            [*_CURI, "bank", "bank=tiny", f"data_dir={data}", "progress=false"],
            cwd=tmp,
            check=True,
            capture_output=True,
            timeout=600,
        )
        inputs(tmp)
        make_exports(tmp, data)
        chosen = [x for x in probes(tmp, data) if not args.only or args.only in x.what]
        before, t0 = os.getloadavg()[0], time.perf_counter()
        try:
            rows = sweep(tmp, data, chosen, args.jobs, args.timeout)
        finally:
            bench_refusals.lock(tmp / "locked", False)
        text = table(rows, (before, os.getloadavg()[0]), time.perf_counter() - t0)
    print(text)
    if args.notes:
        args.notes.write_text(text + "\n")
    sys.exit(0 if all(not v for *_, v in rows) else 1)


if __name__ == "__main__":
    main()
