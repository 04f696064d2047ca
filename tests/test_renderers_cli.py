"""`curi show` end to end: reuses the session's tiny bank and writes the viewer files."""

import wave

from conftest import run_curi
from PIL import Image


def test_show_writes_image_sound_and_page(tiny_bank_dir, tmp_path):
    args = ["show", "bank=tiny", f"data_dir={tiny_bank_dir.parent}", "progress=false"]
    out = run_curi(*args, "scene=3", f"out={tmp_path / 'show'}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = tmp_path / "show"
    assert Image.open(d / "scene.png").size == (240, 160)
    with wave.open(str(d / "scene.wav")) as w:
        assert w.getframerate() == 16000 and w.getnframes() == 32000
    assert (d / "spectrogram.png").stat().st_size > 1000
    page = (d / "index.html").read_text()
    assert 'src="scene.png"' in page and "<audio" in page and 'src="spectrogram.png"' in page

    bad = run_curi(*args, "scene=-1", f"out={tmp_path / 'x'}", cwd=tmp_path)
    assert bad.returncode == 2 and "scene must be an integer in [0, inf], got -1" in bad.stderr


def test_show_episode_writes_sheet_and_page(tiny_bank_dir, tmp_path):
    args = [
        "show",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "progress=false",
        "split=concept_iid",
        "subset=test",
        "negatives=easy",
        "seed=1",
    ]
    out = run_curi(*args, "episode=2", "sheet_scale=0.5", f"out={tmp_path / 'ep'}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = tmp_path / "ep"
    w, h = Image.open(d / "sheet.png").size
    assert 1000 < w < 1500 and h > 300  # two 5-column grids of 120 x 80 thumbnails
    page = (d / "index.html").read_text()
    assert page.count("<audio") == 50 and "easy negatives" in page and "episode 2" in page
    assert len(list((d / "scenes").glob("*.wav"))) == 50

    bad = run_curi(*args, "episode=100000", f"out={tmp_path / 'x'}", cwd=tmp_path)
    assert bad.returncode == 2 and "out of range" in bad.stderr
