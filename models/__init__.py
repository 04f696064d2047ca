"""Prototypical-network baselines for CURI (paper Appendix E): modality encoders, poolers, the
prototypical head and the concept decoder, each found by name through a small registry; the
episode Dataset that renders a modality, the runtime (device, DDP, AMP), training and
evaluation."""

from typing import TYPE_CHECKING

from curi.lazy import lazy_names

# Each public name is imported from its module on first use, so that a command's module
# (`curi.models.cli`) can check its config before torch is imported.
_EXPORTS = {
    "curi.models.checkpoint": ["load_checkpoint"],
    "curi.models.config": ["RunConfig", "TrainSettings", "build_model"],
    "curi.models.data": [
        "EpisodeDataset",
        "EvalSceneDataset",
        "StepBatchSampler",
        "collate_episodes",
        "concept_max_len",
        "encoder_options",
        "make_renderer",
    ],
    "curi.models.decoder": ["SPECIALS", "ConceptDecoder", "ConceptTokenizer"],
    "curi.models.encoders": [
        "EncodedObjects",
        "Encoder",
        "ImageEncoder",
        "SchemaEncoder",
        "SoundEncoder",
        "get_encoder",
        "list_encoders",
        "register_encoder",
    ],
    "curi.models.evaluate": ["evaluate_checkpoint", "evaluate_episodes", "write_metrics"],
    "curi.models.poolers": [
        "AvgPooler",
        "ConcatPooler",
        "Pooler",
        "RelationNetPooler",
        "TransformerPooler",
        "get_pooler",
        "list_poolers",
        "register_pooler",
    ],
    "curi.models.protonet": [
        "ProtoNet",
        "ProtoOutput",
        "build_protonet",
        "class_prototypes",
        "count_parameters",
        "prototype_logits",
    ],
    "curi.models.runtime": ["Runtime", "resolve_device", "start_runtime"],
    "curi.models.scoring": ["score_in_modality"],
}
__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names, for type checkers and editors
    from curi.models.checkpoint import load_checkpoint
    from curi.models.config import RunConfig, TrainSettings, build_model
    from curi.models.data import (
        EpisodeDataset,
        EvalSceneDataset,
        StepBatchSampler,
        collate_episodes,
        concept_max_len,
        encoder_options,
        make_renderer,
    )
    from curi.models.decoder import SPECIALS, ConceptDecoder, ConceptTokenizer
    from curi.models.encoders import (
        EncodedObjects,
        Encoder,
        ImageEncoder,
        SchemaEncoder,
        SoundEncoder,
        get_encoder,
        list_encoders,
        register_encoder,
    )
    from curi.models.evaluate import evaluate_checkpoint, evaluate_episodes, write_metrics
    from curi.models.poolers import (
        AvgPooler,
        ConcatPooler,
        Pooler,
        RelationNetPooler,
        TransformerPooler,
        get_pooler,
        list_poolers,
        register_pooler,
    )
    from curi.models.protonet import (
        ProtoNet,
        ProtoOutput,
        build_protonet,
        class_prototypes,
        count_parameters,
        prototype_logits,
    )
    from curi.models.runtime import Runtime, resolve_device, start_runtime
    from curi.models.scoring import score_in_modality

__all__ = [
    "SPECIALS",
    "AvgPooler",
    "ConcatPooler",
    "ConceptDecoder",
    "ConceptTokenizer",
    "EncodedObjects",
    "Encoder",
    "EpisodeDataset",
    "EvalSceneDataset",
    "ImageEncoder",
    "Pooler",
    "ProtoNet",
    "ProtoOutput",
    "RelationNetPooler",
    "RunConfig",
    "Runtime",
    "SchemaEncoder",
    "SoundEncoder",
    "StepBatchSampler",
    "TrainSettings",
    "TransformerPooler",
    "build_model",
    "build_protonet",
    "class_prototypes",
    "collate_episodes",
    "concept_max_len",
    "count_parameters",
    "encoder_options",
    "evaluate_checkpoint",
    "evaluate_episodes",
    "get_encoder",
    "get_pooler",
    "list_encoders",
    "list_poolers",
    "load_checkpoint",
    "make_renderer",
    "prototype_logits",
    "register_encoder",
    "register_pooler",
    "resolve_device",
    "score_in_modality",
    "start_runtime",
    "write_metrics",
]
