"""Electric's two-tower cloze generator: ``q(x_t | x_{\\t})`` from two causal towers.

A left-to-right tower reads positions ``< t`` and a right-to-left tower positions
``> t``; at position ``t`` the model concatenates the first tower's output at ``t - 1``
with the second's at ``t + 1`` (zeros past either end), so what it says about position
``t`` never depends on the token there (Clark et al., 2020, "Pre-Training Transformers as
Energy-Based Cloze Models", section 3.2). A masked-LM head on that ``2 x hidden``-wide
output gives the cloze distribution at every position in one pass, from the unmasked text.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_electra.config import ElectraConfig
from keras_electra.layers.backbone import ElectraBackbone


def shift(sequence: tf.Tensor, steps: int) -> tf.Tensor:
    """``sequence`` ``[batch, length, width]`` moved ``steps`` positions along the length
    (right for ``steps > 0``), zeros where nothing moved in.

    Examples:
        >>> x = tf.reshape(tf.range(1.0, 4.0), [1, 3, 1])
        >>> shift(x, 1)[0, :, 0].numpy().tolist(), shift(x, -1)[0, :, 0].numpy().tolist()
        ([0.0, 1.0, 2.0], [2.0, 3.0, 0.0])
    """
    length = tf.shape(sequence)[1]
    zeros = tf.zeros_like(sequence[:, : abs(steps)])
    if steps > 0:
        return tf.concat([zeros, sequence[:, : length - steps]], axis=1)
    return tf.concat([sequence[:, -steps:], zeros], axis=1)


@keras.saving.register_keras_serializable(package="keras_electra")
class TwoTowerCloze(keras.Model):
    """The cloze generator's two causal towers (generator-sized, on a shared embedding).

    Returns ``[batch, length, 2 x generator hidden]``: at position ``t`` the
    left-to-right tower's output at ``t - 1`` and the right-to-left tower's at ``t + 1``.
    It reads the original (unmasked) tokens.

    Args:
        config: the :class:`ElectraConfig` (the generator's sizes).
        embedding: the embedding layer both towers call.

    Examples:
        >>> import numpy as np
        >>> config = ElectraConfig.from_preset("tiny", vocab_size=50, num_layers=1)
        >>> ids = np.ones((2, 6), "int32")
        >>> cloze = TwoTowerCloze(config)
        >>> tuple(cloze({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids}).shape)
        (2, 6, 64)
    """

    #: It reads the original text (a masked LM generator reads the masked one).
    reads_masked_text = False

    def __init__(
        self, config: ElectraConfig | dict, embedding: keras.layers.Layer | None = None, **kwargs
    ):
        kwargs.setdefault("name", "generator")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = ElectraConfig.from_dict(config)
        self.config = config
        self.hidden_dim = 2 * config.generator_config().hidden_size

        # === Layers ===
        args = dict(embedding=embedding, dtype=self.dtype_policy)
        self.left_to_right = ElectraBackbone(
            config, "generator", direction="left_to_right", name="generator_left_to_right", **args
        )
        if embedding is None:  # both towers read one block
            args["embedding"] = self.left_to_right.embedding
        self.right_to_left = ElectraBackbone(
            config, "generator", direction="right_to_left", name="generator_right_to_left", **args
        )
        self.built = True

    def call(self, inputs, training=None):
        forward = self.left_to_right(inputs, training=training)
        backward = self.right_to_left(inputs, training=training)
        return tf.concat([shift(forward, 1), shift(backward, -1)], axis=-1)

    # === Config ===
    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}
