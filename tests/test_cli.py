"""End-to-end tests of the `curi` command (subprocesses, as a user runs it)."""

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from conftest import run_curi

ROOT = Path(__file__).resolve().parent.parent


def test_help_lists_commands(tmp_path):
    out = run_curi("--help", cwd=tmp_path)
    assert out.returncode == 0
    assert "bank" in out.stdout
    # each command's line is the first sentence of its config's help header
    assert "  difficulty       predict which test concepts are hard" in out.stdout
    assert "  episodes render  re-render exported episodes" in out.stdout


def test_help_and_an_unknown_command_import_no_layer(tmp_path):
    """Nor numpy: the package's public names load on first use, so `curi --help` is quick."""
    code = (
        "import sys\nfrom curi.cli import main\nmain(['--help'])\n"
        "try:\n    main(['bogus'])\nexcept SystemExit:\n    pass\n"
        "heavy = ('torch', 'hydra', 'omegaconf', 'numpy')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy"
        " or m.startswith(('curi.models', 'curi.oracles', 'curi.renderers'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_version(tmp_path):
    for flag in ("--version", "-V"):
        out = run_curi(flag, cwd=tmp_path)
        assert out.returncode == 0 and out.stdout == f"curi {version('curi')}\n"


def test_bank_builds_tiny_and_reports(tmp_path):
    out = run_curi(
        "bank",
        "bank=tiny",
        f"data_dir={tmp_path / 'data'}",
        "progress=false",
        "bank.num_draws=5000",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout[out.stdout.index("{") :])
    assert report["concepts"] > 50
    assert (tmp_path / "data" / "tiny" / "manifest.json").is_file()
    # no run folder is left behind: `curi bank` keeps its config and log only in output_dir=
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    # asking for a different bank at the same place is one clear error, exit code 2
    again = run_curi(
        "bank", "bank=tiny", f"data_dir={tmp_path / 'data'}", "bank.num_draws=6000", cwd=tmp_path
    )
    assert again.returncode == 2
    assert re.search(r"curi bank: error: a different bank already exists", again.stderr)
    assert "Traceback" not in again.stderr


def test_unknown_command_and_bad_override(tmp_path):
    out = run_curi("bogus", cwd=tmp_path)
    assert out.returncode == 2 and "unknown command 'bogus'" in out.stderr
    out = run_curi("bank", "bank=nope", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == (
        "curi bank: error: unknown bank 'nope'; valid: default, paper, paper_legacy, tiny\n"
    )


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = blocks[1].strip()
    assert "pytest" in test_cmd
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_sweep_with_m_runs_each_job_and_names_the_log(tiny_bank_dir, tmp_path):
    data = f"data_dir={tiny_bank_dir.parent}"
    out = run_curi("split", "-m", "bank=tiny", data, "split=binding_color,counting", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    runs = sorted(p for p in (tmp_path / "multirun" / "split").glob("*/*") if p.is_dir())
    assert [r.name for r in runs] == ["0", "1"]  # a sweep without output_dir= keeps its record
    assert all((r / "split.log").is_file() for r in runs)
    assert '"split": "counting"' in out.stdout
