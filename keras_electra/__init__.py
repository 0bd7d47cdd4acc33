"""keras-electra: ELECTRA pretraining, fine-tuning and TF Serving export for Keras 3."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_electra.config import PRESETS, ElectraConfig  # noqa: E402
from keras_electra.errors import ConfigError, ElectraError, InputDataError  # noqa: E402

__version__ = "0.1.0"

__all__ = ["PRESETS", "ConfigError", "ElectraConfig", "ElectraError", "InputDataError"]
