"""The install a user does: a wheel built from the checkout, installed into a fresh environment
(the test environment's dependencies reused through its site-packages), run from a folder
outside the checkout. Checks that the configuration ships inside the wheel, that no generic
top-level package (``models``, ``oracles``, ``renderers``) is installed, and that the commands
and the README's Python example work there."""

from __future__ import annotations

import os
import site
import subprocess
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 600):
    out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{args} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _site_dirs() -> list[str]:
    """The site-packages folders of the interpreter running the tests, where the dependencies
    are installed: a virtual environment's (and its base's, if it sees them), a conda
    environment's or the system's, and the user's."""
    dirs = site.getsitepackages()
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def _reuse_dependencies(env_dir: Path) -> None:
    """Make the test interpreter's packages importable in the environment at `env_dir`, after
    its own: one plain folder per line of a ``.pth`` file. ``system_site_packages=True`` would
    expose the *base* interpreter's packages, which are not the dependencies when the tests run
    in a virtual environment. Plain lines add folders without running their ``.pth`` files,
    so the checkout's editable install of curi stays out and the wheel is what is imported."""
    python = env_dir / "bin" / "python"
    inner = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(inner, "_curi_test_dependencies.pth").write_text("\n".join(_site_dirs()) + "\n")


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The `bin` folder of a fresh virtual environment with the wheel installed."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    _reuse_dependencies(env_dir)
    bin_dir = env_dir / "bin"
    _run(
        [str(bin_dir / "pip"), "install", "--no-deps", "--no-index", "-q", str(wheel)], cwd=env_dir
    )
    return bin_dir


def test_wheel_ships_config_and_no_generic_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("curi-")}
    assert top == {"curi"}, top
    for needed in (
        "curi/conf/gap.yaml",
        "curi/conf/split/binding_color.yaml",
        "curi/conf/bank/tiny.yaml",
        "curi/conf/hydra/output/curi.yaml",
        "curi/models/train.py",
        "curi/oracles/gap.py",
        "curi/renderers/image.py",
        "curi/models/lm/export.py",
        "curi/conf/lm_export.yaml",
    ):
        assert needed in names, needed
    sources = {n for n in names if n.endswith(".py")}
    for folder, package in (
        ("curi", "curi"),
        ("models", "curi/models"),
        ("oracles", "curi/oracles"),
        ("renderers", "curi/renderers"),
    ):
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder).as_posix()
            assert f"{package}/{rel}" in sources, f"{folder}/{rel} is not in the wheel"


def test_installed_wheel_runs_outside_the_checkout(installed, tiny_bank_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CURI_DATA_DIR"] = str(tiny_bank_dir.parent)
    work = tmp_path / "project"
    (work / "models").mkdir(parents=True)  # a user's own `models` package must not shadow ours
    (work / "models" / "__init__.py").write_text("USER_MODELS = True\n")
    python, curi = str(installed / "python"), str(installed / "curi")

    where = _run([python, "-c", "import curi; print(curi.__file__)"], cwd=work, env=env)
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout

    out = _run([curi, "bank", "bank=tiny", "progress=false"], cwd=work, env=env)
    assert '"concepts"' in out.stdout
    out = _run(
        [curi, "split", "bank=tiny", "split=binding_color", "progress=false"], cwd=work, env=env
    )
    assert '"split": "binding_color"' in out.stdout
    gap_dir = tmp_path / "gap"
    _run(
        [
            curi,
            "gap",
            "bank=tiny",
            "splits=[binding_color]",
            "negatives=[hard]",
            "episodes.test=40",
            "workers=1",
            "progress=false",
            f"output_dir={gap_dir}",
        ],
        cwd=work,
        env=env,
    )
    assert (gap_dir / "gap.md").is_file()

    example = textwrap.dedent(
        f"""
        import models
        assert models.USER_MODELS  # the user's package, not curi's
        import curi
        from curi.oracles import compositionality_gap
        from curi.models import ProtoNet  # noqa: F401

        bank = curi.load_bank({str(tiny_bank_dir)!r})
        split = curi.make_split(bank, "binding_color")
        assert len(split.test) > 0
        assert "binding_color" in curi.list_splits()
        assert curi.BankConfig.preset("tiny").num_scenes == bank.num_scenes
        episode = curi.EpisodeSampler(bank, split, "test", negatives="hard", seed=0)[0]
        assert len(episode.support_records()) == 25
        rows = compositionality_gap(bank, [split], "hard", episodes=20, workers=1)
        print("ok", len(rows))
        """
    )
    out = _run([python, "-c", example], cwd=work, env=env)
    assert "ok 1" in out.stdout
