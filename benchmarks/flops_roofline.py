"""The limit of a schema training step: FLOPs and minimum bytes per episode for each pooler,
and the episodes/s a GPU's peaks allow (a roofline), written to docs/benchmarks.md.

    python benchmarks/flops_roofline.py [--batch 64] [--bank tiny] [--data-dir DIR] [--no-write]

For each schema pooler (the paper's sizes, `conf/pooling`), one training step's forward and
backward on a batch of concept_iid hard-negative episodes is counted on the CPU:

- FLOPs: `torch.utils.flop_counter.FlopCounterMode` (matrix products and convolutions; the
  element-wise work is not counted as FLOPs, it is counted as bytes). The relation net runs its
  masked path (``RelationNetPooler.indexed_on_cpu = False``), the fixed-shape path the GPU runs:
  every scene's 25 ordered slot pairs, padding included.
- Bytes: the traffic of the activations, each activation written once and read once in the
  forward pass and again in the backward pass (its gradient written and read once): 4 x its
  size, in the dtype of the element-wise work (float32: 4 bytes, bf16: 2). Two counts of what
  an activation is: *unfused*, the output of every forward operation that is not a view (the
  eager step's separate element-wise kernels, the masked BatchNorm's chain among them);
  *fused*, two per matrix product (its output and the layer's normalised, activated output, all
  element-wise work of a layer in one kernel): the minimum. Plus the parameters' traffic of one Adam
  step (weights read twice, gradient written and read, two moments read and written, weights
  written: 8 float32 passes) spread over the batch.
- The limit: min(compute peak / FLOPs, bandwidth / bytes) in episodes/s, for H100 SXM (989
  TFLOP/s dense bf16, 3.35 TB/s) and H200 (989 TFLOP/s, 4.8 TB/s).

Counts per episode are the step's counts divided by the batch size; they do not depend on the
bank (fixed shapes), but BatchNorm's per-batch terms make them vary a little with the batch.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile

import torch
from _report import machine, write_section
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

PEAKS = {"H100 SXM": (989e12, 3.35e12), "H200": (989e12, 4.8e12)}
POOLERS = ("avg", "concat", "relation_net", "transformer")


MATMULS = {"mm", "addmm", "bmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention"}


class ActivationBytes(TorchDispatchMode):
    """Elements of the floating-point tensors a forward pass produces: of every non-view
    operation (``elements``, the eager, unfused traffic) and of the matrix products alone
    (``matmul_elements``; a fused layer writes its product and its normalised, activated
    output, so 2 x this is the fused minimum)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = self.matmul_elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            n = sum(
                t.numel()
                for t in (out if isinstance(out, (tuple, list)) else (out,))
                if isinstance(t, torch.Tensor) and t.is_floating_point()
            )
            self.elements += n
            if func.overloadpacket.__name__ in MATMULS:
                self.matmul_elements += n
        return out


def episode_batch(bank, batch: int) -> dict:
    """A training batch of `batch` concept_iid hard-negative episodes in the schema modality."""
    from curi.episodes import EpisodeSampler
    from curi.models.data import concept_max_len, make_renderer
    from curi.models.decoder import ConceptTokenizer
    from curi.models.pipeline import compact_batch, render_batch
    from curi.renderers.base import pack_scenes
    from curi.splits import make_split

    pool = EpisodeSampler(bank, make_split(bank, "concept_iid"), "train", "hard", seed=0)
    compact = compact_batch(
        pool, range(batch), tokenizer=ConceptTokenizer(), max_len=concept_max_len(bank)
    )
    renderer = make_renderer({"name": "schema"})

    def source(ids):
        out = renderer.render_packed(pack_scenes(bank.scenes, ids.numpy()))
        return renderer.to_input(out.data), out.mask

    b = render_batch(compact, source)
    return {k: v for k, v in b.items() if k not in ("concept", "index")}


def schema_model(bank, pooler: str):
    """The paper's schema model with `pooler` (`conf/pooling`'s sizes), in training mode."""
    from curi.models.config import RunConfig, build_model
    from curi.models.data import make_renderer

    run = RunConfig(bank=bank.config, pooling={"name": pooler})
    return build_model(run, make_renderer({"name": "schema"})).train()


@contextlib.contextmanager
def masked_pairs():
    """The relation net on its masked, fixed-shape path (the GPU's) on the CPU too."""
    from curi.models.poolers import RelationNetPooler

    RelationNetPooler.indexed_on_cpu = False
    try:
        yield
    finally:
        RelationNetPooler.indexed_on_cpu = True


def count(bank, pooler: str, batch: dict) -> dict:
    """FLOPs (forward + backward), activation elements and parameters of one step."""
    model = schema_model(bank, pooler)
    with masked_pairs():
        acts = ActivationBytes()
        with acts:
            model(batch)
        flops = FlopCounterMode(display=False)
        with flops:
            model(batch).loss.backward()
    params = sum(p.numel() for p in model.parameters())
    return {
        "flops": flops.get_total_flops(),
        "unfused": acts.elements,
        "fused": 2 * acts.matmul_elements,
        "params": params,
    }


def roofline(c: dict, batch: int) -> dict:
    """Per-episode FLOPs and bytes, and the limit in episodes/s per GPU and element dtype."""
    flops = c["flops"] / batch
    row = {"gflop": flops / 1e9}
    for kind in ("unfused", "fused"):
        for dtype, size in (("fp32", 4), ("bf16", 2)):
            nbytes = (4 * size * c[kind] + 8 * 4 * c["params"]) / batch
            key = f"{kind} {dtype}"
            row[f"mb {key}"] = nbytes / 1e6
            for gpu, (peak, bw) in PEAKS.items():
                row[f"{gpu} {key}"] = (min(peak / flops, bw / nbytes), peak / flops < bw / nbytes)
    return row


def _limit(cell: tuple[float, bool]) -> tuple[float, str]:
    return cell[0], "c" if cell[1] else "m"


def table(rows: dict[str, dict], batch: int) -> str:
    head = (
        "| pooler | element-wise | GFLOP/episode | MB/episode fp32 | MB/episode bf16 "
        "| H100 fp32 | H100 bf16 | H200 fp32 | H200 bf16 |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for name, r in rows.items():
        for kind in ("unfused", "fused"):
            limits = " | ".join(
                "{:,.0f} ({})".format(*_limit(r[f"{g} {kind} {d}"]))
                for g in ("H100 SXM", "H200")
                for d in ("fp32", "bf16")
            )
            lines.append(
                f"| {name} | {kind} | {r['gflop']:.3f} | {r[f'mb {kind} fp32']:.2f} "
                f"| {r[f'mb {kind} bf16']:.2f} | {limits} |"
            )
    return (
        f"Roofline of a schema training step (`benchmarks/flops_roofline.py`, batch {batch}, "
        f"forward + backward + Adam; episodes/s limits, (c) compute-bound, (m) memory-bound; "
        f"torch {torch.__version__}, counted on {machine()}):\n\n" + "\n".join(lines)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bank", default="tiny")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--poolers", nargs="+", default=list(POOLERS))
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    from curi.bank import open_bank

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        bank = open_bank(args.bank, args.data_dir or tmp, progress=False, build=True)
        batch = episode_batch(bank, args.batch)
        rows = {p: roofline(count(bank, p, batch), args.batch) for p in args.poolers}
    body = table(rows, args.batch)
    if args.no_write:
        print(body)
    else:
        write_section("roofline", body)


if __name__ == "__main__":
    main()
