"""Export trained models as SavedModels that TF Serving answers: :func:`export`."""

from keras_electra.export.classifier import EXPORTABLE_TASKS, TextClassifierModule, finetuned_module
from keras_electra.export.qa import QuestionAnsweringModule
from keras_electra.export.run import export
from keras_electra.export.saved_model import SIGNATURE_NAMES, ReplacedTokenModule, next_version
from keras_electra.export.tagger import TextTaggerModule

__all__ = [
    "EXPORTABLE_TASKS",
    "SIGNATURE_NAMES",
    "QuestionAnsweringModule",
    "ReplacedTokenModule",
    "TextClassifierModule",
    "TextTaggerModule",
    "export",
    "finetuned_module",
    "next_version",
]
