"""Image renderer: objects drawn where their bins say, in their colours, occluding and
shadowing correctly, metal shinier than rubber; deterministic; PNG export."""

import numpy as np
import pytest
import torch

from curi.renderers.base import make_object
from curi.renderers.image import ImageRenderer, render_images
from curi.renderers.png import save_png
from curi.scenes import COLOR_RGB, COLORS, Camera, sample_scenes


@pytest.fixture(scope="module")
def renderer():
    return ImageRenderer()


def scene(*objs):
    return {"objects": list(objs)}


def chroma_mask(img: torch.Tensor) -> torch.Tensor:
    """Pixels of saturated (non-grey) colour: objects, never the grey floor or shadows."""
    return (img.amax(0) - img.amin(0)) > 0.12


def centroid(mask: torch.Tensor) -> tuple[float, float]:
    ys, xs = mask.nonzero(as_tuple=True)
    return xs.float().mean().item() + 0.5, ys.float().mean().item() + 0.5


def test_object_centre_pixel_has_its_colour(renderer):
    recs = [
        scene(make_object(s, c, "rubber", "large", (0.0, 0.0), rotation=30.0))
        for c in COLORS
        for s in ("cube", "sphere", "cylinder")
    ]
    u8, _ = renderer.render_uint8(recs)
    palette = np.array([COLOR_RGB[c] for c in COLORS], float)
    for rec, img in zip(recs, u8, strict=True):
        o = rec["objects"][0]
        px, py = (int(v) for v in o["pixel"])
        got = img[py - 1 : py + 2, px - 1 : px + 2].reshape(-1, 3).mean(0)
        want = np.array(COLOR_RGB[o["color"]], float)
        # Shading scales the colour; the hue stays that of the palette entry.
        cos = palette @ got / (np.linalg.norm(palette, axis=1) * np.linalg.norm(got))
        assert COLORS[int(cos.argmax())] == o["color"] or o["color"] == "gray", (o, got)
        lo = 0.4 if o["shape"] == "cube" else 0.7  # a cube's centre may lie on its dark side
        assert lo < np.linalg.norm(got) / np.linalg.norm(want) < 1.3, (o, got)


def test_objects_drawn_where_their_bins_say(renderer):
    recs = sample_scenes(40, seed=5).records(range(40))
    singles = [scene(o) for r in recs for o in r["objects"] if o["color"] != "gray"][:40]
    img = renderer.render(singles).data
    for rec, im in zip(singles, img, strict=True):
        o = rec["objects"][0]
        cx, cy = centroid(chroma_mask(im))
        assert abs(cx - o["pixel"][0]) < 4 and abs(cy - o["pixel"][1]) < 5, (o, cx, cy)


def test_larger_x_moves_drawn_centre_right(renderer):
    xs = []
    for gx in (-2.0, -0.5, 1.0, 2.5):  # along the camera's right vector (+x +y)
        o = make_object("sphere", "blue", "rubber", "large", (gx, gx))
        xs.append(centroid(chroma_mask(renderer.render([scene(o)]).data[0]))[0])
        assert o["x"] >= 1
    assert xs == sorted(xs) and xs[-1] - xs[0] > 60


def test_size_large_draws_more_pixels(renderer):
    small = make_object("cube", "red", "rubber", "small", (0.0, 0.0))
    large = make_object("cube", "red", "rubber", "large", (0.0, 0.0))
    img = renderer.render([scene(small), scene(large)]).data
    area = [chroma_mask(i).sum().item() for i in img]
    assert 3.0 < area[1] / area[0] < 5.0  # twice the radius: about 4x the area


def test_occlusion_nearer_object_wins(renderer):
    cam = Camera()
    fwd = np.asarray(cam.basis()[2])
    near = make_object("sphere", "red", "rubber", "large", (1.5, -1.5))
    # Put a blue cube behind the sphere along the view direction.
    far_xy = np.array(near["position"][:2]) + 2.5 * fwd[:2] / np.linalg.norm(fwd[:2])
    far = make_object("cube", "blue", "rubber", "large", tuple(far_xy))
    for order in ((near, far), (far, near)):  # slot order must not matter
        img = renderer.render([scene(*order)]).data[0]
        px, py = (int(v) for v in near["pixel"])
        r, g, b = img[:, py, px].tolist()
        assert r > 2 * b, (r, g, b)


def test_shadow_darkens_the_floor(renderer):
    o = make_object("cylinder", "green", "rubber", "large", (0.0, 0.0))
    away = make_object("cylinder", "green", "rubber", "small", (-2.8, 2.8))
    L = renderer._light.numpy()
    # The floor point whose ray to the light passes through the cylinder's middle.
    c = np.asarray(o["position"])
    g = c - (c[2] / L[2]) * L
    px, py = Camera().project(g)[:2].astype(int)
    img = renderer.render([scene(o), scene(away)]).data
    lit, shaded = img[1, :, py, px].mean(), img[0, :, py, px].mean()
    assert shaded < 0.7 * lit
    # Hard shadows are also available and darker at the same point or equal.
    hard = ImageRenderer(soft_shadows=False).render([scene(o)]).data[0, :, py, px].mean()
    assert hard <= shaded + 1e-6


def test_metal_has_brighter_highlight_than_rubber(renderer):
    recs = [
        scene(make_object("sphere", "blue", m, "large", (0.0, 0.0))) for m in ("rubber", "metal")
    ]
    img = renderer.render(recs).data
    peak = [i.mean(0).max().item() for i in img]  # brightest pixel (the floor is darker)
    assert peak[1] > peak[0] + 0.15
    # Rubber has no near-white pixels at all; metal's highlight is near white.
    assert img[0].amin(0).max() < 0.75 and img[1].amin(0).max() > 0.85


def test_deterministic_batch_independent_and_sized():
    recs = sample_scenes(5, seed=2).records(range(5))
    r = ImageRenderer(width=120, height=80, chunk=2)
    a = r.render(recs).data
    assert a.shape == (5, 3, 80, 120)
    assert torch.equal(a, r.render(recs).data)
    torch.testing.assert_close(a[3], r.render(recs[3:4]).data[0], atol=1e-5, rtol=0)
    u8, f = render_images(recs[:2], width=120, height=80)
    assert u8.shape == (2, 80, 120, 3) and u8.dtype == np.uint8
    assert np.abs(u8.astype(float) / 255 - f.permute(0, 2, 3, 1).numpy()).max() <= 0.5 / 255 + 1e-6
    with pytest.raises(ValueError, match="at least 8 x 8"):
        ImageRenderer(width=4, height=4)
    # The chunk changes memory use, never the pixels; by default it is cache-sized on a CPU.
    assert ImageRenderer(width=120, height=80).chunk == 32
    assert torch.equal(ImageRenderer(width=120, height=80, chunk=64).render(recs).data, a)


def test_png_roundtrip(tmp_path):
    from PIL import Image

    u8, f = render_images(sample_scenes(1, seed=0).records([0]))
    p = save_png(u8[0], tmp_path / "a.png")
    assert np.array_equal(np.asarray(Image.open(p)), u8[0])
    q = save_png(f[0], tmp_path / "b.png")
    assert np.array_equal(np.asarray(Image.open(q)), u8[0])


def test_metal_cylinder_is_cleanly_shiny(renderer):
    cyl = make_object("cylinder", "blue", "metal", "large", (0.0, 0.0))
    cube = make_object("cube", "red", "rubber", "large", (1.2, 1.8), rotation=20.0)
    alone, beside = renderer.render([scene(cyl), scene(cyl, cube)]).data
    body = chroma_mask(alone)
    body &= ~chroma_mask(beside - alone)  # where the cube (or its shadow) is not drawn
    assert body.sum() > 500
    # A near-white highlight stripe on the side, and no mirror images of the neighbour
    # (they read as dark streaks at this size): the cylinder looks the same beside the cube.
    assert alone.amin(0)[body].max() > 0.85
    assert (alone - beside).abs().amax(0)[body].max() < 0.02


@pytest.mark.parametrize("shape", [(1, 1, 3), (5, 7, 3), (6, 9), (4, 3, 1), (3, 4, 2), (8, 5, 4)])
def test_png_writer_is_lossless_for_every_channel_count(tmp_path, shape):
    """Our own PNG writer (Sub filter, zlib at PNG_LEVEL): PIL verifies it and reads back the
    same pixels, for grey, grey + alpha, RGB and RGBA of odd sizes."""
    import io

    from PIL import Image

    from curi.renderers.png import png_bytes

    im = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    data = png_bytes(im)
    Image.open(io.BytesIO(data)).verify()  # chunk CRCs and structure
    back = np.asarray(Image.open(save_png(im, tmp_path / "a.png")))
    assert np.array_equal(back, im.squeeze(-1) if shape[-1:] == (1,) else im)
    assert (tmp_path / "a.png").read_bytes() == data
    with pytest.raises(ValueError, match="uint8"):
        png_bytes(im.astype(np.float32))


def test_export_equals_the_quantised_render_across_chunks(tmp_path):
    """export draws and quantises chunk by chunk, channels last, in one reused canvas: the
    same bytes as quantising `render`'s float images, for a size of partial tiles."""
    from PIL import Image

    recs = sample_scenes(5, seed=4).records(range(5))
    r = ImageRenderer(width=100, height=70, chunk=2)
    names = [f"s{i}" for i in range(5)]
    data = r.export(recs, tmp_path, names)["data"]
    u8, _ = r.render_uint8(recs)  # (B, H, W, 3) from the float images
    assert data.shape == (5, 3, 70, 100) and data.flags.c_contiguous
    assert np.array_equal(data, u8.transpose(0, 3, 1, 2))
    for i, name in enumerate(names):
        assert np.array_equal(np.asarray(Image.open(tmp_path / f"{name}.png")), u8[i])


def test_tile_coverage_matches_the_per_tile_formula():
    """The coverage, computed per axis of the tile grid, equals testing every tile against
    the object's box and its shadow's hull directly (lam in [0, 1] per tile and axis)."""
    import math

    from curi.renderers.base import pack_records
    from curi.renderers.image import _TILE, _Objects

    for soft in (True, False):
        r = ImageRenderer(width=120, height=80, soft_shadows=soft)
        ob = _Objects(pack_records(sample_scenes(12, seed=9).records(range(12))), r.device)
        own, shadow = r._coverage(ob)
        # Bounds of the box and the shadow as _coverage takes them, per object (B, 5, 2).
        b_lo, b_hi, g_lo, g_hi = _bounds(r, ob)
        tlo = torch.stack([r._tile_x0, r._tile_y0], -1)[:, None, None]  # (nT, 1, 1, 2)
        thi = tlo + _TILE
        valid = ob.valid
        ref_own = ((tlo < b_hi) & (thi > b_lo)).all(-1) & valid  # (nT, B, 5)
        ref_shadow = torch.zeros_like(ref_own)
        for t in range(tlo.shape[0]):
            lo, hi = 0.0, 1.0
            ok = torch.ones_like(valid)
            for a, slope in ((b_hi - tlo[t], g_hi - b_hi), (thi[t] - b_lo, b_lo - g_lo)):
                root = -a / torch.where(slope == 0, 1e-9, slope)
                lo = torch.maximum(
                    torch.as_tensor(lo), torch.where(slope > 0, root, -math.inf).amax(-1)
                )
                hi = torch.minimum(
                    torch.as_tensor(hi), torch.where(slope < 0, root, math.inf).amin(-1)
                )
                ok &= ~((slope == 0) & (a <= 0)).any(-1)
            ref_shadow[t] = (lo <= hi) & ok & valid
        assert torch.equal(own, ref_own.permute(1, 2, 0))
        assert torch.equal(shadow, ref_shadow.permute(1, 2, 0))
        assert shadow[own].all() and own.any()  # an object's own tiles are among its shadow's


def _bounds(r, ob):
    """The screen rectangles of each object's box and of its shadow on the floor, widened by
    the margin and the penumbra as `ImageRenderer._coverage` widens them."""
    sx = torch.tensor([-1.0, 1.0, -1.0, 1.0])
    sy = torch.tensor([-1.0, -1.0, 1.0, 1.0])
    rad = ob.radius.unsqueeze(-1)
    cx, cy = ob.centre[..., 0:1] + sx * rad, ob.centre[..., 1:2] + sy * rad
    top = 2.0 * ob.height.unsqueeze(-1).expand_as(cx)
    bottom = torch.stack([cx, cy, torch.zeros_like(cx)], -1)
    upper = torch.stack([cx, cy, top], -1)
    cast = upper - (upper[..., 2:3] / r._light[2]) * r._light
    body = r._project(torch.cat([bottom, upper], -2))
    ground = r._project(torch.cat([bottom, cast], -2))
    depth = ((ob.centre - r._eye) @ r._fwd).clamp_min(1.0)
    pen = (r._penumbra * 2.0 * ob.height / r._light[2] * r._focal / depth).unsqueeze(-1) + 1.5
    return body.amin(-2) - 1.5, body.amax(-2) + 1.5, ground.amin(-2) - pen, ground.amax(-2) + pen
