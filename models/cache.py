"""A render cache for long runs (docs/benchmarks.md, "render cache"): every scene of a bank
rendered once into a memory-mapped uint8 array (``round(255 x)``) per modality and renderer
settings, beside a JSON header naming the bank's scenes (their checksums in the bank's
manifest) and those settings. Training reads scenes from it (`CachedScenes`) instead of
rendering them; a cache made for another bank or other settings is refused, never used."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from curi.atomic import atomic_path, owner_alive, remove, temporaries, write_text
from curi.errors import ConfigError
from curi.models.pipeline import host_ids
from curi.renderers import Renderer
from curi.renderers.base import pack_scenes, to_uint8

__all__ = ["CACHE_FORMAT", "CachedScenes", "RenderCache", "cache_identity", "open_render_cache"]

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
# Renderer options that do not change what is rendered (where and how many at once, which
# implementation of the same function): not part of a cache's identity.
_NOT_IDENTITY = frozenset({"device", "chunk", "backend"})


def _settings(renderer: Renderer, modality: Mapping) -> dict:
    """The renderer's output-defining options: its defaults, overridden by the modality."""
    sig = inspect.signature(type(renderer))
    opts = {
        n: p.default
        for n, p in sig.parameters.items()
        if p.default is not inspect.Parameter.empty and n not in _NOT_IDENTITY
    }
    opts.update({k: v for k, v in modality.items() if k not in _NOT_IDENTITY and k != "name"})
    return {"name": renderer.name, **dict(sorted(opts.items()))}


def cache_identity(bank, renderer: Renderer, modality: Mapping) -> dict:
    """What a cache must match: the bank's scenes (the SHA-256 of each scene file in its
    manifest), their number, the renderer's settings and the item shape."""
    files = bank.manifest["files"]
    scenes = {k: files[k]["sha256"] for k in sorted(files) if k.startswith("scenes/")}
    return {
        "format": CACHE_FORMAT,
        "bank": {
            "name": bank.config.get("name"),
            "num_scenes": bank.num_scenes,
            "scenes_sha256": scenes,
        },
        "renderer": _settings(renderer, modality),
        "item_shape": list(renderer.item_shape),
        "encoding": "uint8 round(255 x)",
    }


def _diff(a: Mapping, b: Mapping, where: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            out += _diff(x, y, f"{where}{k}.")
        elif x != y:
            out.append(f"{where}{k}")
    return out


class RenderCache:
    """An opened cache: ``array`` (N, *item_shape) uint8, memory-mapped read-only, and its
    ``header`` (`cache_identity`)."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path, self.header = path, header
        self.array = np.load(path / "scenes.npy", mmap_mode="r")

    def __len__(self) -> int:
        return len(self.array)


def _key(identity: dict) -> str:
    """The folder key: a hash of the renderer settings (not of the bank's checksums, so a
    bank rebuilt under the same name finds its old cache, and the mismatch is caught)."""
    blob = json.dumps([identity["renderer"], identity["item_shape"]], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _build(
    path: Path, bank, renderer: Renderer, identity: dict, *, chunk: int, progress: bool
) -> None:
    from tqdm import tqdm

    n, shape = bank.num_scenes, tuple(renderer.item_shape)
    need = n * int(np.prod(shape))
    path.mkdir(parents=True, exist_ok=True)
    for tmp in temporaries(path / "scenes.npy"):  # a build that was killed (tens of GB)
        if not owner_alive(tmp):
            remove(tmp, root=path, link=True)
    old = path / "scenes.npy"
    free = shutil.disk_usage(path).free + (old.stat().st_size if old.is_file() else 0)
    if need > free:
        raise ConfigError(
            f"a render cache of {need / 2**30:.1f} GiB does not fit in {path} "
            f"({free / 2**30:.1f} GiB free); set train.render_cache to another folder"
        )
    remove(path / "header.json", root=path, link=True)  # the header marks a complete cache
    with atomic_path(path / "scenes.npy") as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, *shape))
        bar = tqdm(
            total=n, desc=f"render cache ({renderer.name})", unit="scene", disable=not progress
        )
        for lo in range(0, n, chunk):
            ids = np.arange(lo, min(n, lo + chunk))
            x = renderer.render_packed(pack_scenes(bank.scenes, ids)).data
            u8 = to_uint8(x.float())
            out[lo : lo + len(ids)] = u8.cpu().numpy()
            bar.update(len(ids))
        bar.close()
        out.flush()
        del out
    write_text(path / "header.json", json.dumps(identity, indent=2) + "\n")
    log.info("render cache written to %s (%.2f GiB)", path, need / 2**30)


def open_render_cache(
    root: str | Path,
    bank,
    renderer: Renderer,
    modality: Mapping,
    *,
    rebuild: bool = False,
    chunk: int = 1024,
    progress: bool = True,
) -> RenderCache:
    """The render cache of `bank` in `renderer`'s settings under `root`, built when missing.

    The cache lives in ``<root>/<bank>-<modality>-<key>/`` (``scenes.npy``, ``header.json``),
    the key a hash of the renderer settings; building renders the bank's scenes `chunk` at a time
    on the renderer's device (CPU or GPU), with a progress bar.

    Args:
        root: folder of caches.
        bank: the `ConceptBank`.
        renderer: the modality's renderer (its output must lie in [0, 1]).
        modality: its config (``name`` and options), for the settings the header records.
        rebuild: rebuild a cache that does not match the bank or the settings, or is damaged.
        chunk: scenes rendered at once while building.
        progress: show a progress bar while building.

    Raises:
        ConfigError: a modality whose values are not in [0, 1] (schema: render it live);
            a cache made for another bank or other settings, or damaged, without `rebuild`;
            no room for it.
    """
    if tuple(renderer.value_range) != (0.0, 1.0):
        raise ConfigError(
            f"the render cache stores values in [0, 1] as uint8; {renderer.name} ranges over "
            f"{renderer.value_range} (it renders quickly: leave train.render_cache unset)"
        )
    identity = cache_identity(bank, renderer, modality)
    path = Path(root).expanduser() / f"{identity['bank']['name']}-{renderer.name}-{_key(identity)}"
    header = path / "header.json"
    if header.is_file():
        problem = _check(path, header, identity)
        if problem is None:
            return RenderCache(path, identity)
        if not rebuild:
            raise ConfigError(
                f"render cache {path} {problem}; rebuild it with train.render_cache_rebuild=true "
                "(or point train.render_cache elsewhere)"
            )
        log.warning("rebuilding render cache %s: it %s", path, problem)
    _build(path, bank, renderer, identity, chunk=chunk, progress=progress)
    return RenderCache(path, identity)


def _check(path: Path, header: Path, identity: dict) -> str | None:
    """Why the cache at `path` cannot serve `identity` (None: it can)."""
    try:
        saved = json.loads(header.read_text())
        arr = np.load(path / "scenes.npy", mmap_mode="r")
    except (OSError, ValueError) as e:
        return f"is damaged ({type(e).__name__}: {e})"
    diff = _diff(saved, identity)
    if diff:
        return f"was made for another bank or other settings (differs in {', '.join(diff)})"
    want = (identity["bank"]["num_scenes"], *identity["item_shape"])
    if arr.dtype != np.uint8 or arr.shape != want:
        return f"is damaged (scenes.npy is {arr.dtype} {arr.shape}, expected uint8 {want})"
    return None


class CachedScenes:
    """Scene ids -> model inputs read from a `RenderCache` (a `curi.models.pipeline`
    scene source): rows gathered from the memory map, copied to `device` as uint8 and
    decoded there to float32 ``x / 255`` in the renderer's input shape.

    Args:
        cache: the opened cache.
        renderer: the modality's renderer (for its input shape).
        device: where the tensors land.
    """

    def __init__(self, cache: RenderCache, renderer: Renderer, device: torch.device) -> None:
        self.cache, self.input_shape = cache, tuple(renderer.input_shape)
        self.device = torch.device(device)

    def __call__(self, ids: np.ndarray | Tensor) -> tuple[Tensor, None]:
        u8 = torch.from_numpy(self.cache.array[host_ids(ids)])  # (N, *item)
        if self.device.type == "cuda":
            u8 = u8.pin_memory()
        x = u8.to(self.device, non_blocking=True).float().div_(255.0)
        return x.reshape(len(x), *self.input_shape), None
