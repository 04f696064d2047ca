"""Episode sheets and pages (`curi show episode=N`) and re-rendering exported episodes
(`curi episodes render`): the grid marks positives and negatives, the files are written, the
arrays equal the renderers' output on the same records, and bad input fails cleanly."""

import json
import wave

import numpy as np
import pytest
import torch
from conftest import run_curi
from PIL import Image
from scipy import ndimage

import curi.renderers.rerender as rerender
from curi import EpisodeSampler, make_split
from curi.errors import CuriError
from curi.export import EpisodeFileError, export_episodes
from curi.export.parts import staging_folder
from curi.renderers import get_renderer
from curi.renderers.image import ImageRenderer
from curi.renderers.png import save_png
from curi.renderers.rerender import render_episode_file
from curi.renderers.schema import encode
from curi.renderers.sheet import (
    NEGATIVE_RGB,
    POSITIVE_RGB,
    draw_sheet,
    sheet_size,
    write_episode_page,
)
from curi.renderers.sound import SoundRenderer

BLUE = (0, 0, 255)
_RENDER_RANGE = rerender._render_range


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: on a busy machine, more threads than free cores stall torch's small
    parallel regions, and these tests render only small batches."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def split(tiny_bank):
    return make_split(tiny_bank, "concept_iid")


@pytest.fixture(scope="module")
def exported(tiny_bank, split, tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "eps.jsonl"
    export_episodes(tiny_bank, split, "test", path, n=3, progress=False)
    return path


def test_sheet_grid_marks_positives_and_negatives():
    h, w = 40, 60
    support = np.zeros((25, h, w, 3), np.uint8)
    support[:] = BLUE
    query = support[:10].copy()
    s_labels = [0, 1] * 3 + [0] * 19  # positives not first in set order: the sheet sorts
    q_labels = [1, 1, 1] + [0] * 7
    sheet = draw_sheet(support, s_labels, query, q_labels, concept="exists x in S: red(x)")
    assert sheet.size == sheet_size(s_labels, q_labels, width=w, height=h, concept="exists x")
    px = np.asarray(sheet)
    boxes, n = ndimage.label(np.all(px == BLUE, axis=-1))
    assert n == 35  # one blue box per image
    marks = {"pos": [], "neg": []}
    for sl in ndimage.find_objects(boxes):
        ys, xs = sl
        assert (ys.stop - ys.start, xs.stop - xs.start) == (h, w)
        border = tuple(px[ys.start - 2, xs.start + w // 2])  # just above the image
        assert border in (POSITIVE_RGB, NEGATIVE_RGB)
        marks["pos" if border == POSITIVE_RGB else "neg"].append((xs.start, ys.start))
    assert len(marks["pos"]) == 3 + 3 and len(marks["neg"]) == 22 + 7
    # Two grids side by side, 5 columns each (the widest space separates them); positives on
    # rows above every negative; the query grid starts at the top like the support grid.
    cols = sorted({x for x, _ in marks["pos"] + marks["neg"]})
    assert len(cols) == 10
    split_x = cols[int(np.argmax(np.diff(cols))) + 1]
    assert cols.index(split_x) == 5
    for side in (lambda x: x < split_x, lambda x: x >= split_x):
        pos_y = [y for x, y in marks["pos"] if side(x)]
        neg_y = [y for x, y in marks["neg"] if side(x)]
        assert max(pos_y) < min(neg_y) and len({*pos_y, *neg_y}) == (6 if side(0) else 3)
    with pytest.raises(ValueError, match="labels"):
        draw_sheet(support, s_labels[:3], query, q_labels, concept="c")


def test_episode_page_writes_sheet_sounds_and_spectrograms(tiny_bank, split, tmp_path):
    ep = EpisodeSampler(tiny_bank, split, "test", "hard", seed=0, size=1)[0].to_dict()
    image = ImageRenderer(width=60, height=40)
    page = write_episode_page(
        ep,
        tmp_path,
        concept="readable",
        title="tiny / 0",
        image=image,
        sound=SoundRenderer(duration=0.5, note_duration=0.2),
    )
    sheet = Image.open(tmp_path / "sheet.png")
    want = sheet_size(
        ep["support_labels"], ep["query_labels"], width=60, height=40, concept="readable"
    )
    assert sheet.size == want
    scenes = tmp_path / "scenes"
    assert len(list(scenes.glob("*_spec.png"))) == 50
    assert Image.open(scenes / "query_07.png").size == (60, 40)
    with wave.open(str(scenes / "support_01.wav")) as w:
        assert w.getnframes() == 8000
    text = page.read_text()
    assert text.count("<audio") == 50 and "readable" in text and 'src="sheet.png"' in text
    assert json.loads((tmp_path / "episode.json").read_text())["query_ids"] == ep["query_ids"]


def test_rerender_schema_equals_encode(exported, tmp_path):
    index = render_episode_file(exported, tmp_path, get_renderer("schema"), progress=False)
    meta = json.loads(index.read_text())
    assert meta["count"] == 3 and meta["modality"] == "schema"
    for entry, ep in zip(meta["episodes"], map(json.loads, exported.open()), strict=True):
        z = np.load(tmp_path / entry["npz"])
        for s in ("support", "query"):
            feats, mask = encode(ep[f"{s}_records"])
            np.testing.assert_array_equal(z[s], feats.numpy())
            np.testing.assert_array_equal(z[f"{s}_mask"], mask.numpy())
            np.testing.assert_array_equal(z[f"{s}_labels"], ep[f"{s}_labels"])
            np.testing.assert_array_equal(z[f"{s}_ids"], ep[f"{s}_ids"])
        assert str(z["concept_text"]) == ep["concept_text"]
    assert not any(p.is_dir() for p in tmp_path.iterdir())  # no per-scene files for schema


def test_rerender_image_and_sound_files(exported, tmp_path):
    image = ImageRenderer(width=60, height=40)
    render_episode_file(exported, tmp_path / "img", image, limit=2, progress=False)
    meta = json.loads((tmp_path / "img" / "index.json").read_text())
    assert meta["count"] == 2 and meta["item_shape"] == [3, 40, 60]
    ep = json.loads(exported.open().readline())
    z = np.load(tmp_path / "img" / "episode_00000.npz")
    u8, _ = image.render_uint8(ep["query_records"])
    assert z["query"].shape == (25, 3, 40, 60) and z["query"].dtype == np.uint8
    np.testing.assert_array_equal(z["query"], u8.transpose(0, 3, 1, 2))
    pngs = sorted((tmp_path / "img" / "episode_00001").glob("*.png"))
    assert len(pngs) == 50
    assert np.array_equal(
        np.asarray(Image.open(tmp_path / "img/episode_00000/query_01.png")), u8[0]
    )

    sound = SoundRenderer(duration=0.5, note_duration=0.2)
    render_episode_file(exported, tmp_path / "snd", sound, limit=1, progress=False)
    z = np.load(tmp_path / "snd" / "episode_00000.npz")
    spec = sound.render(ep["support_records"]).data
    torch.testing.assert_close(
        torch.from_numpy(z["support"].astype(np.float32)), spec, atol=1e-3, rtol=0
    )
    assert len(list((tmp_path / "snd" / "episode_00000").glob("*.wav"))) == 50


def test_rerender_bad_input_is_a_clean_error(exported, tmp_path):
    schema = get_renderer("schema")
    with pytest.raises(EpisodeFileError, match="not found"):
        render_episode_file(tmp_path / "nope.jsonl", tmp_path / "o", schema, progress=False)
    lines = exported.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2] + "\n")
    with pytest.raises(EpisodeFileError, match="line 2 is not valid JSON"):
        render_episode_file(bad, tmp_path / "o", schema, progress=False)
    bad.write_text(json.dumps({"concept_text": "x"}) + "\n")
    with pytest.raises(EpisodeFileError, match="missing"):
        render_episode_file(bad, tmp_path / "o", schema, progress=False)
    bad.write_text("")
    with pytest.raises(EpisodeFileError, match="no episodes"):
        render_episode_file(bad, tmp_path / "o", schema, progress=False)
    gz = tmp_path / "bad.jsonl.gz"
    gz.write_bytes(b"not gzip at all")
    with pytest.raises(EpisodeFileError, match="cannot read"):
        render_episode_file(gz, tmp_path / "o", schema, progress=False)
    ep = json.loads(lines[0])
    ep["query_records"][0]["objects"][0]["shape"] = "torus"
    bad.write_text(json.dumps(ep) + "\n")
    with pytest.raises(EpisodeFileError, match="torus"):
        render_episode_file(bad, tmp_path / "o", schema, progress=False)


def test_cli_episodes_render(exported, tmp_path):
    ok = run_curi(
        "episodes",
        "render",
        f"in={exported}",
        "modality=schema",
        f"out={tmp_path / 's'}",
        "progress=false",
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "s" / "index.json").read_text())["count"] == 3
    missing = run_curi(
        "episodes",
        "render",
        f"in={tmp_path / 'nope.jsonl'}",
        "modality=schema",
        f"out={tmp_path / 'x'}",
        cwd=tmp_path,
    )
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert "Traceback" not in missing.stderr
    smell = run_curi(
        "episodes",
        "render",
        f"in={exported}",
        "modality=smell",
        f"out={tmp_path / 'x'}",
        cwd=tmp_path,
    )
    assert smell.returncode != 0 and "modality" in smell.stderr and "image" in smell.stderr
    assert "Traceback" not in smell.stderr


def test_rendered_images_load_as_an_imagefolder_with_labels_and_episodes(exported, tmp_path):
    """`curi episodes render ... modality=image out=DIR` writes the imagefolder convention's
    metadata.jsonl, so `load_dataset("imagefolder", data_dir=DIR)` keeps each picture's label,
    episode, set and scene (not the folder names as classes)."""
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "img"
    args = ["modality=image", "modality.width=60", "modality.height=40", "limit=2"]
    r = run_curi(
        "episodes", "render", f"in={exported}", *args, "progress=false", f"out={out}", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    d = datasets.load_dataset(
        "imagefolder", data_dir=str(out), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert len(d) == 100 and type(d.features["image"]).__name__ == "Image"
    assert {"label", "episode", "set", "scene_id", "concept_text"} <= set(d.features)
    want = {}
    for ep in map(json.loads, exported.read_text().splitlines()[:2]):
        for s in ("support", "query"):
            for scene, label in zip(ep[f"{s}_ids"], ep[f"{s}_labels"], strict=True):
                want[ep["index"], s, scene] = (label, ep["concept_text"])
    rows = d.remove_columns("image").to_list()
    got = {(r["episode"], r["set"], r["scene_id"]): (r["label"], r["concept_text"]) for r in rows}
    assert got == want
    assert sum(r["label"] for r in rows) == 2 * (5 + 5)  # 5 positives per set
    first = d[0]  # in file order; its picture is the file its metadata names
    assert (first["episode"], first["set"]) == (0, "support")
    png = np.asarray(Image.open(out / "episode_00000" / "support_01.png"))
    assert png.shape == (40, 60, 3) and np.array_equal(np.asarray(first["image"]), png)


def _files_and_index(folder):
    """Every file under `folder` (relative name -> bytes), and index.json read."""
    files = {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }
    index = json.loads(files.pop("index.json"))
    return files, index


def test_rerender_workers_give_the_same_files_in_the_same_order(exported, tmp_path):
    """Episodes rendered by two worker processes: byte for byte the files of one process, the
    index and metadata.jsonl in episode order, .npz arrays equal to the renderer's output."""
    image = ImageRenderer(width=60, height=40)
    for n in (1, 2):
        render_episode_file(exported, tmp_path / f"w{n}", image, workers=n, progress=False)
    one, two = _files_and_index(tmp_path / "w1"), _files_and_index(tmp_path / "w2")
    assert one == two
    files, index = two
    assert [e["npz"] for e in index["episodes"]] == [f"episode_{k:05d}.npz" for k in range(3)]
    rows = [json.loads(r) for r in files["metadata.jsonl"].decode().splitlines()]
    assert [r["episode"] for r in rows] == [0] * 50 + [1] * 50 + [2] * 50
    assert not [p for p in (tmp_path / "w2").iterdir() if p.name.startswith(".")]
    ep = json.loads(exported.read_text().splitlines()[2])
    z = np.load(tmp_path / "w2" / "episode_00002.npz")
    u8, _ = image.render_uint8(ep["support_records"])
    np.testing.assert_array_equal(z["support"], u8.transpose(0, 3, 1, 2))
    png = Image.open(tmp_path / "w2" / "episode_00002" / "support_25.png")
    np.testing.assert_array_equal(np.asarray(png), u8[24])


def test_rerender_npz_is_a_zip_of_npy_at_the_fast_level(exported, tmp_path):
    """The .npz holds the arrays `np.savez_compressed` would, deflated at `NPZ_LEVEL`."""
    import zipfile

    from curi.renderers.rerender import NPZ_LEVEL

    render_episode_file(exported, tmp_path, get_renderer("schema"), limit=1, progress=False)
    path = tmp_path / "episode_00000.npz"
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    assert {i.filename for i in infos} >= {"support.npy", "query_mask.npy", "concept_text.npy"}
    assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in infos) and NPZ_LEVEL == 1
    z = np.load(path)  # allow_pickle=False: no object arrays
    assert z["support"].dtype == np.float32 and z["query_labels"].dtype == np.int8


class _FailsOnThird(ImageRenderer):
    """An image renderer whose third export fails, as an interrupted run would."""

    calls = 0

    def export(self, records, folder=None, names=None):
        type(self).calls += 1
        if type(self).calls == 3:
            assert not any(folder.iterdir())  # a fresh temporary folder
            save_png(np.zeros((40, 60, 3), np.uint8), folder / "support_01.png")
            raise KeyboardInterrupt
        return super().export(records, folder, names)


def test_rerender_interrupted_leaves_no_half_episode(exported, tmp_path):
    """An episode interrupted while its files are written leaves nothing under its final name
    (its folder is renamed into place only once complete), no temporaries, no index.json,
    and the episodes before it complete; running again finishes the job."""
    out = tmp_path / "img"
    with pytest.raises(KeyboardInterrupt):
        render_episode_file(exported, out, _FailsOnThird(width=60, height=40), progress=False)
    assert sorted(p.name for p in out.iterdir()) == [
        "episode_00000",
        "episode_00000.npz",
        "episode_00001",
        "episode_00001.npz",
    ]
    assert len(list((out / "episode_00001").glob("*.png"))) == 50
    render_episode_file(exported, out, ImageRenderer(width=60, height=40), progress=False)
    assert json.loads((out / "index.json").read_text())["count"] == 3
    assert len(list((out / "episode_00002").glob("*.png"))) == 50


def test_rerender_bad_records_in_a_worker_is_a_clean_error(exported, tmp_path):
    lines = exported.read_text().splitlines()
    ep = json.loads(lines[2])
    ep["query_records"][0]["objects"][0]["color"] = "mauve"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:2], json.dumps(ep)]) + "\n")
    image = ImageRenderer(width=60, height=40)
    with pytest.raises(EpisodeFileError, match="episode 2: bad scene records.*mauve"):
        render_episode_file(bad, tmp_path / "o", image, workers=2, progress=False)
    assert not (tmp_path / "o" / "index.json").exists()
    assert not (tmp_path / "o" / "episode_00002").exists()
    with pytest.raises(ValueError, match="workers must be at least 1"):
        render_episode_file(exported, tmp_path / "o", image, workers=0, progress=False)


@pytest.mark.slow  # run and reported in docs/benchmarks.md (CI time)
def test_cli_episodes_render_workers(exported, tmp_path):
    """`workers` (default: one per core) gives the files of `workers=1`; a bad value is one
    clear message."""
    args = [
        "episodes",
        "render",
        f"in={exported}",
        "modality=image",
        "modality.width=60",
        "modality.height=40",
        "limit=2",
        "progress=false",
    ]
    for name, extra in (("auto", []), ("one", ["workers=1"])):
        r = run_curi(*args, f"out={tmp_path / name}", *extra, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
    assert _tree(tmp_path / "auto") == _tree(tmp_path / "one")
    # torch's own thread count here: forked workers must not inherit OpenMP threads (they hung)
    r = run_curi(
        *args, f"out={tmp_path / 'n'}", "workers=2", "threads=null", cwd=tmp_path, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tree(tmp_path / "n") == _tree(tmp_path / "one")
    bad = run_curi(*args, f"out={tmp_path / 'x'}", "workers=0", cwd=tmp_path)
    assert bad.returncode == 2 and "workers must be an integer in [1, 1024], got 0" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_workers_keep_freed_memory_on_glibc():
    """Workers ask glibc's malloc to keep freed memory (no page faults per episode); on
    another C library nothing is done and the answer is False."""
    import platform

    from curi.renderers.rerender import _keep_freed_memory

    kept = _keep_freed_memory()
    assert kept is (platform.libc_ver()[0] == "glibc")


def _render_jobs(monkeypatch, fail: int | None = None) -> list[int]:
    """Record the parts the render's jobs write; the job of part `fail` raises."""
    calls: list[int] = []

    def job(renderer, path, out, with_files, part):
        calls.append(part.number)
        if part.number == fail:
            raise RuntimeError("the renderer ran out of memory")
        return _RENDER_RANGE(renderer, path, out, with_files, part)

    monkeypatch.setattr(rerender, "_render_range", job)
    return calls


def _tree(folder) -> dict:
    """Every file under `folder` by relative name: .npz as their arrays, others as bytes."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            if p.suffix == ".npz":
                with np.load(p) as z:
                    out[p.relative_to(folder).as_posix()] = {k: z[k].tolist() for k in z.files}
            else:
                out[p.relative_to(folder).as_posix()] = p.read_bytes()
    return out


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-30] ^= 0xFF
    path.write_bytes(bytes(data))


def _label_in_marker(out):
    done = next(staging_folder(out).rglob("part-00000.done"))
    done.write_text(done.read_text().replace('\\"label\\": 1', '\\"label\\": 0', 1))


@pytest.mark.parametrize(
    "tamper",
    [
        lambda out: _flip_last_byte(out / "episode_00000.npz"),
        lambda out: _flip_last_byte(out / "episode_00000" / "query_01.png"),
        _label_in_marker,
    ],
    ids=["npz", "png", "marker"],
)
def test_a_changed_render_part_is_redone(exported, tmp_path, monkeypatch, tamper):
    """Parts of a render in jobs record every file they wrote (size and SHA-256) and their
    index rows in a marker with its own digest: a file or row changed since is redone, not
    listed in index.json and metadata.jsonl."""
    image = ImageRenderer(width=24, height=16)
    render_episode_file(exported, tmp_path / "one", image, progress=False)
    out = tmp_path / "jobs"
    _render_jobs(monkeypatch, fail=1)
    with pytest.raises(CuriError, match="part-00001"):
        render_episode_file(exported, out, image, progress=False, jobs=3)
    tamper(out)
    calls = _render_jobs(monkeypatch)
    render_episode_file(exported, out, image, progress=False, jobs=3)
    assert calls == [0, 1]
    assert _tree(out) == _tree(tmp_path / "one")
