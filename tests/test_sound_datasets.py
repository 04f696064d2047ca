"""Sound exports load where the README says they do: its recipe (WAV bytes taken undecoded from
Hugging Face `datasets`, decoded with `soundfile`) runs as written on a `media=sound` parquet
export and on a rendered sound folder, and gives the renderer's samples. `datasets` itself
decodes audio only through `torchcodec`, which curi does not install (it needs FFmpeg's shared
libraries), so reading such a row as it comes ends in an ImportError."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import soundfile
from conftest import readme_section

from curi import make_split
from curi.export import export_episodes
from curi.renderers import get_renderer
from curi.renderers.rerender import media, render_episode_file
from curi.renderers.sound import SoundConfig

datasets = pytest.importorskip("datasets")


def _readme_recipe() -> str:
    """The README's Python block that reads sound exports (the one that uses soundfile)."""
    blocks = re.findall(r"```python\n(.*?)```", readme_section("## Use"), re.S)
    found = [b for b in blocks if "import soundfile" in b]
    assert len(found) == 1, "the README's Use section has one block reading sound exports"
    return found[0]


@pytest.fixture(scope="module")
def exports(tiny_bank, tmp_path_factory):
    """The README's two sound exports of one episode: a parquet file and a rendered folder."""
    folder = tmp_path_factory.mktemp("sound")
    split = make_split(tiny_bank, "concept_iid")
    common = {"n": 1, "progress": False}
    export_episodes(
        tiny_bank, split, "test", folder / "eps_sound.parquet", media=media("sound"), **common
    )
    export_episodes(tiny_bank, split, "test", folder / "eps.jsonl.gz", **common)
    render_episode_file(
        folder / "eps.jsonl.gz", folder / "eps_sound", get_renderer("sound"), progress=False
    )
    return folder


@pytest.fixture(autouse=True)
def _hf_cache(tmp_path, monkeypatch):
    """`datasets`' cache in the test's folder (the README's calls name none)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")


def test_the_readmes_recipe_decodes_a_wav_of_a_sound_export(exports):
    code = _readme_recipe().replace("/tmp/", f"{exports}/")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # as a user would paste it

    rows, files = scope["rows"], scope["files"]
    row = rows[0]
    first, rate = soundfile.read(io.BytesIO(row["support_audios"][0]["bytes"]))
    sound = SoundConfig()  # the renderer's defaults: 2 s at 16 kHz
    assert rate == scope["rate"] == sound.sample_rate
    assert first.shape == scope["samples"].shape == (sound.num_samples,)
    assert np.abs(first).max() > 0.01  # a sound, not silence
    # the folder's file (README's last line) is the parquet's WAV of the same scene
    scene = files[0]["scene_id"]
    where = files[0]["set"]
    position = list(row[f"{where}_ids"]).index(scene)
    same, _ = soundfile.read(io.BytesIO(row[f"{where}_audios"][position]["bytes"]))
    np.testing.assert_array_equal(scope["samples"], same)
    assert files[0]["label"] == row[f"{where}_labels"][position]


def test_datasets_alone_needs_torchcodec_for_a_sound_row(exports):
    """Why the README takes the bytes undecoded: without torchcodec, a row read as it comes
    is an ImportError (where torchcodec is installed, the row decodes and this is moot)."""
    try:
        import torchcodec  # noqa: F401
    except (ImportError, OSError):
        pass
    else:
        pytest.skip("torchcodec is installed here: datasets decodes audio itself")
    data = str(exports / "eps_sound.parquet")
    rows = datasets.load_dataset("parquet", data_files=data, split="train")
    with pytest.raises(ImportError, match="torchcodec"):
        rows[0]
