"""ELECTRA pretraining: the objective and the Keras model that trains it."""

from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.settings import OBJECTIVES

__all__ = ["OBJECTIVES", "ElectraPretrainer"]
