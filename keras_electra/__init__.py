"""keras-electra: ELECTRA pretraining, fine-tuning and TF Serving export for Keras 3."""

from keras_electra.keras_backend import use_tensorflow

use_tensorflow()  # before any module of the package imports keras

from keras_electra.config import PRESETS, ElectraConfig  # noqa: E402
from keras_electra.errors import ConfigError, ElectraError, InputDataError  # noqa: E402

__version__ = "0.3.0"

__all__ = ["PRESETS", "ConfigError", "ElectraConfig", "ElectraError", "InputDataError"]
