"""Export trained models as SavedModels that TF Serving answers."""

from keras_electra.export.classifier import (
    EXPORTABLE_TASKS,
    TextClassifierModule,
    export_finetuned,
    export_run,
    finetuned_module,
)
from keras_electra.export.qa import QuestionAnsweringModule
from keras_electra.export.saved_model import (
    SIGNATURE_NAMES,
    ReplacedTokenModule,
    export_pretraining_run,
    next_version,
)
from keras_electra.export.tagger import TextTaggerModule

__all__ = [
    "EXPORTABLE_TASKS",
    "SIGNATURE_NAMES",
    "QuestionAnsweringModule",
    "ReplacedTokenModule",
    "TextClassifierModule",
    "TextTaggerModule",
    "export_finetuned",
    "export_pretraining_run",
    "export_run",
    "finetuned_module",
    "next_version",
]
