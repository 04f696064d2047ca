"""Tests of the model layer (CPU, small): encoder x pooler shapes, masking of padding, the
prototypical head against explicit formulas, overfitting a few fixed schema episodes, and the
concept decoder."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import curi
from curi.errors import ConfigError
from curi.models import (
    ConceptDecoder,
    ConceptTokenizer,
    ProtoNet,
    build_protonet,
    class_prototypes,
    count_parameters,
    encoder_options,
    get_encoder,
    get_pooler,
    list_encoders,
    list_poolers,
    poolers,
)
from curi.models.poolers import PAIR_CHUNK_ELEMENTS
from curi.renderers import get_renderer, list_renderers
from curi.scenes import Scenes, sample_scenes

# Small configurations so the whole module runs in seconds on one CPU core.
SMALL = {
    "schema": {},
    "image": {"height": 64, "width": 96, "grid": (4, 3)},
    "sound": {"n_freq": 201, "n_frames": 161},
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _inputs(name: str, b: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Random input batch of b scenes for encoder `name` in its SMALL configuration."""
    if name == "schema":
        x = torch.randn(b, 5, 20, generator=gen)
        counts = torch.tensor([2, 3, 4, 5] * b)[:b]
        mask = torch.arange(5)[None, :] < counts[:, None]  # (B, 5)
        return x, mask
    if name == "image":
        return torch.rand(b, 3, 64, 96, generator=gen), None
    return torch.randn(b, 1, 201, 161, generator=gen), None


def featurise(scenes: Scenes) -> tuple[torch.Tensor, torch.Tensor]:
    """Schema tensors in the fixed layout: (N, 5, 20) float32 and (N, 5) bool mask.

    [0:15] one-hots of shape (3), color (8), material (2), size (2); [15:18] pixel x / width,
    pixel y / height, depth / camera distance; [18:20] sin, cos of the rotation.
    """
    n = len(scenes)
    props = scenes.props.astype(np.int64)  # (N, 5, 6), -1 in padding
    mask = np.arange(5)[None, :] < scenes.n_objects[:, None].astype(np.int64)  # (N, 5)
    feats = np.zeros((n, 5, 20), np.float32)
    offset = 0
    for col, size in enumerate((3, 8, 2, 2)):
        idx = np.clip(props[..., col], 0, None)
        feats[..., offset : offset + size] = np.eye(size, dtype=np.float32)[idx]
        offset += size
    cam = scenes.camera
    feats[..., 15] = scenes.pixel[..., 0] / cam.width
    feats[..., 16] = scenes.pixel[..., 1] / cam.height
    feats[..., 17] = scenes.pixel[..., 2] / float(np.linalg.norm(cam.position))
    rot = np.deg2rad(scenes.rotation)
    feats[..., 18], feats[..., 19] = np.sin(rot), np.cos(rot)
    feats[~mask] = 0.0
    return torch.from_numpy(feats), torch.from_numpy(mask)


def test_registries_list_every_part_and_reject_unknown_names():
    assert list_encoders() == ["image", "schema", "sound"]
    assert list_poolers() == ["avg", "concat", "relation_net", "transformer"]
    kw = {"in_dim": 8, "num_objects": 3}
    assert type(get_pooler("relation-net", **kw)).__name__ == "RelationNetPooler"
    assert type(get_pooler("rel_net", **kw)).__name__ == "RelationNetPooler"
    with pytest.raises(ConfigError, match="unknown pooler 'max'"):
        get_pooler("max", **kw)
    with pytest.raises(ConfigError, match="unknown encoder 'video'"):
        get_encoder("video")


@pytest.mark.parametrize("pooler", list_poolers())
@pytest.mark.parametrize("encoder", list_encoders())
def test_every_encoder_pooler_gives_scene_embeddings(encoder, pooler):
    torch.manual_seed(0)
    model = build_protonet(encoder=encoder, pooler=pooler, encoder_kw=SMALL[encoder])
    x, mask = _inputs(encoder, 4, torch.Generator().manual_seed(1))
    enc = model.encoder(x, mask)
    k, d, p = model.encoder.num_objects, model.encoder.out_dim, model.encoder.pos_dim
    assert enc.objects.shape == (4, k, d)
    assert enc.mask.shape == (4, k) and enc.mask.dtype == torch.bool
    assert (enc.positions is None) == (p == 0)
    if p:
        assert enc.positions.shape == (4, k, p)
    emb = model.embed(x, mask)
    assert emb.shape == (4, 256)
    assert torch.isfinite(emb).all()
    emb.square().sum().backward()
    first = next(model.encoder.parameters())
    assert first.grad is not None and first.grad.abs().sum() > 0


# Small renderer options whose outputs the encoders read in `SMALL`-like sizes.
SMALL_RENDER = {"image": {"width": 96, "height": 64}}


@pytest.mark.parametrize("name", list_renderers())
def test_each_modality_has_an_encoder_sized_from_its_renderer(name):
    """The encoder registered under a renderer's name, sized by `encoder_options`, reads the
    renderer's `to_input` batches (no modality switch in between)."""
    renderer = get_renderer(name, **SMALL_RENDER.get(name, {}))
    kw = encoder_options(renderer)
    expected = {
        "schema": {},
        "image": {"height": 64, "width": 96},
        "sound": {"n_freq": 201, "n_frames": 161},
    }
    if name in expected:
        assert kw == expected[name]
    out = renderer.render(sample_scenes(3, seed=5).records(range(3)))
    torch.manual_seed(0)
    enc = get_encoder(name, **kw).eval()
    with torch.no_grad():
        objects, mask, _ = enc(renderer.to_input(out.data), out.mask)
    assert objects.shape == (3, enc.num_objects, enc.out_dim) and mask.shape == (3, enc.num_objects)
    assert torch.isfinite(objects).all()


def test_full_size_encoders_give_the_papers_object_counts():
    torch.manual_seed(0)
    image = get_encoder("image").eval()
    sound = get_encoder("sound").eval()
    with torch.no_grad():
        obj, mask, pos = image(torch.rand(2, 3, 160, 240))
        assert obj.shape == (2, 80, 64) and mask.all() and pos.shape == (2, 80, 2)
        obj, mask, pos = sound(torch.randn(2, 1, 201, 601))
        assert obj.shape == (2, 38, 64) and sound.num_objects == 38 and pos.shape == (2, 38, 1)
    assert torch.allclose(pos[0, :, 0], torch.linspace(0, 1, 38))


def test_image_objects_are_row_major_cells_with_their_own_coordinates():
    torch.manual_seed(0)
    enc = get_encoder("image", height=64, width=96, grid=(4, 3)).eval()
    x = torch.rand(2, 3, 64, 96)
    with torch.no_grad():
        fmap = enc.feature_map(x)  # (2, 64, 4, 3)
        obj, _, pos = enc(x)
    for k in range(12):
        r, c = divmod(k, 3)  # the row length is the number of columns
        assert torch.equal(obj[:, k], fmap[:, :, r, c])
        assert torch.allclose(pos[0, k], torch.tensor([r / 3, c / 2]))


def test_image_reduction_pools_every_column_of_layer3():
    torch.manual_seed(0)
    enc = get_encoder("image")  # 160 x 240 -> layer3 map 10 x 15 -> objects 10 x 8
    feat = torch.randn(2, 256, 10, 15, requires_grad=True)
    enc.reduce(feat).square().sum().backward()
    per_column = feat.grad.abs().sum(dim=(0, 1, 2))  # (15,)
    assert (per_column > 0).all(), "a layer3 column does not reach the objects"


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("pooler", list_poolers())
def test_schema_padding_values_change_nothing(pooler, train):
    torch.manual_seed(0)
    model = build_protonet(encoder="schema", pooler=pooler).train(train)
    x, mask = _inputs("schema", 8, torch.Generator().manual_seed(2))
    noisy = x.clone()
    noisy[~mask] = 100 * torch.randn(int((~mask).sum()), 20)
    nan = x.clone()
    nan[~mask] = float("nan")
    torch.manual_seed(3)
    ref = model.embed(x, mask)
    for other in (noisy, nan):
        torch.manual_seed(3)  # same dropout masks for the transformer in train mode
        out = model.embed(other, mask)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # And the padding really is padding: changing a real object does change the output.
    changed = x.clone()
    changed[mask] += 1.0
    torch.manual_seed(3)
    assert not torch.allclose(model.embed(changed, mask), ref, atol=1e-3)


@pytest.mark.parametrize("train", [True, False])
# concat reads objects by slot, so its input size is the number of slots: not comparable here
@pytest.mark.parametrize("pooler", [p for p in list_poolers() if p != "concat"])
def test_padded_slots_equal_absent_slots(pooler, train):
    """Three objects padded to five pool exactly like the same three objects unpadded, so
    padding enters no mean, attention, pair sum or BatchNorm statistic."""
    torch.manual_seed(0)
    p = get_pooler(pooler, in_dim=16, num_objects=5, pos_dim=2).train(train)
    objects, positions = torch.randn(6, 5, 16), torch.rand(6, 5, 2)
    mask = torch.zeros(6, 5, dtype=torch.bool)
    mask[:, :3] = True
    torch.manual_seed(4)
    padded = p(objects, mask, positions)
    torch.manual_seed(4)
    if pooler == "transformer" and train:
        p.eval()  # dropout masks differ in shape between K = 5 and K = 3; compare in eval
        torch.manual_seed(4)
        padded = p(objects, mask, positions)
    absent = p(objects[:, :3], mask[:, :3], positions[:, :3])
    torch.testing.assert_close(padded, absent, rtol=1e-4, atol=1e-4)


def test_relation_net_first_layer_equals_explicit_pair_features():
    torch.manual_seed(0)
    rn = get_pooler("relation_net", in_dim=8, num_objects=6, pos_dim=2)
    obj, pos = torch.randn(3, 6, 8), torch.rand(3, 6, 2)
    oi = obj[:, :, None, :].expand(-1, -1, 6, -1)  # (B, i, j, D)
    oj = obj[:, None, :, :].expand(-1, 6, -1, -1)
    rel = pos[:, None, :, :] - pos[:, :, None, :]  # (B, i, j, 2): p_j - p_i
    explicit = rn.g_in(torch.cat([oi, oj, rel], dim=-1))  # (B, 6, 6, 256)
    torch.testing.assert_close(rn.first_layer(obj, pos), explicit, rtol=1e-5, atol=1e-5)


def _relation_step(pooler, objects, mask, positions) -> list[list[torch.Tensor]]:
    """A relation-net forward and backward: [output], [d objects, d positions], parameter
    gradients, buffers after (the running statistics)."""
    objects, positions = objects.clone().requires_grad_(), positions.clone().requires_grad_()
    out = pooler(objects, mask, positions)
    (out * torch.linspace(-1.0, 2.0, out.numel()).reshape(out.shape)).sum().backward()
    params = [p.grad for p in pooler.parameters()]
    return [[out.detach()], [objects.grad, positions.grad], params, list(pooler.buffers())]


def _assert_same_steps(got, want, rtol: float = 1e-5) -> None:
    """Equal up to float rounding: within rtol of each element or of the largest element of
    its group (a gradient summed over many pairs can cancel far below its terms)."""
    for a_group, b_group in zip(got, want, strict=True):
        scale = max(float(b.abs().max()) for b in b_group)
        for a, b in zip(a_group, b_group, strict=True):
            torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * scale)


def _relation_net(**kw):
    """A small relation net with its BatchNorms moved off their initial state."""
    torch.manual_seed(0)
    rn = get_pooler("relation_net", in_dim=6, num_objects=5, pos_dim=2, g_dim=16, **kw)
    for m in rn.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
    return rn


def _relation_inputs(b: int, k: int, *, all_real: bool = False):
    """Objects and positions with NaN in padded slots, and a mask with scenes of one object
    and of every object."""
    gen = torch.Generator().manual_seed(1)
    objects, positions = torch.randn(b, k, 6, generator=gen), torch.rand(b, k, 2, generator=gen)
    mask = torch.rand(b, k, generator=gen) < 0.6
    mask[0], mask[1] = True, torch.arange(k) == 2
    if all_real:
        mask[:] = True
    objects[~mask], positions[~mask] = float("nan"), float("inf")
    return objects, mask, positions


@pytest.mark.parametrize("all_real", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_relation_net_chunked_path_equals_the_dense_one(train, all_real):
    """pair_chunk=2 (several chunks, the last shorter) gives the output, the gradients of
    objects, positions and every parameter, and the running statistics of the dense path."""
    objects, mask, positions = _relation_inputs(7, 5, all_real=all_real)
    dense, chunked = _relation_net(pair_chunk=0), _relation_net(pair_chunk=2)
    got = _relation_step(chunked.train(train), objects, mask, positions)
    _assert_same_steps(got, _relation_step(dense.train(train), objects, mask, positions))
    assert all(torch.isfinite(t).all() for t in got[1]), "padding leaked into a gradient"


def test_relation_net_compiles_whole_and_matches_eager():
    """Under torch.compile the masked path runs: one graph (fullgraph: no host sync, no
    data-dependent shape) whose output, gradients and running statistics equal eager's."""
    objects, mask, positions = _relation_inputs(4, 5)
    eager = _relation_net(g_layers=3, f_hidden=(8,), out_dim=8).train()
    compiled = torch.compile(copy.deepcopy(eager), backend="aot_eager", fullgraph=True)
    got = _relation_step(compiled, objects, mask, positions)
    _assert_same_steps(got, _relation_step(eager, objects, mask, positions))


def test_relation_net_chunks_only_large_pair_tensors():
    rn = get_pooler("relation_net", in_dim=96, num_objects=5)
    assert rn.chunk_scenes(64 * 50, 5) == 0  # schema at the paper's batch: dense
    chunk = rn.chunk_scenes(8 * 50, 80)  # an image batch of 8 episodes: 80 grid cells
    assert 0 < chunk and chunk * 80 * 80 * 256 <= PAIR_CHUNK_ELEMENTS
    assert (
        get_pooler("relation_net", in_dim=4, num_objects=80, pair_chunk=0).chunk_scenes(10**6, 80)
        == 0
    )
    with pytest.raises(ConfigError, match="pair_chunk"):
        get_pooler("relation_net", in_dim=4, num_objects=5, pair_chunk=-1)


@pytest.mark.parametrize(
    ("gib", "image_episodes_dense"),
    [(80, 6), (140, 11)],  # an H100's and an H200's memory
)
def test_on_a_gpu_the_pair_path_follows_its_memory(monkeypatch, gib, image_episodes_dense):
    monkeypatch.setattr(poolers, "device_memory", lambda device: gib * 2**30)
    cuda = torch.device("cuda")
    rn = get_pooler("relation_net", in_dim=96, num_objects=80)
    assert rn.chunk_scenes(1024 * 50, 5, cuda) == 0  # schema at batch 1,024: dense on both
    assert rn.chunk_scenes(image_episodes_dense * 50, 80, cuda) == 0
    chunk = rn.chunk_scenes((image_episodes_dense + 1) * 50, 80, cuda)
    _, per_chunk = poolers.pair_limits(cuda)
    assert 0 < chunk and chunk * 80 * 80 * 256 <= per_chunk
    assert chunk > rn.chunk_scenes(8 * 50, 80)  # bigger chunks than a CPU's
    assert poolers.pair_limits(torch.device("cpu")) == (
        poolers.DENSE_PAIR_LIMIT,
        PAIR_CHUNK_ELEMENTS,
    )


def test_protonet_head_matches_the_formulas():
    torch.manual_seed(0)
    model = build_protonet(encoder="schema", pooler="avg").eval()
    gen = torch.Generator().manual_seed(5)
    b, s, q = 3, 6, 4
    x, m = _inputs("schema", b * (s + q), gen)
    x, m = x.reshape(b, s + q, 5, 20), m.reshape(b, s + q, 5)
    s_lab = torch.tensor([[1, 0, 1, 0, 1, 0]] * b)
    q_lab = torch.tensor([[1, 0, 0, 1]] * b)
    batch = {
        "support": x[:, :s],
        "support_mask": m[:, :s],
        "support_labels": s_lab,
        "query": x[:, s:],
        "query_mask": m[:, s:],
        "query_labels": q_lab,
    }
    with torch.no_grad():
        out = model(batch)
        emb = model.embed(x.flatten(0, 1), m.flatten(0, 1)).reshape(b, s + q, -1)
    sup, qry = emb[:, :s], emb[:, s:]
    c_pos = sup[:, [0, 2, 4]].mean(1)
    c_neg = sup[:, [1, 3, 5]].mean(1)
    torch.testing.assert_close(out.prototypes, torch.stack([c_neg, c_pos], 1))
    torch.testing.assert_close(class_prototypes(sup, s_lab.bool()), out.prototypes)
    d = torch.cdist(qry, out.prototypes).square()  # (B, Q, 2)
    torch.testing.assert_close(out.logits, -d, rtol=1e-4, atol=1e-3)
    nll = -torch.log_softmax(-d, -1).gather(-1, q_lab[..., None]).mean()
    torch.testing.assert_close(out.loss, nll, rtol=1e-4, atol=1e-4)
    assert out.concept_loss is None
    # Scoring arbitrary scenes against the prototypes gives p(y = 1) of the same formula.
    p1 = ProtoNet.score(out.prototypes, qry.reshape(b * q, -1))  # (B, B * Q)
    own = torch.stack([p1[i, i * q : (i + 1) * q] for i in range(b)])  # (B, Q)
    torch.testing.assert_close(own, out.logits.softmax(-1)[..., 1], rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        protos = model.episode_prototypes(x[:, :s], s_lab, m[:, :s])
    torch.testing.assert_close(protos, out.prototypes, rtol=1e-5, atol=1e-5)


CONCEPTS = (
    "x color? red = lambda S. exists=",
    "x size? small = lambda S. for-all=",
    "S-x shape? x shape? any lambda S. exists=",
    "x shape? sphere = x color? blue = and lambda S. exists=",
)


def _fixed_episodes(n_support: int = 10, n_query: int = 10) -> dict[str, torch.Tensor]:
    """Four fixed schema episodes (one per concept), half positives, labelled by the executor."""
    scenes = sample_scenes(400, seed=0)
    x, mask = featurise(scenes)
    records = scenes.records(np.arange(len(scenes)))
    rng = np.random.default_rng(0)
    half_s, half_q = n_support // 2, n_query // 2
    ids, labels = [], []
    for concept in CONCEPTS:
        y = curi.evaluate(concept, records)
        pos = rng.permutation(np.flatnonzero(y))[: half_s + half_q]
        neg = rng.permutation(np.flatnonzero(~y))[: half_s + half_q]
        sup = np.concatenate([pos[:half_s], neg[:half_s]])
        qry = np.concatenate([pos[half_s:], neg[half_s:]])
        ids.append(np.concatenate([sup, qry]))
        labels.append(y[ids[-1]])
    ids_t = torch.from_numpy(np.stack(ids))  # (B, S + Q)
    lab = torch.from_numpy(np.stack(labels))  # (B, S + Q) bool
    s = n_support
    return {
        "support": x[ids_t[:, :s]],
        "support_mask": mask[ids_t[:, :s]],
        "support_labels": lab[:, :s],
        "query": x[ids_t[:, s:]],
        "query_mask": mask[ids_t[:, s:]],
        "query_labels": lab[:, s:],
        "concept_tokens": ConceptTokenizer().batch(CONCEPTS),
    }


def test_schema_protonet_overfits_a_few_fixed_episodes():
    torch.manual_seed(0)
    batch = _fixed_episodes()
    assert batch["query_labels"].float().mean() == 0.5
    model = build_protonet(encoder="schema", pooler="relation_net")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(60):
        out = model(batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    model.eval()
    with torch.no_grad():
        out = model(batch)
    acc = (out.logits.argmax(-1) == batch["query_labels"].long()).float().mean().item()
    assert np.mean(losses[-10:]) < 0.3 * np.mean(losses[:5]), losses[::15]
    assert acc > 0.9, acc


def _reordered(batch: dict, gen: torch.Generator) -> tuple[dict, torch.Tensor]:
    """`batch` with each episode's support and query sets in a new random order (inputs, masks
    and labels alongside); also the (B, Q) query order, to permute the expected scores."""
    b, s = batch["support_labels"].shape
    q = batch["query_labels"].shape[1]
    order = {
        part: torch.stack([torch.randperm(n, generator=gen) for _ in range(b)])  # (B, n)
        for part, n in (("support", s), ("query", q))
    }
    rows = torch.arange(b)[:, None]
    out = dict(batch)
    for part, perm in order.items():
        for key in (part, f"{part}_mask", f"{part}_labels"):
            out[key] = batch[key][rows, perm]  # (B, S or Q, ...)
    return out, order["query"]


def _order_change(model: ProtoNet, batch: dict, gen: torch.Generator) -> float:
    """Largest change of the query logits (matched by scene), prototypes and losses when the
    support and query sets are put in another order."""
    with torch.no_grad():
        ref = model(batch)
        moved, q_order = _reordered(batch, gen)
        out = model(moved)
    rows = torch.arange(q_order.shape[0])[:, None]
    pairs = [
        (out.logits, ref.logits[rows, q_order]),
        (out.prototypes, ref.prototypes),
        (out.loss, ref.loss),
        (out.concept_loss, ref.concept_loss),
    ]
    return max(float((a - b).abs().max()) for a, b in pairs)


class _ReadsBatchPosition(torch.nn.Module):
    """A faulty pooler: its scene vector depends on where the scene sits in the batch."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, objects, mask, positions=None):
        out = self.inner(objects, mask, positions)  # (N, E)
        return out + 0.01 * torch.arange(len(out), dtype=out.dtype)[:, None]


@pytest.mark.parametrize("pooler", list_poolers())
def test_protonet_answers_do_not_depend_on_the_order_of_support_and_query(pooler):
    """Episodes come with their support and query sets shuffled (`curi.EpisodeSampler`), so a
    model's answers must not depend on that order: in eval mode, the query logits of every
    pooler move with their scenes and the prototypes and losses stay the same, and a pooler
    that reads a scene's position in the batch is caught by the same check."""
    torch.manual_seed(0)
    batch = _fixed_episodes()
    model = build_protonet(encoder="schema", pooler=pooler, alpha=1.0).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        scale = float(model(batch).logits.abs().max())
    assert _order_change(model, batch, gen) < 1e-4 * scale
    model.pooler = _ReadsBatchPosition(model.pooler)
    assert _order_change(model, batch, gen) > 1e-3 * scale


def test_tokenizer_round_trips_concepts_and_pads():
    tok = ConceptTokenizer()
    assert len(tok) == len(curi.concepts.VOCABULARY) + 4
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    ids = tok.batch(CONCEPTS)
    assert ids.dtype == torch.long and ids.shape[0] == len(CONCEPTS)
    for row, c in zip(ids, CONCEPTS, strict=True):
        assert tok.decode(row) == curi.parse(c).postfix()
        n = len(curi.parse(c).tokens())
        assert row[n] == tok.eos_id and (row[n + 1 :] == tok.pad_id).all()
    with pytest.raises(ValueError, match="max_len"):
        tok.batch(CONCEPTS, max_len=5)
    with pytest.raises(curi.ConceptError):
        tok.encode("x colour? red = lambda S. exists=")


def test_concept_decoder_loss_falls_on_a_tiny_set():
    torch.manual_seed(0)
    tok = ConceptTokenizer()
    targets = tok.batch(CONCEPTS)
    cond = torch.randn(len(CONCEPTS), 512)
    dec = ConceptDecoder(vocab_size=len(tok), cond_dim=512)
    opt = torch.optim.Adam(dec.parameters(), lr=3e-3)
    first = dec.loss(cond, targets).item()
    assert math.isclose(first, math.log(len(tok)), rel_tol=0.2)  # about uniform at init
    for _ in range(80):
        loss = dec.loss(cond, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first, (first, loss.item())
    decoded = [tok.decode(r) for r in dec.greedy(cond, max_len=targets.shape[1])]
    assert decoded == [curi.parse(c).postfix() for c in CONCEPTS]


def test_total_loss_adds_the_weighted_concept_loss_and_it_reaches_the_encoder():
    torch.manual_seed(0)
    batch = _fixed_episodes(n_support=4, n_query=4)
    model = build_protonet(encoder="schema", pooler="avg", alpha=0.5)
    out = model(batch)
    assert out.concept_loss is not None
    torch.testing.assert_close(out.loss, out.query_loss + 0.5 * out.concept_loss)
    out.concept_loss.backward()
    grad = model.encoder.mlp[0].weight.grad
    assert grad is not None and grad.abs().sum() > 0
    with pytest.raises(KeyError, match="concept_tokens"):
        model({k: v for k, v in batch.items() if k != "concept_tokens"})
    with pytest.raises(ConfigError, match="decoder"):
        ProtoNet(model.encoder, model.pooler, alpha=1.0)


def test_inputs_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match=r"\(B, K, 20\)"):
        get_encoder("schema")(torch.zeros(2, 5, 19))
    with pytest.raises(ValueError, match="160, 240"):
        get_encoder("image")(torch.zeros(1, 3, 64, 96))
    with pytest.raises(ConfigError, match="multiple of 16"):
        get_encoder("image", height=100, width=96)


def test_parameter_counts_are_positive_and_printed(capsys):
    rows = []
    for enc in ("schema", "sound"):  # the full-size image encoder is counted below, once
        for pool in list_poolers():
            m = build_protonet(encoder=enc, pooler=pool)
            c = m.parameter_counts()
            assert c["encoder"] > 0 and c["pooler"] > 0
            assert c["total"] == c["encoder"] + c["pooler"] == count_parameters(m)
            rows.append(f"{enc:6s} {pool:12s} {c['encoder']:>10,} {c['pooler']:>10,}")
    image = get_encoder("image")
    # ResNet-18 through layer3 (2,782,784) + 1x1 convs 256*128+128 + 128*64+64.
    assert count_parameters(image) == 2_782_784 + 32_896 + 8_256
    rows.append(f"image  (encoder)    {count_parameters(image):>10,}")
    image.backbone.requires_grad_(False)
    assert count_parameters(image) == 41_152
    assert count_parameters(image, trainable_only=False) == 2_823_936
    with capsys.disabled():
        print("\nparameters: encoder pooler encoder-params pooler-params\n" + "\n".join(rows))
