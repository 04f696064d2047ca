"""`curi show` end to end: reuses the session's tiny bank and writes the viewer files."""

import subprocess
import sys
import wave

from PIL import Image


def curi(*args, cwd):
    return subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_show_writes_image_sound_and_page(tiny_bank_dir, tmp_path):
    args = ["show", "bank=tiny", f"data_dir={tiny_bank_dir.parent}", "progress=false"]
    out = curi(*args, "scene=3", f"out={tmp_path / 'show'}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = tmp_path / "show"
    assert Image.open(d / "scene.png").size == (240, 160)
    with wave.open(str(d / "scene.wav")) as w:
        assert w.getframerate() == 16000 and w.getnframes() == 32000
    assert (d / "spectrogram.png").stat().st_size > 1000
    page = (d / "index.html").read_text()
    assert 'src="scene.png"' in page and "<audio" in page and 'src="spectrogram.png"' in page

    bad = curi(*args, "scene=-1", f"out={tmp_path / 'x'}", cwd=tmp_path)
    assert bad.returncode == 2 and "out of range" in bad.stderr
    ep = curi(*args, "episode=0", f"out={tmp_path / 'x'}", cwd=tmp_path)
    assert ep.returncode == 2 and "episode" in ep.stderr
