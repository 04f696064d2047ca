"""The propose-and-verify learner's fallback model (docs/learners.md): the paper's schema
prototypical network with average pooling (section 4), trained by `curi.models.train.train` on
the learner's fitting concepts with its checkpoint chosen by val mAP on the held-out tenth, kept
inside the learner's checkpoint, and answering as a `Predict` the episodes where no program
survives nor nearly survives."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from curi import validate
from curi.atomic import remove
from curi.errors import ConfigError
from curi.models.learners import FALLBACK_POOLING
from curi.oracles.model_score import TargetCache
from curi.splits import Split

__all__ = ["FALLBACK_POOLING", "ProtonetPredict", "fallback_from_checkpoint", "train_fallback"]

log = logging.getLogger(__name__)


def train_fallback(
    bank, hold: Split, *, negatives: str, steps: int, batch: int, seed: int, val_episodes: int
) -> dict | None:
    """Train the fallback protonet for `steps` steps of `batch` episodes on ``hold.train``
    (the fitting concepts) and keep the state with the best val mAP on `val_episodes`
    episodes of ``hold.val`` (the held-out training concepts), checked four times. Val and
    test concepts of the split are never read: `hold` holds none.

    Returns:
        ``{"config", "state_dict", "model_sha256", "best_step", "best_map", "steps"}`` (the
        run config that rebuilds the model, `curi.models.config.RunConfig.to_dict`), or None
        when `steps` is 0 or there are no held-out concepts to choose on.

    Raises:
        ConfigError: `steps`, `batch` or `val_episodes` out of range.
    """
    from curi.models.checkpoint import load_checkpoint
    from curi.models.config import RunConfig
    from curi.models.train import train
    from curi.presets import load_preset
    from curi.splits.saved import save_split

    steps = validate.integer(steps, "learner.fallback_steps", low=0)
    if steps == 0:
        return None
    if len(hold.val) == 0:
        log.warning("no held-out training concepts to choose the fallback on: none trained")
        return None
    train_settings = {
        "steps": steps,
        "batch_size": validate.integer(batch, "learner.batch", low=1),
        "eval_every": max(1, steps // 4),
        "checkpoint_every": steps,
        "log_every": steps,
        "val_episodes": validate.integer(val_episodes, "val_episodes", low=1),
        "train_episodes": steps * batch,
        "num_workers": 0,
        "sampler": "loader",
    }
    tmp = Path(tempfile.mkdtemp(prefix="curi-pv-fallback-"))
    try:
        # the training command reads its split by name or file: the learner's own one saved
        name = hold.name.replace(":", "-")
        split_file = save_split(
            Split(name, hold.train, hold.val, hold.test, hold.dropped),
            bank,
            tmp / "split.json",
        )
        run = RunConfig.from_mapping(
            {
                "bank": dict(bank.config),
                "split": str(split_file),
                "negatives": negatives,
                "modality": load_preset("modality", "schema"),
                "pooling": load_preset("pooling", FALLBACK_POOLING),
                "train": train_settings,
                "seed": seed,
                "device": "cpu",
            }
        )
        summary = train(run, run_dir=tmp / "run", bank=bank, progress=False)
        payload, _ = load_checkpoint(tmp / "run")  # best.pt: the best val mAP
    finally:
        remove(tmp, root=tmp.parent)  # the split file and the protonet's run folder
    return {
        "config": {**payload["config"], "split": name},  # the file is gone; its name stays
        "state_dict": payload["model"],
        "model_sha256": payload["model_sha256"],
        "best_step": summary["best_step"],
        "best_map": summary["best_map"],
        "steps": steps,
    }


class ProtonetPredict:
    """A trained protonet as ``predict(support, support_labels, targets) -> (T,) scores``:
    p(positive) of each target scene from the squared distances to the support's two
    prototypes (`curi.models.protonet.ProtoNet.score`), in float64 so that scores saturate
    late. Scenes come as records (``{"objects": [...]}``), as `oracles.model_score` hands
    them; the embeddings of the last target set are kept (the evaluation set comes as the
    same object for every episode).

    Args:
        model: the trained `ProtoNet`.
        modality: the renderer config it was trained with (``schema``).
    """

    def __init__(self, model, modality: Mapping) -> None:
        from curi.models.data import make_renderer

        self.model = model.eval()
        self.renderer = make_renderer(modality)
        self._embeddings = TargetCache(self._embed)  # the evaluation set's, kept

    def _embed(self, records) -> torch.Tensor:
        if isinstance(records, Mapping):
            raise ConfigError(
                "the protonet fallback reads scene records ({'objects': [...]}), not object "
                "arrays: it needs the objects' positions"
            )
        try:
            r = self.renderer(list(records))
        except (ValueError, TypeError, KeyError) as e:
            raise ConfigError(f"the protonet fallback reads scene records: {e}") from None
        return self.model.embed(self.renderer.to_input(r.data), r.mask, chunk=512).float()

    @torch.inference_mode()
    def __call__(self, support, support_labels, targets) -> np.ndarray:
        from curi.models.evaluate import log_odds
        from curi.models.protonet import class_prototypes

        labels = torch.as_tensor(np.asarray(support_labels).astype(bool).reshape(1, -1))
        prototypes = class_prototypes(self._embed(support)[None], labels)  # (1, 2, E)
        odds = log_odds(prototypes, self._embeddings(targets))[0].double()  # (T,)
        return torch.sigmoid(odds).numpy()


def fallback_from_checkpoint(
    entry: Mapping, where: str = "the propose_verify checkpoint"
) -> ProtonetPredict:
    """The fallback a propose_verify checkpoint holds (``ckpt["fallback"]``), rebuilt from its
    run config and weights (`where` names the checkpoint in messages).

    Raises:
        ConfigError: weights that differ from their digest, or of another model than the
            config describes.
    """
    from curi.models.checkpoint import load_weights, state_digest
    from curi.models.config import RunConfig, build_model
    from curi.models.data import make_renderer

    if entry.get("model_sha256") != state_digest(entry["state_dict"]):
        raise ConfigError(
            f"the fallback model in {where} is damaged: its weights differ from their digest; "
            "train the learner again"
        )
    run = RunConfig.from_mapping(entry["config"])
    model = build_model(run, make_renderer(run.modality))
    load_weights(model, {"model": entry["state_dict"]}, Path(f"{where} (its fallback)"))
    return ProtonetPredict(model, run.modality)
