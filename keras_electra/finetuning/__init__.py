"""Fine-tuning: classification, regression, tagging and extractive QA (docs/finetuning.md)."""

from keras_electra.finetuning.layerwise import (
    LayerwiseAdamW,
    create_finetune_optimizer,
    layer_factor,
    layerwise_factors,
)
from keras_electra.finetuning.models import (
    ElectraClassifier,
    ElectraRegressor,
    ElectraSpanExtractor,
    ElectraTagger,
    MaskedSparseCrossentropy,
)
from keras_electra.finetuning.run import finetune, predict_file
from keras_electra.finetuning.saved import (
    FinetunedModel,
    is_finetuned_dir,
    load_finetuned,
    save_finetuned,
)
from keras_electra.finetuning.settings import TASKS, FinetuneSettings, recipe_defaults
from keras_electra.finetuning.source import load_backbone
from keras_electra.finetuning.tasks import encode_pairs, get_task

__all__ = [
    "TASKS",
    "ElectraClassifier",
    "ElectraRegressor",
    "ElectraSpanExtractor",
    "ElectraTagger",
    "FinetuneSettings",
    "FinetunedModel",
    "LayerwiseAdamW",
    "MaskedSparseCrossentropy",
    "create_finetune_optimizer",
    "encode_pairs",
    "finetune",
    "get_task",
    "is_finetuned_dir",
    "layer_factor",
    "layerwise_factors",
    "load_backbone",
    "load_finetuned",
    "predict_file",
    "recipe_defaults",
    "save_finetuned",
]
