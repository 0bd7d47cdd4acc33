"""Mixed precision: which parts compute in float32, and a precision that does not exist.

The mixed-precision runs themselves (they learn, keep float32 weights, scale float16's
losses, restore and export in float32, refuse another precision on resume) are
tests/test_learning_mixed.py's."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_RECIPE

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.pretraining.run import pretrain

FAST = dict(
    steps=4,
    log_every=2,
    batch_size=8,
    max_seq_length=32,
    vocab_size=2000,
    progress=False,
    config_overrides={"num_layers": 1},
)


def test_layer_norm_softmax_and_logits_stay_float32():
    config = ElectraConfig.from_preset("tiny", vocab_size=100, num_layers=1)
    model = ElectraPretrainer(config, seed=0, dtype="mixed_bfloat16", hyperparameters=TINY_RECIPE)
    layer = model.discriminator.encoder.transformer_layers[0]
    assert layer.compute_dtype == "bfloat16"
    # The attention's softmax is computed in float32 (tests/test_attention.py) and its
    # probabilities returned in the compute dtype.
    x = tf.random.normal([2, 16, config.hidden_size])
    _, probs = layer._self_attention_layer(x, return_attention_scores=True)
    assert probs.dtype == tf.bfloat16
    ids = np.random.default_rng(0).integers(5, 100, (2, 16)).astype("int32")
    out = model.compute_objective(
        {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": 0 * ids}
    )
    assert out.tokens["disc_logits"].dtype == tf.float32 and out.losses["loss"].dtype == tf.float32


def test_unknown_precision_is_one_sentence(small_corpus, tmp_path):
    with pytest.raises(ConfigError, match="Unknown precision 'fp8'"):
        pretrain([str(small_corpus)], tmp_path / "r", precision="fp8", **FAST)
