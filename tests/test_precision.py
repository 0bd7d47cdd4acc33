"""Mixed precision: bfloat16 and float16 runs train, checkpoint and export in float32."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
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


@pytest.fixture(scope="module")
def runs(small_corpus, tmp_path_factory):
    """One short run per mixed precision, built once."""
    base = tmp_path_factory.mktemp("precision")
    return {
        p: pretrain([str(small_corpus)], base / p, precision=p, **FAST)
        for p in ("mixed_bfloat16", "mixed_float16")
    }


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_run_trains_with_finite_metrics(runs, precision):
    result = runs[precision]
    assert [r["step"] for r in result.history] == [2, 4]
    for record in result.history:
        assert all(np.isfinite(v) for v in record.values()), record
    model = result.model
    assert model.dtype_policy.name == precision
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    settings = json.loads((result.run_dir / "run.json").read_text())
    assert settings["precision"] == precision


def test_float16_uses_dynamic_loss_scaling_and_still_updates(runs):
    model = runs["mixed_float16"].model
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert np.isfinite(float(optimizer.dynamic_scale.numpy()))
    # Overflowing steps are skipped, not applied: at least one update went through.
    assert int(optimizer.iterations.numpy()) >= 1
    for v in model.trainable_variables:
        assert np.isfinite(v.numpy()).all(), v.path


def test_layer_norm_softmax_and_logits_stay_float32():
    config = ElectraConfig.from_preset("tiny", vocab_size=100, num_layers=1)
    model = ElectraPretrainer(config, seed=0, dtype="mixed_bfloat16")
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


def test_resuming_with_another_precision_is_refused(runs, small_corpus):
    with pytest.raises(ConfigError, match="precision='mixed_bfloat16'"):
        pretrain([str(small_corpus)], runs["mixed_bfloat16"].run_dir, precision="float32", **FAST)


def test_bfloat16_run_restores_and_exports_in_float32(runs, tmp_path):
    result = runs["mixed_bfloat16"]
    model, tokenizer, step = load_run(result.run_dir)
    assert step == 4 and model.compute_dtype == "float32"
    for a, b in zip(result.model.trainable_variables, model.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    export_dir = export(result.run_dir, tmp_path / "saved")
    runner = SignatureRunner(str(export_dir))
    try:
        sentences = ["The king is dead, long live the king."]
        got = runner.run("serving_default", {"text": np.array([s.encode() for s in sentences])})
    finally:
        runner.close()
    assert got["replaced_prob"].dtype == np.float32
    inputs = encode_texts(tokenizer, tf.constant(sentences), max_length=32)
    expected = tf.sigmoid(model(inputs, training=False)).numpy() * inputs["padding_mask"].numpy()
    np.testing.assert_allclose(got["replaced_prob"], expected, atol=1e-5)
