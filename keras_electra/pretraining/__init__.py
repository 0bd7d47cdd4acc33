"""ELECTRA pretraining: the objective and the Keras model that trains it."""

from keras_electra.pretraining.pretrainer import OBJECTIVES, ElectraPretrainer

__all__ = ["OBJECTIVES", "ElectraPretrainer"]
