"""What a concept bank is made of (`BankConfig`, its identity and checks), where banks live
(`default_data_dir`, `data_root`), and the check of a bank's manifest against them
(`checked_manifest`), shared by the builder and the loader (`curi.bank`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from curi import validate
from curi.bank_format import MANIFEST, REBUILD, check_files, check_manifest
from curi.concepts import MAX_NESTING
from curi.errors import BankError, ConfigError, known_options
from curi.executor import LOCATION_BINS
from curi.paths import as_folder, safe_name
from curi.presets import load_preset
from curi.scenes import LAYOUTS, NUM_BINS, Camera
from curi.validate import MAX_SEED

__all__ = [
    "LATER_OPTIONS",
    "MAX_NAME_CHARS",
    "BankConfig",
    "checked_manifest",
    "data_root",
    "default_data_dir",
]

#: Longest bank name: it becomes a folder name, and ``.<name>.lock`` and ``.<name>.tmp-<pid>``
#: beside it must stay under the file systems' 255 bytes.
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class BankConfig:
    """What a bank is made of. Every field but `workers` is part of the bank's identity.

    Attributes:
        name: directory name of the bank under the data directory (a plain name of at most
            `MAX_NAME_CHARS` characters, `curi.paths.safe_name`).
        num_scenes: scenes in the universe U (paper: about 1,000,000).
        num_draws: grammar draws (paper: 2,000,000).
        seed: the seed of every random choice.
        max_depth: depth at which a non-terminal may no longer be expanded (6, START at
            depth 0: docs/concepts.md, "Grammar"; 5 reads the paper's "no node deeper than 6"
            with the root at depth 1 and leaves counted, which reproduces the original
            release's split sizes: `paper_legacy`, docs/fidelity.md section 4).
        attempts: attempts per failed child (12).
        min_positives: keep a concept only if it holds on at least this many scenes (11: "more
            than 10", so support and query can each get 5 distinct positives).
        max_fraction: keep a concept only if it holds on fewer than this share of scenes (0.1).
        eval_per_concept: positives per concept in the mAP evaluation set (3).
        image_width, image_height: the camera's image size that defines location bins.
        location_bins: ``spec`` (bins 1..8, docs/concepts.md, "Semantics") or ``legacy``
            (location literals read as the original release's 0..7 bins:
            `curi.executor.LOCATION_BINS`; the `paper_legacy` preset, docs/fidelity.md).
        layout: scene layout, ``spec`` or ``clevr`` (CLEVR's directional margin as well;
            `curi.scenes.LAYOUTS`; docs/concepts.md, "Scenes").
        workers: processes that execute concepts (0: one per CPU core).
    """

    name: str = "default"
    num_scenes: int = 200_000
    num_draws: int = 500_000
    seed: int = 0
    max_depth: int = 6
    attempts: int = 12
    min_positives: int = 11
    max_fraction: float = 0.1
    eval_per_concept: int = 3
    image_width: int = 240
    image_height: int = 160
    location_bins: str = "spec"
    layout: str = "spec"
    workers: int = 0

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> BankConfig:
        """Build from a mapping (e.g. a Hydra node); unknown keys are an error."""
        out = cls(**known_options(cls, cfg, "bank"))
        out.check()
        return out

    @classmethod
    def preset(cls, preset: str, /, **overrides) -> BankConfig:
        """A bank preset by name (``tiny``, ``default``, ``paper``: the files of `conf/bank`),
        with any field overridden, e.g. ``BankConfig.preset("tiny", workers=1)``.

        Raises:
            ConfigError: an unknown preset (the message lists the known ones) or field.
        """
        return cls.from_mapping({**load_preset("bank", preset), **overrides})

    def check(self) -> None:
        """Raise ConfigError for values out of range (one message naming the key, the value
        and the allowed range), and store integral values as ints.

        The bounds: below depth 4 the grammar finishes no draw and deeper than
        `curi.concepts.MAX_NESTING` + 1 the parser refuses what it draws; location bins need
        at least `NUM_BINS` pixels a side; a concept must be able to hold on `min_positives`
        scenes yet on fewer than `max_fraction` of them; the upper bounds of the sizes keep
        a bank's truth matrix in memory (10 times the paper's scenes and 50 times its draws).
        """
        ints = {
            "num_scenes": (10, 10**7),
            "num_draws": (1, 10**8),
            "seed": (0, MAX_SEED),
            "max_depth": (4, MAX_NESTING + 1),
            "attempts": (1, 100),
            "min_positives": (1, 10**7),
            "eval_per_concept": (1, 1000),
            "image_width": (NUM_BINS, 16384),
            "image_height": (NUM_BINS, 16384),
            "workers": (0, 1024),
        }
        safe_name(self.name, "bank name")
        if len(self.name) > MAX_NAME_CHARS:
            raise ConfigError(
                f"bank name has {len(self.name)} characters; use at most {MAX_NAME_CHARS} (it "
                "becomes a folder name, and file systems refuse names over 255 bytes)"
            )
        for key, (low, high) in ints.items():
            value = validate.integer(getattr(self, key), f"bank.{key}", low=low, high=high)
            object.__setattr__(self, key, value)  # frozen: 2.0 -> 2, the same identity
        validate.choice(self.location_bins, "bank.location_bins", LOCATION_BINS)
        validate.choice(self.layout, "bank.layout", LAYOUTS)
        frac = validate.number(self.max_fraction, "bank.max_fraction", low=0, high=1, open_low=True)
        object.__setattr__(self, "max_fraction", frac)
        if self.min_positives >= int(np.ceil(frac * self.num_scenes)):
            raise ConfigError(
                f"bank.min_positives={self.min_positives} leaves no concept: it must be below "
                f"bank.max_fraction * bank.num_scenes = {frac * self.num_scenes:g}"
            )

    def identity(self) -> dict:
        """The fields that determine the bank's content. Options added after banks were
        first published (`LATER_OPTIONS`) are left out at their default, so a bank built
        before they existed keeps its identity and is reused."""
        d = dataclasses.asdict(self)
        d.pop("workers")
        for key, default in LATER_OPTIONS.items():
            if d[key] == default:
                del d[key]
        return d

    @property
    def camera(self) -> Camera:
        return Camera(width=self.image_width, height=self.image_height)


#: Bank options a manifest leaves out at their default (`BankConfig.identity`).
LATER_OPTIONS = {"location_bins": "spec", "layout": "spec"}

_CONFIG_TYPES = {
    f.name: type(f.default) for f in dataclasses.fields(BankConfig) if f.name != "workers"
}


def _config_types(manifest: object) -> dict[str, type]:
    """The identity fields a manifest's config must hold: every one, less the later options
    it leaves out (at their default, see `BankConfig.identity`)."""
    config = manifest.get("config") if isinstance(manifest, dict) else None
    held = config if isinstance(config, dict) else {}
    return {k: t for k, t in _CONFIG_TYPES.items() if k not in LATER_OPTIONS or k in held}


def default_data_dir() -> Path:
    """``$CURI_DATA_DIR``, else the user cache folder (``$XDG_CACHE_HOME/curi``)."""
    if os.environ.get("CURI_DATA_DIR"):
        return Path(os.environ["CURI_DATA_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "curi"


def data_root(data_dir: str | Path | None) -> Path:
    """The data folder `data_dir` names (None: `default_data_dir()`).

    Raises:
        BankError: an empty name (the working directory) or a file where the folder goes.
    """
    if data_dir is None:
        return default_data_dir()
    return as_folder(data_dir, "data_dir", BankError)


def checked_manifest(path: Path, raw: object, *, verify: bool) -> dict:
    """`raw`, the parsed manifest of the bank at `path`, once it and the files it lists pass
    every check (`curi.bank_format.check_manifest` and `check_files`) and its config passes the
    builder's own (`BankConfig.check`: a bank is never read by a config it could not have been
    built from).

    Raises:
        BankError: naming what is wrong.
    """
    manifest = check_manifest(path, raw, _config_types(raw))
    try:
        BankConfig(**manifest["config"]).check()
    except ConfigError as e:
        raise BankError(
            f"bank at {path} is damaged: its {MANIFEST} states a config the builder refuses "
            f"({e}); {REBUILD}"
        ) from None
    check_files(path, manifest, verify=verify)
    return manifest
