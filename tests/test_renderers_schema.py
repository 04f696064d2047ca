"""Schema renderer: fixed (B, 5, 20) layout, one-hots that match the records, normalised
position, depth and rotation, zero padding with a False mask."""

import math

import numpy as np
import pytest
import torch

from curi.renderers import SCHEMA_DIM, get_renderer
from curi.renderers.base import make_object
from curi.renderers.schema import FEATURES, encode
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES, Camera, sample_scenes


@pytest.fixture(scope="module")
def records():
    return sample_scenes(200, seed=3).records(range(200))


def test_layout_and_padding(records):
    feats, mask = encode(records)
    assert SCHEMA_DIM == 20 and len(FEATURES) == 20
    assert feats.shape == (200, 5, 20) and feats.dtype == torch.float32
    assert mask.shape == (200, 5) and mask.dtype == torch.bool
    counts = torch.tensor([len(r["objects"]) for r in records])
    assert torch.equal(mask.sum(1), counts)
    assert (feats[~mask] == 0).all()
    # Exactly one hot per group for every real object.
    real = feats[mask]
    for lo, hi in ((0, 3), (3, 11), (11, 13), (13, 15)):
        assert torch.equal(real[:, lo:hi].sum(1), torch.ones(len(real)))


def test_one_hots_match_records(records):
    feats, _ = encode(records)
    for i, rec in enumerate(records[:50]):
        for k, o in enumerate(rec["objects"]):
            f = feats[i, k].numpy()
            assert SHAPES[f[0:3].argmax()] == o["shape"]
            assert COLORS[f[3:11].argmax()] == o["color"]
            assert MATERIALS[f[11:13].argmax()] == o["material"]
            assert SIZES[f[13:15].argmax()] == o["size"]


def test_position_depth_rotation(records):
    cam = Camera()
    feats, _ = encode(records)
    dist = math.dist(cam.position, cam.target)
    for i, rec in enumerate(records[:50]):
        for k, o in enumerate(rec["objects"]):
            f = feats[i, k].numpy()
            np.testing.assert_allclose(f[15], o["pixel"][0] / 240, atol=1e-4)
            np.testing.assert_allclose(f[16], o["pixel"][1] / 160, atol=1e-4)
            depth = cam.project(np.asarray(o["position"]))[2]
            np.testing.assert_allclose(f[17], depth / dist, rtol=1e-5)
            rad = math.radians(o["rotation"])
            np.testing.assert_allclose(f[18:20], [math.sin(rad), math.cos(rad)], atol=1e-5)


def test_x_feature_follows_screen_position():
    left = make_object("cube", "red", "rubber", "large", (-2.0, -2.0))  # camera right: +x +y
    right = make_object("cube", "red", "rubber", "large", (2.0, 2.0))
    feats, _ = encode([{"objects": [left]}, {"objects": [right]}])
    assert feats[1, 0, 15] > feats[0, 0, 15] + 0.2


def test_renderer_on_device_and_size_option(records):
    r = get_renderer("schema", width=480, height=320)
    out = r.render(records[:4])
    ref, mask = encode(records[:4])
    # Same field of view: normalised positions do not depend on the image size.
    torch.testing.assert_close(out.data, ref, atol=1e-5, rtol=0)
    assert torch.equal(out.mask, mask)


def test_bad_record_raises():
    bad = {"objects": [dict(make_object("cube", "red", "rubber", "large", (0, 0)), color="pink")]}
    with pytest.raises(ValueError, match="unknown color"):
        encode([bad])
    with pytest.raises(ValueError, match="expected 1..5"):
        encode([{"objects": []}])
