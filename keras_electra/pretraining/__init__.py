"""ELECTRA pretraining: the objective and the Keras model that trains it."""

from keras_electra.pretraining.loading import load_run, save_run
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.settings import OBJECTIVES

__all__ = ["OBJECTIVES", "ElectraPretrainer", "load_run", "save_run"]
