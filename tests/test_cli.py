"""End-to-end tests of the `curi` command (subprocesses, as a user runs it)."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def curi(*args, cwd):
    return subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_help_lists_commands(tmp_path):
    out = curi("--help", cwd=tmp_path)
    assert out.returncode == 0
    assert "bank" in out.stdout


def test_bank_builds_tiny_and_reports(tmp_path):
    out = curi(
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
    # the composed config is saved with the run's output
    assert list((tmp_path / "outputs" / "bank").glob("*/.hydra/config.yaml"))
    # asking for a different bank at the same place is one clear error, exit code 2
    again = curi(
        "bank", "bank=tiny", f"data_dir={tmp_path / 'data'}", "bank.num_draws=6000", cwd=tmp_path
    )
    assert again.returncode == 2
    assert re.search(r"curi bank: error: a different bank already exists", again.stderr)
    assert "Traceback" not in again.stderr


def test_unknown_command_and_bad_override(tmp_path):
    out = curi("bogus", cwd=tmp_path)
    assert out.returncode == 2 and "unknown command 'bogus'" in out.stderr
    out = curi("bank", "bank=nope", cwd=tmp_path)
    assert out.returncode != 0 and "Could not find 'bank/nope'" in out.stderr


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = blocks[1].strip()
    assert "pytest" in test_cmd
    assert test_cmd in (ROOT / ".ci" / "run").read_text()
