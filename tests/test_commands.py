"""`open_bank`, the one way commands and training open a bank: built or reused, then loaded."""

from __future__ import annotations

import dataclasses
import re

import pytest
from conftest import TINY
from omegaconf import OmegaConf

from curi.bank import open_bank
from curi.core_cli import open_bank_from_config
from curi.errors import BankError


def test_open_bank_reuses_a_built_bank(tiny_bank_dir):
    bank = open_bank(TINY, tiny_bank_dir.parent, progress=False)
    assert bank.path == tiny_bank_dir and len(bank) > 0
    same = open_bank(dataclasses.asdict(TINY), tiny_bank_dir.parent, progress=False)
    assert same.path == tiny_bank_dir and same.concepts == bank.concepts
    with pytest.raises(BankError, match="different bank"):
        open_bank(dataclasses.replace(TINY, seed=1), tiny_bank_dir.parent, progress=False)


def test_a_commands_config_opens_the_same_bank(tiny_bank_dir):
    cfg = OmegaConf.create(
        {"bank": dataclasses.asdict(TINY), "data_dir": str(tiny_bank_dir.parent), "progress": False}
    )
    assert open_bank_from_config(cfg).path == tiny_bank_dir


def test_split_command_saves_a_split_that_loads_back(tiny_bank_dir, tmp_path, capsys):
    import json

    from curi.core_cli import split
    from curi.splits import make_split

    out = tmp_path / "bc.json"
    cfg = OmegaConf.create(
        {
            "bank": dataclasses.asdict(TINY),
            "data_dir": str(tiny_bank_dir.parent),
            "progress": False,
            "split": {"name": "bc", "rule": "binding", "held_out": ["cyan"]},
            "save": str(out),
        }
    )
    split(cfg)
    assert json.loads(capsys.readouterr().out)["saved"] == str(out)
    bank = open_bank_from_config(cfg)
    again = make_split(bank, out)
    want = make_split(bank, {"name": "bc", "rule": "binding", "held_out": ["cyan"]})
    assert again.test.tolist() == want.test.tolist() and again.train.tolist() == want.train.tolist()


def test_a_generated_splits_progress_follows_the_command(tiny_bank_dir, capsys):
    """`curi split split=mcd progress=false` shows no bars (the rule's own `progress` key
    stays true in conf/split/mcd.yaml)."""
    from curi.core_cli import split

    cfg = OmegaConf.create(
        {
            "bank": dataclasses.asdict(TINY),
            "data_dir": str(tiny_bank_dir.parent),
            "progress": False,
            "split": {"name": "m", "rule": "mcd", "restarts": 1, "progress": True},
        }
    )
    split(cfg)
    out, err = capsys.readouterr()
    bar = re.compile(r"mcd[^\n]*\|")  # tqdm's "mcd 1/2:  40%|####  |" (not a log line naming mcd)
    assert "d_compound" in out and not bar.search(err), err
    cfg.progress = True
    split(cfg)
    assert bar.search(capsys.readouterr().err)  # the bars, which the check above would catch
