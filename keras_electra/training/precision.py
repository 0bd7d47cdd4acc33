"""Numeric precision of a training run: float32 or a Keras mixed-precision policy."""

from __future__ import annotations

import keras

from keras_electra.errors import ConfigError
from keras_electra.settings import PRECISIONS


def dtype_policy(precision: str) -> keras.DTypePolicy:
    """The Keras dtype policy of a ``--precision`` value.

    Mixed policies keep variables (and so checkpoints) in float32 and compute in
    bfloat16 or float16; the model keeps LayerNorm, the attention softmax, the
    logits and the losses in float32.

    Args:
        precision: ``float32``, ``mixed_bfloat16`` or ``mixed_float16``.

    Raises:
        ConfigError: for any other value.

    Examples:
        >>> dtype_policy("mixed_bfloat16").compute_dtype
        'bfloat16'
    """
    if precision not in PRECISIONS:
        raise ConfigError(
            f"Unknown precision '{precision}'; choose one of: {', '.join(PRECISIONS)}."
        )
    return keras.DTypePolicy(precision)


def needs_loss_scaling(precision: str) -> bool:
    """Whether gradients need dynamic loss scaling (float16's narrow exponent range).

    Examples:
        >>> needs_loss_scaling("mixed_float16"), needs_loss_scaling("mixed_bfloat16")
        (True, False)
    """
    return dtype_policy(precision).compute_dtype == "float16"
