"""Where a training step's time goes, per modality: episode sampling (compact arrays) and
scene gathering (`pack_scenes`) on the host, rendering (`Renderer.render_packed`), batch
assembly, the copy to the device, forward, backward and the optimiser; then the data wait of
`curi train`'s own loader (DataLoader workers, and on a GPU renderer the render ahead in this
process) beside the model step.

    python benchmarks/profile_train.py [--modalities schema image sound] [--steps 5]
        [--batch N] [--workers 2] [--device auto] [--bank tiny] [--data-dir DIR]
        [--trace DIR] [-o image.width=120 -o image.height=80]

Each phase runs under ``torch.profiler.record_function`` (``--trace`` writes a Chrome trace
per modality) and an explicit timer that synchronises CUDA before and after it, so GPU work
is charged to the phase that queued it. Wall and process CPU seconds are both printed: on a
busy shared machine the CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import record_function

from curi.bank import open_bank
from curi.episodes import EpisodeSampler
from curi.models.config import RunConfig, TrainSettings, build_model
from curi.models.data import StepBatchSampler, concept_max_len, make_renderer
from curi.models.decoder import ConceptTokenizer
from curi.models.pipeline import compact_batch, render_batch
from curi.models.runtime import Runtime, autocast, resolve_device, to_device
from curi.models.train_batches import train_loader
from curi.renderers.base import pack_scenes
from curi.splits import make_split

PHASES = ("sample", "gather", "render", "assemble", "to_device", "forward", "backward", "optim")


class Timer:
    """Wall and CPU seconds per named phase; CUDA is synchronised around each phase (unless
    `sync` is False: then a phase counts only the host time it blocks)."""

    def __init__(self, device: torch.device, *, sync: bool = True) -> None:
        self.cuda = device.type == "cuda" and sync
        self.wall: dict[str, list[float]] = defaultdict(list)
        self.cpu: dict[str, list[float]] = defaultdict(list)

    @contextlib.contextmanager
    def __call__(self, name: str):
        if self.cuda:
            torch.cuda.synchronize()
        w, c = time.perf_counter(), time.process_time()
        with record_function(name):
            yield
        if self.cuda:
            torch.cuda.synchronize()
        self.wall[name].append(time.perf_counter() - w)
        self.cpu[name].append(time.process_time() - c)


class _Done:
    """A scene source that hands back an already rendered block (to time assembly alone)."""

    def __init__(self, renderer, out) -> None:
        self.device = out.data.device
        self.x, self.mask = renderer.to_input(out.data), out.mask

    def __call__(self, ids):
        return self.x, self.mask


def _model_step(model, opt, batch, device, amp, timer: Timer) -> None:
    with timer("to_device"):
        batch = to_device(batch, device)
    with timer("forward"):
        with autocast(device, amp):
            out = model(batch)
    with timer("backward"):
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
    with timer("optim"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()


def profile_serial(bank, modality: dict, batch: int, steps: int, device, amp) -> Timer:
    """Every phase of `steps` training steps, one after another in this process."""
    split = make_split(bank, "concept_iid")
    pool = EpisodeSampler(bank, split, "train", "hard", seed=0, size=100_000)
    renderer = make_renderer(modality)
    run = RunConfig(bank=bank.config, modality=modality)
    model = build_model(run, renderer).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    tok, max_len = ConceptTokenizer(), concept_max_len(bank)
    stream = StepBatchSampler(len(pool), batch, seed=0, start=0, stop=steps + 1)
    timer = Timer(device)
    for step, idx in enumerate(stream):
        if step == 1:  # the first step (lazy inits, allocator warm-up) is not counted
            timer = Timer(device)
        with timer("sample"):
            compact = compact_batch(pool, idx, tokenizer=tok, max_len=max_len)
        with timer("gather"):
            packed = pack_scenes(bank.scenes, compact["ids"].reshape(-1).numpy())
        with timer("render"):
            out = renderer.render_packed(packed)
        with timer("assemble"):
            b = render_batch(compact, _Done(renderer, out))
            b = {k: v for k, v in b.items() if k not in ("concept", "index")}
        _model_step(model, opt, b, device, amp, timer)
    return timer


def profile_loader(bank, modality: dict, batch: int, steps: int, workers: int, device, amp):
    """Data wait of `curi train`'s loader (`workers` processes) beside the model step.

    Returns:
        The per-phase host times (``data_wait``, ``model_step``) and the mean wall seconds
        of a step, GPU work included; the first step is not counted."""
    split = make_split(bank, "concept_iid")
    pool = EpisodeSampler(bank, split, "train", "hard", seed=0, size=100_000)
    renderer = make_renderer(modality)
    s = TrainSettings(steps=steps + 1, batch_size=batch, num_workers=workers)
    run = RunConfig(bank=bank.config, modality=modality, train=s)
    model = build_model(run, renderer).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    loader = train_loader(
        run, Runtime(device), pool, batch, start=0, renderer=renderer, max_len=concept_max_len(bank)
    )
    # No synchronisation per phase: the GPU runs step t while the host renders batch t + 1,
    # so "data_wait" is the host time blocked on the next batch, "model_step" the time to
    # queue the step; the steps' total wall time is taken with one synchronisation at the end.
    timer = Timer(device, sync=False)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    it = iter(loader)
    for step in range(steps + 1):
        if step == 1:
            sync()
            timer, t0 = Timer(device, sync=False), time.perf_counter()
        with timer("data_wait"):
            b = next(it)
        b = {k: v for k, v in b.items() if k not in ("concept", "index")}
        with timer("model_step"):
            _model_step(model, opt, b, device, amp, Timer(device, sync=False))
    sync()
    return timer, (time.perf_counter() - t0) / steps


def _value(text: str):
    """A command-line option value: a JSON number or boolean, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _fmt(name: str, timer: Timer, phases, batch: int) -> list[str]:
    wall = {p: statistics.median(timer.wall[p]) for p in phases if timer.wall[p]}
    cpu = {p: statistics.median(timer.cpu[p]) for p in phases if timer.cpu[p]}
    total = sum(wall.values())
    lines = [f"  {'phase':<12}{'wall ms':>10}{'share':>8}{'cpu ms':>10}"]
    for p in wall:
        lines.append(
            f"  {p:<12}{1e3 * wall[p]:>10.1f}{100 * wall[p] / total:>7.1f}%{1e3 * cpu[p]:>10.1f}"
        )
    lines.append(
        f"  {'step':<12}{1e3 * total:>10.1f}{'':>8}{1e3 * sum(cpu.values()):>10.1f}"
        f"   -> {batch / total:.3g} episodes/s ({name})"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modalities", nargs="+", default=["schema", "image", "sound"])
    ap.add_argument("--steps", type=int, default=5, help="timed steps (after one warm-up)")
    ap.add_argument("--batch", type=int, default=None, help="episodes per step (default: train)")
    ap.add_argument("--workers", type=int, default=2, help="loader workers (data-wait pass)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--render-device", default=None, help="modality.device (default: cpu)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    ap.add_argument("--bank", default="tiny")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--trace", default=None, help="folder for Chrome traces")
    ap.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        help="a renderer option, MODALITY.KEY=VALUE (image.width=120)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    amp = torch.bfloat16 if device.type == "cuda" else None
    bank = open_bank(args.bank, args.data_dir, progress=False, build=True)

    print(
        f"bank {bank.path.name} ({bank.num_scenes} scenes), device {device}, torch "
        f"{torch.__version__}, {args.threads} torch thread(s), amp {amp}"
    )
    for name in args.modalities:
        modality = {"name": name}
        if args.render_device:
            modality["device"] = args.render_device
        for opt in args.option:  # e.g. image.width=120
            key, _, value = opt.partition("=")
            mod, _, field = key.partition(".")
            if mod == name:
                modality[field] = _value(value)
        batch = args.batch or TrainSettings().batch_for(name)
        prof = (
            torch.profiler.profile(record_shapes=False) if args.trace else contextlib.nullcontext()
        )
        with prof:
            serial = profile_serial(bank, modality, batch, args.steps, device, amp)
        if args.trace:
            Path(args.trace).mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(Path(args.trace) / f"{name}.json"))
        print(f"\n{name}: {batch} episodes/step, median of {args.steps} steps, serial phases")
        print("\n".join(_fmt("serial", serial, PHASES, batch)))
        if args.workers >= 0:
            loop, per_step = profile_loader(
                bank, modality, batch, args.steps, args.workers, device, amp
            )
            print(f"{name}: training loader, {args.workers} workers (host time; no sync per step)")
            print("\n".join(_fmt("loader, host", loop, ("data_wait", "model_step"), batch)))
            print(
                f"  {'synced':<12}{1e3 * per_step:>10.1f} ms a step (mean, GPU work included)"
                f"   -> {batch / per_step:.3g} episodes/s"
            )


if __name__ == "__main__":
    main()
