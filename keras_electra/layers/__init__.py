"""Keras layers of the ELECTRA generator and discriminator."""

from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.layers.embedding import ElectraEmbedding, GdesEmbedding
from keras_electra.layers.encoder import ElectraEncoder
from keras_electra.layers.heads import DiscriminatorHead, GeneratorHead

__all__ = [
    "DiscriminatorHead",
    "ElectraBackbone",
    "ElectraEmbedding",
    "ElectraEncoder",
    "GdesEmbedding",
    "GeneratorHead",
]
