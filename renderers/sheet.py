"""The episode viewer behind `curi show episode=N`: a PNG sheet of the support and query grids
(positives and negatives marked, the concept on top) and an HTML page with every scene's image,
sound player and spectrogram."""

from __future__ import annotations

import html
import json
import logging
import textwrap
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from curi.atomic import atomic_path, write_text
from curi.renderers.image import ImageRenderer
from curi.renderers.png import save_png
from curi.renderers.sound import SoundRenderer, save_wav, spectrogram

__all__ = ["POSITIVE_RGB", "NEGATIVE_RGB", "draw_sheet", "sheet_size", "write_episode_page"]

log = logging.getLogger(__name__)

POSITIVE_RGB = (20, 150, 60)  # border and caption of positives
NEGATIVE_RGB = (205, 35, 35)  # border and caption of negatives
_COLUMNS = 5
_MARGIN, _GAP, _BORDER, _CAPTION, _HEADER = 24, 48, 5, 24, 40
_PAD = 6  # space between cells
_MARKS = {True: "\u2713 positive", False: "\u2717 negative"}  # not colour alone
_SPLIT = 14  # extra space between the positive and the negative rows


@lru_cache(maxsize=8)
def _font(size: int, bold: bool = False) -> ImageFont.ImageFont:
    """DejaVu Sans (shipped with matplotlib) at `size` px; Pillow's default font otherwise."""
    try:
        from matplotlib import font_manager

        prop = font_manager.FontProperties(family="DejaVu Sans", weight="bold" if bold else None)
        return ImageFont.truetype(font_manager.findfont(prop, fallback_to_default=True), size)
    except (ImportError, OSError):
        return ImageFont.load_default(size=size)


def _order(labels: Sequence[int]) -> list[int]:
    """Display order: positives first, each group in set order."""
    return sorted(range(len(labels)), key=lambda i: (-int(labels[i]), i))


def _slots(labels: Sequence[int]) -> list[tuple[int, int, int]]:
    """(item, row, column) of every image: positives first, negatives from a new row."""
    n_pos = sum(int(v) == 1 for v in labels)
    first_neg_row = -(-n_pos // _COLUMNS)
    out = []
    for slot, i in enumerate(_order(labels)):
        j = slot if slot < n_pos else slot - n_pos
        r, c = divmod(j, _COLUMNS)
        out.append((i, r if slot < n_pos else first_neg_row + r, c))
    return out


def _rows(labels: Sequence[int]) -> int:
    n_pos = sum(int(v) == 1 for v in labels)
    return -(-n_pos // _COLUMNS) + -(-(len(labels) - n_pos) // _COLUMNS)


def _cell(tw: int, th: int) -> tuple[int, int]:
    return tw + 2 * _BORDER + _PAD, th + 2 * _BORDER + _CAPTION + _PAD


def _title_lines(concept: str, tw: int, n_sets: int) -> list[str]:
    width_px = n_sets * _COLUMNS * _cell(tw, 0)[0] + (n_sets - 1) * _GAP
    chars = max(30, int(width_px / 15))  # ~15 px per character at 26 px
    return textwrap.wrap(f"concept: {concept}", chars, subsequent_indent="    ") or [""]


def sheet_size(
    support_labels: Sequence[int],
    query_labels: Sequence[int],
    *,
    width: int,
    height: int,
    scale: float = 1.0,
    concept: str = "",
) -> tuple[int, int]:
    """Size in pixels (width, height) of the sheet `draw_sheet` makes for these labels, images
    of `width` x `height` and this concept text: each set is `_COLUMNS` wide, positives on
    their own rows above the negatives."""
    tw, th = round(width * scale), round(height * scale)
    cw, ch = _cell(tw, th)
    rows = max(_rows(support_labels), _rows(query_labels))
    n_sets = (len(support_labels) > 0) + (len(query_labels) > 0)
    top = _MARGIN + 34 * len(_title_lines(concept, tw, n_sets)) + 30 + 16
    return (
        2 * _MARGIN + n_sets * _COLUMNS * cw + (n_sets - 1) * _GAP,
        top + _HEADER + rows * ch + _SPLIT + _MARGIN,
    )


def draw_sheet(
    support: np.ndarray,
    support_labels: Sequence[int],
    query: np.ndarray,
    query_labels: Sequence[int],
    *,
    concept: str,
    subtitle: str = "",
    scale: float = 1.0,
) -> Image.Image:
    """Compose an episode sheet: the concept on top, then the support and query grids side by
    side, positives first, each image framed and captioned green (positive) or red (negative).

    Args:
        support, query: uint8 images (N, H, W, 3) in set order.
        support_labels, query_labels: 1 positive, 0 negative, one per image.
        concept: the concept in readable form (`Concept.pretty`).
        subtitle: a smaller line under the concept (where the episode comes from).
        scale: thumbnail size relative to the rendered images.

    Returns:
        An RGB image of size `sheet_size(...)`.

    Raises:
        ValueError: images and labels of different lengths.
    """
    sets = [("support", support, support_labels, "S"), ("query", query, query_labels, "Q")]
    for name, imgs, labels, _ in sets:
        if len(imgs) != len(labels):
            raise ValueError(f"{name}: {len(imgs)} images but {len(labels)} labels")
    h, w = support.shape[1:3] if len(support) else query.shape[1:3]
    tw, th = round(w * scale), round(h * scale)
    cw, ch = _cell(tw, th)
    size = sheet_size(support_labels, query_labels, width=w, height=h, scale=scale, concept=concept)
    sheet = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(sheet)
    y = _MARGIN
    sets = [s for s in sets if len(s[1])]
    for line in _title_lines(concept, tw, len(sets)):
        draw.text((_MARGIN, y), line, fill="black", font=_font(26, bold=True))
        y += 34
    x = _MARGIN
    if subtitle:
        draw.text((x, y + 2), subtitle + "    ", fill=(90, 90, 90), font=_font(17))
        x += int(draw.textlength(subtitle + "    ", font=_font(17)))
    for rgb, text in (
        (POSITIVE_RGB, "positive: satisfies the concept"),
        (NEGATIVE_RGB, "negative: does not"),
    ):
        draw.rectangle((x, y + 4, x + 16, y + 20), outline=rgb, width=4)
        draw.text((x + 24, y + 2), text, fill=rgb, font=_font(17, bold=True))
        x += 24 + int(draw.textlength(text, font=_font(17, bold=True))) + 24
    y += 30 + 16
    x0 = _MARGIN
    for name, imgs, labels, tag in sets:
        n_pos = int(np.sum(np.asarray(labels) == 1))
        head = f"{name} set: {n_pos} positive, {len(labels) - n_pos} negative"
        draw.text((x0, y), head, fill="black", font=_font(22, bold=True))
        for i, r, c in _slots(labels):
            pos = int(labels[i]) == 1
            cx, cy = x0 + c * cw, y + _HEADER + r * ch + (0 if pos else _SPLIT)
            rgb = POSITIVE_RGB if pos else NEGATIVE_RGB
            thumb = Image.fromarray(np.ascontiguousarray(imgs[i]))
            if (tw, th) != (w, h):
                thumb = thumb.resize((tw, th), Image.Resampling.LANCZOS)
            draw.rectangle((cx, cy, cx + tw + 2 * _BORDER - 1, cy + th + 2 * _BORDER - 1), fill=rgb)
            sheet.paste(thumb, (cx + _BORDER, cy + _BORDER))
            cap = f"{_MARKS[pos]}   {tag}{i + 1}"
            draw.text((cx + 2, cy + th + 2 * _BORDER + 2), cap, fill=rgb, font=_font(16, True))
        x0 += _COLUMNS * cw + _GAP
        if x0 < size[0] - _MARGIN:  # a rule between the two sets
            xm = x0 - _GAP // 2 - _PAD // 2
            draw.line((xm, y, xm, size[1] - _MARGIN), fill=(170, 170, 170), width=2)
    return sheet


def _spectrogram_png(spec: np.ndarray, path: Path) -> None:
    """A spectrogram (F, T) in [0, 1] as a small false-colour PNG, low frequencies at the
    bottom (a colour map only: 50 matplotlib figures would take seconds)."""
    from matplotlib import colormaps

    rgba = colormaps["magma"](np.clip(spec[::-1], 0.0, 1.0))
    save_png((rgba[..., :3] * 255 + 0.5).astype(np.uint8), path)


def _describe(record: dict) -> str:
    return "; ".join(
        f"{o['size']} {o['color']} {o['material']} {o['shape']} (x {o['x']}, y {o['y']})"
        for o in record["objects"]
    )


def write_episode_page(
    episode: dict,
    out: str | Path,
    *,
    concept: str | None = None,
    title: str = "",
    image: ImageRenderer | None = None,
    sound: SoundRenderer | None = None,
    scale: float = 1.0,
) -> Path:
    """Render an episode in image and sound and write its sheet and viewer page.

    Args:
        episode: an episode as `Episode.to_dict()` gives it (or a line of an exported file):
            ``concept_text``, ``support_ids`` / ``support_labels`` / ``support_records`` and
            the same for ``query``.
        out: output directory (created).
        concept: the concept in readable form (default: ``concept_text``).
        title: where the episode comes from (bank, split, subset, index), shown on both.
        image, sound: the renderers (default options if None).
        scale: thumbnail scale of the sheet.

    Returns:
        The path of ``index.html``; beside it ``sheet.png``, ``episode.json`` and ``scenes/``
        with ``<set>_<NN>.png``, ``.wav`` and ``_spec.png`` per scene.
    """
    out = Path(out)
    (out / "scenes").mkdir(parents=True, exist_ok=True)
    image = image or ImageRenderer()
    sound = sound or SoundRenderer()
    concept = concept or episode["concept_text"]
    sets = {name: _write_scenes(episode, name, out, image, sound) for name in ("support", "query")}
    sheet = draw_sheet(
        sets["support"][0],
        sets["support"][1],
        sets["query"][0],
        sets["query"][1],
        concept=concept,
        subtitle=title,
        scale=scale,
    )
    with atomic_path(out / "sheet.png") as tmp:
        sheet.save(tmp, format="PNG")
    write_text(out / "episode.json", json.dumps(episode))
    sections = [
        _section(episode, name, tag, *sets[name][1:])
        for name, tag in (("support", "S"), ("query", "Q"))
    ]
    page = _page(episode, concept, title, sections, image, sound)
    path = write_text(out / "index.html", page)
    log.info("wrote %s", path)
    return path


def _write_scenes(episode: dict, name: str, out: Path, image, sound) -> tuple:
    """Render the set `name` of `episode` and write each scene's PNG, WAV and spectrogram PNG
    under ``out/scenes``; returns ``(uint8 images, labels, records)`` of the set."""
    recs, labels = episode[f"{name}_records"], episode[f"{name}_labels"]
    u8, _ = image.render_uint8(recs)
    waves = sound.waveforms(recs)
    specs = spectrogram(waves, sound.config)
    for i in range(len(recs)):
        stem = out / "scenes" / f"{name}_{i + 1:02d}"
        save_png(u8[i], stem.with_suffix(".png"))
        save_wav(waves[i], stem.with_suffix(".wav"), sound.config.sample_rate)
        _spectrogram_png(specs[i], stem.parent / f"{stem.name}_spec.png")
    return u8, labels, recs


def _section(episode: dict, name: str, tag: str, labels, recs) -> str:
    """The page's section of the set `name`: a heading with its counts and a card per scene
    (image, mark, sound, spectrogram, description), positives first."""
    cards = []
    for i in _order(labels):
        pos = int(labels[i]) == 1
        stem = f"scenes/{name}_{i + 1:02d}"
        ids = episode.get(f"{name}_ids")
        sid = f" &middot; scene {ids[i]}" if ids is not None else ""
        desc = html.escape(_describe(recs[i]))
        cards.append(
            f'<div class="card {"pos" if pos else "neg"}">'
            f'<img src="{stem}.png" alt="{name} {i + 1}" title="{desc}">'
            f'<div class="lab">{_MARKS[pos]} &middot; {tag}{i + 1}{sid}</div>'
            f'<audio controls preload="none" src="{stem}.wav"></audio>'
            f'<img class="spec" src="{stem}_spec.png" alt="spectrogram">'
            f'<div class="desc">{desc}</div></div>'
        )
    n_pos = sum(int(v) == 1 for v in labels)
    return (
        f"<h2>{name} set: {n_pos} positive, {len(labels) - n_pos} negative</h2>"
        f'<div class="grid">{"".join(cards)}</div>'
    )


def _page(episode: dict, concept: str, title: str, sections: list[str], image, sound) -> str:
    """The episode's ``index.html``: the concept, the sheet and the `sections`."""
    name = html.escape(title or "curi episode")
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{name}</title>
<style>body{{font-family:sans-serif;margin:2em}} .grid{{display:flex;flex-wrap:wrap;gap:10px}}
.card{{width:{image.width + 8}px;border:5px solid;padding:4px;font-size:12px}}
.pos{{border-color:rgb{POSITIVE_RGB}}} .neg{{border-color:rgb{NEGATIVE_RGB}}}
.pos .lab{{color:rgb{POSITIVE_RGB}}} .neg .lab{{color:rgb{NEGATIVE_RGB}}}
.lab{{font-weight:bold;font-size:14px;margin:3px 0}} audio{{width:100%;height:30px}}
img{{width:100%;display:block}} img.spec{{height:100px}}
.desc{{color:#555;margin-top:3px}} #sheet{{max-width:100%;width:auto}}</style></head><body>
<h1>concept: {html.escape(concept)}</h1>
<p>{name} &middot; canonical form <code>{html.escape(episode["concept_text"])}</code></p>
<p>Positives satisfy the concept; negatives do not. Each scene: image ({image.width} x
{image.height}), sound (colour = instrument, y = pitch, x = onset, shape = envelope, size =
loudness, metal = low-passed) and its spectrogram (the sound model's input; 0 to
{sound.config.sample_rate / 2000:g} kHz upward, time to the right).</p>
<p><a href="sheet.png"><img id="sheet" src="sheet.png" alt="episode sheet"></a></p>
{chr(10).join(sections)}
<p><a href="episode.json">episode with scene records (JSON)</a></p>
</body></html>
"""
    return page
