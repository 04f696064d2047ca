"""Prototypical-network baselines for CURI (spec section 8): modality encoders, poolers, the
prototypical head and the concept decoder, each found by name through a small registry."""

from models.decoder import SPECIALS, ConceptDecoder, ConceptTokenizer
from models.encoders import (
    EncodedObjects,
    Encoder,
    ImageEncoder,
    SchemaEncoder,
    SoundEncoder,
    get_encoder,
    list_encoders,
    register_encoder,
)
from models.poolers import (
    AvgPooler,
    ConcatPooler,
    Pooler,
    RelationNetPooler,
    TransformerPooler,
    get_pooler,
    list_poolers,
    register_pooler,
)
from models.protonet import (
    ProtoNet,
    ProtoOutput,
    build_protonet,
    class_prototypes,
    count_parameters,
    prototype_logits,
)

__all__ = [
    "SPECIALS",
    "AvgPooler",
    "ConceptDecoder",
    "ConceptTokenizer",
    "ConcatPooler",
    "EncodedObjects",
    "Encoder",
    "ImageEncoder",
    "Pooler",
    "ProtoNet",
    "ProtoOutput",
    "RelationNetPooler",
    "SchemaEncoder",
    "SoundEncoder",
    "TransformerPooler",
    "build_protonet",
    "class_prototypes",
    "count_parameters",
    "get_encoder",
    "get_pooler",
    "list_encoders",
    "list_poolers",
    "prototype_logits",
    "register_encoder",
    "register_pooler",
]
