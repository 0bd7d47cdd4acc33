"""Mixed precision: which parts compute in float32, what a short run in each mixed
precision keeps (float32 weights, float16's loss scaling, a float32 restore and export, its
precision on resume), and a precision that does not exist. That the mixed-precision runs
learn as float32's do is tests/test_learning.py's (marked slow: emulated on most CPUs)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_RECIPE
from tfserving_standin import SignatureRunner

from keras_electra.config import ElectraConfig
from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError
from keras_electra.export import export
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.pretraining.run import load_run, pretrain

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


MIXED_STEPS = 8


@pytest.fixture(scope="module", params=["mixed_bfloat16", "mixed_float16"])
def mixed_run(request, small_corpus, tmp_path_factory):
    """A short run in each mixed precision (one layer, 8 steps)."""
    run_dir = tmp_path_factory.mktemp("mixed") / request.param
    settings = dict(FAST, steps=MIXED_STEPS, log_every=4)
    return pretrain([str(small_corpus)], run_dir, precision=request.param, **settings)


def test_a_mixed_run_keeps_float32_weights_and_scales_float16_losses(mixed_run):
    model = mixed_run.model
    policy = model.dtype_policy.name
    assert json.loads((mixed_run.run_dir / "run.json").read_text())["precision"] == policy
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    for v in model.trainable_variables:
        assert np.isfinite(v.numpy()).all(), v.path
    # float16 needs dynamic loss scaling (bfloat16 has float32's range): overflowing
    # steps are skipped, not applied, and the updates went through.
    scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (policy == "mixed_float16")
    if scaled:
        assert np.isfinite(float(model.optimizer.dynamic_scale.numpy()))
    assert int(model.optimizer.iterations.numpy()) >= MIXED_STEPS // 2
    assert all(np.isfinite(r["loss"]) for r in mixed_run.history)


def test_a_mixed_run_restores_and_exports_in_float32(mixed_run, tmp_path):
    model, tokenizer, step = load_run(mixed_run.run_dir)
    assert step == MIXED_STEPS and model.compute_dtype == "float32"
    for a, b in zip(mixed_run.model.trainable_variables, model.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    texts = np.array([b"the king is dead long live the king", b"good morrow"], object)
    with SignatureRunner(str(export(mixed_run.run_dir, tmp_path / "export"))) as runner:
        probs = runner.run("serving_default", {"text": texts})["replaced_prob"]
    assert probs.dtype == np.float32
    inputs = encode_texts(tokenizer, tf.constant(texts), max_length=probs.shape[1])
    expected = tf.sigmoid(model(inputs, training=False)).numpy() * inputs["padding_mask"].numpy()
    np.testing.assert_allclose(probs, expected, atol=1e-5)


def test_resuming_with_another_precision_is_refused(mixed_run, small_corpus):
    policy = mixed_run.model.dtype_policy.name
    with pytest.raises(ConfigError, match=f"precision='{policy}'"):
        settings = dict(FAST, steps=MIXED_STEPS + 1)
        pretrain([str(small_corpus)], mixed_run.run_dir, precision="float32", **settings)
    assert json.loads((mixed_run.run_dir / "run.json").read_text())["precision"] == policy
