"""The scene viewer behind `curi show`: one scene record -> a PNG, a WAV, a spectrogram PNG and
an HTML page that shows them with the record's objects and what each one sounds like."""

from __future__ import annotations

import html
import json
import logging
from pathlib import Path

import numpy as np

from curi.atomic import atomic_path, write_text
from curi.renderers.image import ImageRenderer
from curi.renderers.png import save_png
from curi.renderers.sound import INSTRUMENTS, SCALE_MIDI, SoundRenderer, save_wav, spectrogram

__all__ = ["write_scene_page"]

log = logging.getLogger(__name__)
_NOTE_NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")


def _note_name(midi: int) -> str:
    return f"{_NOTE_NAMES[midi % 12]}{midi // 12 - 1}"


def _spectrogram_png(spec: np.ndarray, sound: SoundRenderer, path: Path, objects) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = sound.config
    fig, ax = plt.subplots(figsize=(7, 3), dpi=100)
    ax.imshow(
        spec,
        origin="lower",
        aspect="auto",
        cmap="magma",
        vmin=0,
        vmax=1,
        extent=(0, cfg.duration, 0, cfg.sample_rate / 2 / 1000),
    )
    onsets = cfg.onset_samples() / cfg.sample_rate
    for o in objects:
        t = onsets[o["x"] - 1]
        ax.axvline(t, color="white", lw=0.6, ls="--")
        ax.text(
            t,
            cfg.sample_rate / 2 / 1000 * 0.93,
            INSTRUMENTS[o["color"]].name,
            color="white",
            fontsize=7,
            rotation=90,
            va="top",
        )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("frequency (kHz)")
    ax.set_title("spectrogram (model input)", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def write_scene_page(
    record: dict,
    out: str | Path,
    *,
    image: ImageRenderer | None = None,
    sound: SoundRenderer | None = None,
    title: str = "",
) -> Path:
    """Render one scene record in every modality and write a viewer page.

    Args:
        record: a scene record (`ConceptBank.scene_records`).
        out: output directory (created).
        image, sound: the renderers to use (default options if None).
        title: heading of the page.

    Returns:
        The path of ``index.html``; beside it ``scene.png``, ``scene.wav``,
        ``spectrogram.png`` and ``scene.json``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    image = image or ImageRenderer()
    sound = sound or SoundRenderer()
    u8, _ = image.render_uint8([record])
    save_png(u8[0], out / "scene.png")
    wave = sound.waveforms([record])
    save_wav(wave[0], out / "scene.wav", sound.config.sample_rate)
    _spectrogram_png(
        spectrogram(wave, sound.config)[0], sound, out / "spectrogram.png", record["objects"]
    )
    write_text(out / "scene.json", json.dumps(record, indent=1))

    onsets = sound.config.onset_samples() / sound.config.sample_rate
    rows = []
    for o in record["objects"]:
        cells = [
            o["shape"],
            o["color"],
            o["material"],
            o["size"],
            o["x"],
            o["y"],
            INSTRUMENTS[o["color"]].name,
            _note_name(SCALE_MIDI[o["y"] - 1]),
            f"{onsets[o['x'] - 1]:.2f} s",
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = ["shape", "color", "material", "size", "x bin", "y bin", "instrument", "note", "onset"]
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title or "curi scene")}</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{padding:2px 10px;text-align:left}}
img.scene{{width:{2 * image.width}px}} figure{{margin:1em 0}}</style></head><body>
<h1>{html.escape(title or "curi scene")}</h1>
<figure><img class="scene" src="scene.png" alt="rendered scene">
<figcaption>image ({image.width} x {image.height}, shown at 2x)</figcaption></figure>
<figure><audio controls src="scene.wav"></audio><figcaption>sound: one note per object
(colour = instrument, y = pitch, x = onset, shape = envelope, size = loudness, metal =
low-passed)</figcaption></figure>
<figure><img src="spectrogram.png" alt="spectrogram"></figure>
<table><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>
{chr(10).join(rows)}</table>
<p><a href="scene.json">scene record (JSON)</a></p>
</body></html>
"""
    path = write_text(out / "index.html", page)
    log.info("wrote %s", path)
    return path
