"""Fine-tuning: classification, regression, tagging and extractive QA on ELECTRA.

Examples:
    >>> from keras_electra.finetuning import finetune
    >>> result = finetune("runs/demo", "classify", "train.csv", "dev.csv",
    ...                   "runs/cls")  # doctest: +SKIP
    >>> result.metrics  # doctest: +SKIP
    {'accuracy': 0.9, 'mcc': 0.8, 'f1': 0.9, 'num_examples': 200}
"""

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
