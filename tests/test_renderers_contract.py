"""The renderer contract, checked for every registered renderer: shape, dtype, range, mask,
determinism, batch independence and errors (see `curi.renderers.base.Renderer`)."""

import numpy as np
import pytest
import torch

from curi import renderers
from curi.renderers.base import Rendered, Renderer
from curi.scenes import sample_scenes


@pytest.fixture(scope="module")
def records():
    return sample_scenes(6, seed=11).records(range(6))


def test_registry_lists_the_three_modalities():
    assert renderers.list_renderers() == ["image", "schema", "sound"]
    with pytest.raises(ValueError, match="unknown renderer"):
        renderers.get_renderer("smell")
    with pytest.raises(ValueError, match="bad option"):
        renderers.get_renderer("image", colour_depth=8)


@pytest.mark.parametrize("name", renderers.list_renderers())
def test_every_renderer_is_registered_under_its_name_and_checks_options(name):
    assert renderers.RENDERERS.get(name).name == name
    with pytest.raises(ValueError, match=f"bad option for renderer '{name}'"):
        renderers.get_renderer(name, colour_depth=8)


@pytest.mark.parametrize("name", renderers.list_renderers())
def test_contract(name, records):
    r = renderers.get_renderer(name)
    assert isinstance(r, Renderer) and r.name == name
    out = r.render(records)
    assert isinstance(out, Rendered)
    assert out.data.shape == (len(records), *r.item_shape)
    assert out.data.dtype == torch.float32
    lo, hi = r.value_range
    assert out.data.min() >= lo and out.data.max() <= hi
    assert out.data.std() > 0  # not a constant
    if r.per_object:
        assert out.mask.shape == (len(records), 5) and out.mask.dtype == torch.bool
    else:
        assert out.mask is None
    # Deterministic, and a record renders the same alone as inside a batch.
    assert torch.equal(r.render(records).data, out.data)
    alone = r.render(records[2:3]).data[0]
    torch.testing.assert_close(alone, out.data[2], atol=1e-5, rtol=0)
    # Different scenes give different outputs.
    assert not torch.equal(out.data[0], out.data[1])
    empty = r.render([])
    assert empty.data.shape == (0, *r.item_shape)
    with pytest.raises(ValueError):
        r.render([{"objects": [{"shape": "torus"}]}])


@pytest.mark.parametrize("name", renderers.list_renderers())
def test_model_input_and_storage_hold_the_rendered_values(name, records, tmp_path):
    """What a modality gives encoders (`to_input`) and what it stores (`export`) are its
    rendered values, reshaped or in a compact dtype, and per-scene files are written only by
    modalities that have them (`file_suffix`), atomically (no temporaries left)."""
    r = renderers.get_renderer(name)
    out = r.render(records)
    x = r.to_input(out.data)
    assert x.shape == (len(records), *r.input_shape)
    assert torch.equal(x.flatten(1), out.data.flatten(1))
    names = [f"scene_{i:02d}" for i in range(len(records))]
    arrays = r.export(records, tmp_path, names)
    assert isinstance(r.storage_format, str) and r.storage_format
    assert arrays["data"].shape == (len(records), *r.item_shape)
    assert ("mask" in arrays) == r.per_object
    if r.per_object:
        assert np.array_equal(arrays["mask"], out.mask.numpy())
    stored = arrays["data"].astype(np.float64)
    if arrays["data"].dtype == np.uint8:
        stored, atol = stored / 255.0, 0.5 / 255 + 1e-6
    else:
        atol = 1e-3  # float16 of values in [0, 1] (or float32 exactly)
    np.testing.assert_allclose(stored, out.data.numpy(), rtol=0, atol=atol)
    files = sorted(p.name for p in tmp_path.iterdir())
    expected = [n + r.file_suffix for n in names] if r.file_suffix else []
    assert files == expected
    assert r.export(records)["data"].shape == arrays["data"].shape  # no folder: no files
