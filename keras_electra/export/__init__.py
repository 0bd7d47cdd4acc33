"""Export trained models as SavedModels that TF Serving answers."""

from keras_electra.export.classifier import (
    TextClassifierModule,
    export_finetuned,
    export_run,
)
from keras_electra.export.saved_model import (
    SIGNATURE_NAMES,
    ReplacedTokenModule,
    next_version,
)

__all__ = [
    "SIGNATURE_NAMES",
    "ReplacedTokenModule",
    "TextClassifierModule",
    "export_finetuned",
    "export_run",
    "next_version",
]
