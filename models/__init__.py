"""Prototypical-network baselines for CURI (paper Appendix E): modality encoders, poolers, the
prototypical head and the concept decoder, each found by name through a small registry; the
episode Dataset that renders a modality, the runtime (device, DDP, AMP), training and
evaluation."""

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
from curi.models.scoring import score_model

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
    "score_model",
    "start_runtime",
    "write_metrics",
]
