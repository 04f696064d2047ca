"""Names that become paths never reach outside their folder (`curi.paths`): bank names, a
checkpoint's stored bank name, ``curi eval out=``, split preset names. Each trick must end in
one clear `ConfigError` / `SplitError` and create or delete nothing outside the folder; a
sentinel folder beside the data directory must survive ``force=true``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_curi

from curi import build_bank, load_bank, make_split
from curi.errors import ConfigError, SplitError
from curi.paths import Foreign, as_folder, foreign, inside, output_path, read_text, safe_name
from curi.presets import conf_dir

SMALL = {"num_scenes": 1000, "num_draws": 1000, "seed": 0, "workers": 1}  # builds in < 1 s


def _tree(root: Path) -> set[str]:
    """Every path under `root` (relative), to show nothing was created or deleted."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def world(tmp_path):
    """``tmp/data`` (the data folder, holding another bank's files) beside ``tmp/victim``
    (a sentinel folder that no bank name may touch)."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("precious")
    (tmp_path / "data" / "other").mkdir(parents=True)
    (tmp_path / "data" / "other" / "keep.txt").write_text("another bank")
    return tmp_path


# --- the helper --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny", "default", "my-bank_2.v1", "B0"])
def test_safe_name_accepts_plain_names(name):
    assert safe_name(name, "bank name") == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "./../victim",
        "../victim",
        "/abs/victim",
        "a/b",
        "a\\b",
        ".hidden",
        ".x.tmp-123",
        "sp ace",
        "tab\t",
        None,
        3,
    ],
)
def test_safe_name_refuses_anything_but_one_plain_component(name):
    with pytest.raises(ConfigError, match="bank name .* is not a plain name"):
        safe_name(name, "bank name")


@pytest.mark.parametrize("name", ["metrics.json", "sub/metrics.json", "a/../m.json", "./m.json"])
def test_inside_keeps_names_under_the_root(tmp_path, name):
    root = tmp_path / "not-yet-created"
    assert inside(root, name, what="out") == root / name
    assert not root.exists()  # checking creates nothing


@pytest.mark.parametrize("name", ["../x.json", "../../x.json", "a/../../x.json", "/etc/passwd"])
def test_inside_refuses_names_leading_out(tmp_path, name):
    with pytest.raises(ConfigError, match=r"eval out .* outside"):
        inside(tmp_path / "root", name, what="eval out")


def test_inside_refuses_the_root_itself_unless_allowed(tmp_path):
    for name in (".", "a/..", ""):
        with pytest.raises(ConfigError, match="names the folder"):
            inside(tmp_path, name, what="bank name")
    assert inside(tmp_path, ".", what="out", child=False) == tmp_path / "."


def test_inside_follows_symlinks(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(ConfigError, match="outside"):
        inside(tmp_path / "root", "link", what="bank name")
    with pytest.raises(ConfigError, match="outside"):
        inside(tmp_path / "root", "link/m.json", what="eval out")
    # a symlinked root is fine: both sides are resolved
    (tmp_path / "alias").symlink_to(tmp_path / "root", target_is_directory=True)
    assert inside(tmp_path / "alias", "m.json", what="out") == tmp_path / "alias" / "m.json"


def test_inside_turns_a_symlink_loop_into_a_clean_error(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ConfigError, match="cannot resolve"):
        inside(tmp_path, "loop/m.json", what="eval out")


def test_foreign_names_what_stands_where_a_command_keeps_its_own(tmp_path):
    """One check, by `lstat`, of a command's own folder or file (the run record, the gap
    table's files, an export's staging and parts folders): a symlink is never its own."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    for name in ("folder", "file"):
        (tmp_path / f"link_{name}").symlink_to(tmp_path / name)
    want = {
        ("missing", True): None,
        ("folder", True): None,
        ("file", True): Foreign("a file"),
        ("fifo", True): Foreign("a FIFO"),
        ("link_folder", True): Foreign("a symlink", str(tmp_path / "folder")),
        ("missing", False): None,
        ("file", False): None,
        ("folder", False): Foreign("a folder"),
        ("fifo", False): Foreign("a FIFO"),
        ("link_file", False): Foreign("a symlink", str(tmp_path / "file")),
    }
    for (name, folder), found in want.items():
        assert foreign(tmp_path / name, folder=folder, cannot="x") == found, (name, folder)
    with pytest.raises(ConfigError, match="^cannot use it: File name too long$"):
        foreign(tmp_path / ("n" * 5000), folder=True, cannot="cannot use it")


def test_output_path_accepts_what_a_command_can_write(tmp_path):
    (tmp_path / "f").touch()
    assert output_path(tmp_path, folder=True) == tmp_path
    assert output_path(tmp_path / "f", folder=False) == tmp_path / "f"
    assert output_path(tmp_path / "new" / "x.json", folder=False) == tmp_path / "new" / "x.json"
    assert output_path("rel/dir", folder=True) == Path("rel/dir")


@pytest.mark.parametrize(
    ("out", "folder", "message"),
    [
        ("f", True, "out={out} is a file, not a folder; give a folder to write"),
        (".", False, "out={out} is a folder; give a file to write"),
        ("f/sub", True, "out={out}: {root}/f is not a folder; give a path in a folder"),
        ("x" * 300, True, "is 300 bytes long; use at most 239 (the file system allows 255)"),
        ("d/" + "é" * 120, False, "is 240 bytes long; use at most 239"),
    ],
    ids=["a-file-for-a-folder", "a-folder-for-a-file", "under-a-file", "too-long", "utf-8"],
)
def test_output_path_refuses_what_would_fail_after_the_work(tmp_path, out, folder, message):
    (tmp_path / "f").touch()
    out = tmp_path / out
    with pytest.raises(ConfigError) as e:
        output_path(out, folder=folder)
    assert message.format(out=out, root=tmp_path) in str(e.value)
    with pytest.raises(ConfigError, match="names no file"):
        output_path("", folder=False)


def test_a_folder_under_a_fifo_names_the_fifo(tmp_path):
    """It said "not a regular file" of whatever was not a folder nor a file."""
    os.mkfifo(tmp_path / "p")
    with pytest.raises(ConfigError) as e:
        as_folder(tmp_path / "p" / "x", "data_dir")
    assert str(e.value) == (
        f"data_dir '{tmp_path}/p/x' is a FIFO (under {tmp_path}/p), not a folder; give a folder"
    )


# --- bank names --------------------------------------------------------------------------------
@pytest.mark.parametrize("force", [True, False])
@pytest.mark.parametrize("name", ["./../victim", "../victim", "ABS", ".", "a/../../victim"])
def test_bank_name_cannot_touch_anything_outside_data_dir(world, name, force):
    name = str(world / "victim") if name == "ABS" else name
    before = _tree(world)
    with pytest.raises(ConfigError, match="bank name"):
        build_bank({**SMALL, "name": name}, world / "data", progress=False, force=force)
    assert _tree(world) == before  # the sentinel and the other bank survive; nothing new
    assert (world / "victim" / "keep.txt").read_text() == "precious"


def test_bank_name_symlink_leading_out_of_data_dir_is_refused(world):
    (world / "data" / "link").symlink_to(world / "victim", target_is_directory=True)
    before = _tree(world)
    with pytest.raises(ConfigError, match="bank name 'link' resolves to .*outside"):
        build_bank({**SMALL, "name": "link"}, world / "data", progress=False, force=True)
    assert _tree(world) == before
    assert (world / "data" / "link").is_symlink()


def test_plain_bank_names_still_build_under_data_dir(world):
    path = build_bank({**SMALL, "name": "small-1.0"}, world / "data", progress=False)
    assert path == world / "data" / "small-1.0" and (path / "manifest.json").is_file()


def test_curi_bank_with_escaping_name_and_force_is_one_line_error(world):
    out = run_curi(
        "bank",
        "bank=tiny",
        "bank.name=./../victim",
        "force=true",
        f"data_dir={world / 'data'}",
        "bank.num_scenes=1000",
        "bank.num_draws=1000",
        "progress=false",
        cwd=world,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("curi bank: error: bank name './../victim'")
    assert (world / "victim" / "keep.txt").read_text() == "precious"
    assert sorted(os.listdir(world / "victim")) == ["keep.txt"]


# --- checkpoints and curi eval -----------------------------------------------------------------
def _checkpoint(path: Path, bank: dict, *, data_dir=None, model=None, bank_path=None) -> Path:
    """A checkpoint as `curi train` writes it, its stored config chosen by the test."""
    import torch

    from curi.models.checkpoint import CHECKPOINT_FORMAT
    from curi.models.config import RunConfig

    run = RunConfig(
        bank=bank,
        modality={"name": "schema"},
        pooling={"name": "avg"},
        embed_dim=16,
        data_dir=data_dir,
    )
    payload = {
        "format": CHECKPOINT_FORMAT,
        "step": 0,
        "config": run.to_dict(),
        "bank_path": bank_path,
        "model": model or {},
    }
    torch.save(payload, path)
    return path


@pytest.mark.parametrize("via", ["data_dir", "stored_data_dir"])
def test_checkpoint_stored_bank_name_cannot_build_outside_data_dir(world, via):
    from curi.models.evaluate import evaluate_checkpoint

    data = world / "data"
    stored = str(data) if via == "stored_data_dir" else None
    ckpt = _checkpoint(world / "crafted.pt", {**SMALL, "name": "./../x"}, data_dir=stored)
    before = _tree(world)
    with pytest.raises(
        ConfigError, match=r"checkpoint .*crafted\.pt stores a bad bank: bank name '\./\.\./x'"
    ):
        evaluate_checkpoint(ckpt, data_dir=None if stored else data, episodes=2, oracles=False)
    assert _tree(world) == before and not (world / "x").exists()


def test_checkpoint_bank_path_is_only_used_when_it_is_that_bank(world):
    """A stored ``bank_path`` naming another bank's folder must not make eval build the
    stored bank beside it (outside the data folder): only ``<folder>/<bank name>`` is used."""
    from curi.models.config import RunConfig, run_bank

    other = world / "elsewhere" / "some-bank"
    other.mkdir(parents=True)
    (other / "manifest.json").write_text("{}")
    run = RunConfig(bank={**SMALL, "name": "small"}, data_dir=str(world / "data"))
    bank = run_bank(run, bank_path=str(other), build=True)
    assert bank.path == world / "data" / "small"
    assert sorted(os.listdir(world / "elsewhere")) == ["some-bank"]


def _eval_cfg(ckpt: Path, output_dir: Path, out: str):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        return compose(
            config_name="eval",
            overrides=[
                f"checkpoint={ckpt}",
                f"output_dir={output_dir}",
                f"out={out}",
                "episodes=2",
                "oracles=false",
                "num_workers=0",
                "progress=false",
                "device=cpu",
                f"data_dir={ckpt.parent / 'data'}",
            ],
        )


@pytest.fixture
def real_checkpoint(tiny_bank_dir, tmp_path):
    """An untrained model's checkpoint on the session's tiny bank (loads and evaluates)."""
    import torch

    from curi.models.config import RunConfig, build_model
    from curi.renderers import get_renderer

    bank = {**load_bank(tiny_bank_dir).config, "workers": 1}
    run = RunConfig(bank=bank, modality={"name": "schema"}, pooling={"name": "avg"}, embed_dim=16)
    with torch.random.fork_rng(devices=[]):
        model = build_model(run, get_renderer(name="schema")).state_dict()
    (tmp_path / "data").symlink_to(tiny_bank_dir.parent, target_is_directory=True)
    return _checkpoint(tmp_path / "model.pt", bank, model=model)


def test_eval_out_leading_out_of_output_dir_is_refused_before_evaluating(real_checkpoint):
    from curi.models.cli import evaluate

    root = real_checkpoint.parent
    ev = root / "a" / "b" / "eval"
    with pytest.raises(ConfigError, match=r"eval out '\.\./\.\./escape\.json' .*outside"):
        evaluate(_eval_cfg(real_checkpoint, ev, "../../escape.json"))
    assert not (root / "a" / "escape.json").exists() and not (root / "a").exists()
    with pytest.raises(ConfigError, match="outside"):
        evaluate(_eval_cfg(real_checkpoint, ev, str(root / "abs.json")))
    assert not (root / "abs.json").exists()


def test_eval_out_under_output_dir_still_written(real_checkpoint, capsys):
    from curi.models.cli import evaluate

    ev = real_checkpoint.parent / "eval"
    evaluate(_eval_cfg(real_checkpoint, ev, "sub/m.json"))
    assert (ev / "sub" / "m.json").is_file()


# --- split presets -----------------------------------------------------------------------------
def test_split_name_is_never_read_as_a_path(tiny_bank, tmp_path):
    """A YAML file outside the presets, reached by ``..`` or an absolute name, is not read
    (it holds a valid split rule, so reading it would succeed)."""
    (tmp_path / "evil.yaml").write_text((conf_dir() / "split" / "concept_iid.yaml").read_text())
    rel = os.path.relpath(tmp_path / "evil", conf_dir() / "split")
    assert rel.startswith("..") and (conf_dir() / "split" / f"{rel}.yaml").resolve().is_file()
    for name in (rel, str(tmp_path / "evil")):
        with pytest.raises(SplitError, match="unknown split"):
            make_split(tiny_bank, name)
    with pytest.raises(SplitError, match="unknown split"):
        make_split(tiny_bank, "../../../x/evil")


_READ_FIFO = """
import sys
from curi.errors import ConfigError
from curi.paths import open_regular, read_text
for read in (open_regular, read_text):
    try:
        read(sys.argv[1], "split file")
    except ConfigError as e:
        print(e)
"""


def test_reading_a_fifo_never_blocks(tmp_path):
    """The readers open without waiting for a writer and check what they opened (a process of
    its own, stopped after 60 s); a missing file is None when that is allowed."""
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    r = subprocess.run(
        [sys.executable, "-c", _READ_FIFO, str(fifo)], capture_output=True, text=True, timeout=60
    )
    assert r.stdout.splitlines() == [f"split file {str(fifo)!r} is a FIFO, not a regular file"] * 2
    assert read_text(tmp_path / "missing.json", "split file", missing_ok=True) is None
    with pytest.raises(ConfigError, match="does not exist"):
        read_text(tmp_path / "missing.json", "split file")


def test_a_dangling_link_in_place_of_a_folder_is_one_line(tmp_path):
    """A symbolic link to nothing passed `as_folder` and `output_path` (every check that
    follows the link finds nothing there), and making the folder then failed on the link's
    name in a traceback: `curi bank data_dir=LINK`, `curi gap output_dir=LINK` (issue 44)."""
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    checks = [
        lambda: as_folder(str(link), "data_dir"),
        lambda: output_path(link, folder=True, key="output_dir"),
    ]
    for check in checks:
        with pytest.raises(ConfigError, match=r"=.*link is a symbolic link to .*nowhere'"):
            check()
    assert output_path(link, folder=False, key="out") == link  # a file's rename replaces it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link"]
