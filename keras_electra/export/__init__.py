"""Export trained models as SavedModels that TF Serving answers."""

from keras_electra.export.saved_model import (
    SIGNATURE_NAMES,
    ReplacedTokenModule,
    export_run,
    next_version,
)

__all__ = ["SIGNATURE_NAMES", "ReplacedTokenModule", "export_run", "next_version"]
