"""AdamW with layer-wise learning-rate decay, as ELECTRA fine-tunes (the rule: docs/finetuning.md).

The factor scales the learning rate inside the update, and so the decoupled weight decay:
scaling gradients would do nothing, Adam's update being invariant to their scale.
"""

from __future__ import annotations

import keras

from keras_electra import internals
from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.training.optimizer import AdamW, adamw_arguments


def layer_factor(depth: int, num_layers: int, decay: float) -> float:
    """Learning-rate factor at ``depth``: 0 = embeddings, ``i + 1`` = layer ``i``, ``L + 1`` = head.

    Examples:
        >>> [round(layer_factor(d, 2, 0.5), 3) for d in (0, 1, 2, 3)]
        [0.125, 0.25, 0.5, 1.0]
    """
    return float(decay ** (num_layers + 1 - depth))


def layerwise_factors(backbone: ElectraBackbone, decay: float) -> dict[str, float]:
    """Learning-rate factor of every backbone variable by path, for a per-layer ``decay``
    (1 disables); variables not listed (the task head) keep factor 1."""
    layers = backbone.encoder.transformer_layers
    bottom = [(0, backbone.embedding), (0, backbone.encoder.projection)]
    depths = [*bottom, *((i + 1, layer) for i, layer in enumerate(layers))]
    return {
        v.path: layer_factor(depth, len(layers), decay)
        for depth, layer in depths
        if layer is not None
        for v in layer.trainable_variables
    }


@keras.saving.register_keras_serializable(package="keras_electra")
class LayerwiseAdamW(AdamW):
    """AdamW whose learning rate (and weight decay) is scaled per variable.

    Args:
        factors: variable path -> learning-rate factor (see :func:`layerwise_factors`);
            other variables use factor 1.
        **kwargs: :class:`keras.optimizers.AdamW` arguments (the update is the fused
            :class:`~keras_electra.training.optimizer.AdamW`'s).

    Examples:
        >>> import numpy as np
        >>> v = keras.Variable(np.ones(2, "float32"), name="w")
        >>> opt = LayerwiseAdamW({v.path: 0.5}, learning_rate=0.1, weight_decay=0.0)
        >>> _ = opt.apply_gradients([(np.ones(2, "float32"), v)])
        >>> [round(float(x), 4) for x in v.numpy()]  # one Adam step moves lr * 0.5
        [0.95, 0.95]
    """

    def __init__(self, factors: dict[str, float] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.factors = dict(factors or {})
        self._factor_list: list[float] = []

    def build(self, var_list):
        super().build(var_list)
        self._factor_list = [self.factors.get(v.path, 1.0) for v in var_list]

    def _rate_factor(self, variable) -> float:
        return self._factor_list[internals.variable_index(self, variable)]

    def get_config(self):
        return {**super().get_config(), "factors": self.factors}


def create_finetune_optimizer(
    model: keras.Model,
    backbone: ElectraBackbone,
    *,
    learning_rate: float,
    total_steps: int,
    warmup_fraction: float = 0.1,
    layer_decay: float = 0.8,
    weight_decay: float = 0.01,
    clip_norm: float | None = 1.0,
    bias_correction: bool = True,
) -> LayerwiseAdamW:
    """ELECTRA's fine-tuning optimizer for ``model`` (``backbone`` plus head): layer-wise
    AdamW (:func:`~keras_electra.training.optimizer.adamw_arguments`) whose head peaks at
    ``learning_rate`` after ``warmup_fraction`` of ``total_steps``, then decays to 0 at the
    last; no weight decay on LayerNorm parameters and biases; ``clip_norm`` None: no clip;
    ``bias_correction`` False: google-research/electra's update (:class:`AdamW`)."""
    warmup = int(round(warmup_fraction * total_steps))
    arguments = adamw_arguments(
        learning_rate, total_steps, warmup, weight_decay, clip_norm, bias_correction
    )
    return LayerwiseAdamW(layerwise_factors(backbone, layer_decay), **arguments)
