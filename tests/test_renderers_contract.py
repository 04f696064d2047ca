"""The renderer contract, checked for every registered renderer: shape, dtype, range, mask,
determinism, batch independence and errors (see `curi.renderers.base.Renderer`)."""

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
