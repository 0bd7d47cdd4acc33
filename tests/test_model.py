"""Config, layers and the pretrainer model: sizes, sharing, serialization."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import GRADIENT_NORMS, METRICS, TINY_RECIPE

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.layers import ElectraBackbone
from keras_electra.pretraining import ElectraPretrainer
from keras_electra.pretraining.pretrainer import gradient_parts


def small_config(**kw):
    # The paper's full sharing (the tiny preset's own default is GDES, tested in
    # test_embedding_sharing.py).
    kw.setdefault("embedding_sharing", "all")
    return ElectraConfig.from_preset("tiny", vocab_size=60, num_layers=1, **kw)


def batch(seed=0, b=4, length=16, vocab=60):
    ids = np.random.default_rng(seed).integers(5, vocab, (b, length)).astype("int32")
    ids[:, 0] = 2
    ids[:, -1] = 3
    return {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}


def test_a_batch_under_the_old_feature_names_gets_one_sentence():
    model = ElectraPretrainer(small_config(), seed=0, hyperparameters=TINY_RECIPE)
    old = batch()
    old["input_ids"], old["input_mask"] = old.pop("token_ids"), old.pop("padding_mask")
    with pytest.raises(ValueError) as caught:
        model.compute_objective(old)
    assert str(caught.value) == (
        "A pretraining batch holds token_ids, segment_ids, padding_mask; this one has no "
        "token_ids, padding_mask (earlier versions named them input_ids and input_mask)."
    )


def test_config_json_round_trip(tmp_path):
    config = ElectraConfig.from_preset("base", vocab_size=1234)
    assert ElectraConfig.from_json(config.to_json()) == config
    config.save(tmp_path / "config.json")
    assert ElectraConfig.load(tmp_path / "config.json") == config
    assert json.loads((tmp_path / "config.json").read_text())["hidden_size"] == 768


@pytest.mark.parametrize(
    "preset, disc, gen",
    [
        ("small", (256, 12, 4, 1024), (64, 12, 1, 256)),
        ("base", (768, 12, 12, 3072), (256, 12, 4, 1024)),
        ("large", (1024, 24, 16, 4096), (256, 24, 4, 1024)),
    ],
)
def test_presets_match_the_paper(preset, disc, gen):
    config = ElectraConfig.from_preset(preset)
    d, g = config.discriminator_config(), config.generator_config()
    assert (d.hidden_size, d.num_layers, d.num_heads, d.intermediate_size) == disc
    assert (g.hidden_size, g.num_layers, g.num_heads, g.intermediate_size) == gen
    assert config.vocab_size == 30522 and config.max_position_embeddings == 512
    assert config.embedding_size == {"small": 128, "base": 768, "large": 1024}[preset]


def test_generator_sizing_rule():
    config = ElectraConfig.from_preset("base", generator_hidden_size=1.0, generator_layers=0.5)
    g = config.generator_config()
    assert (g.hidden_size, g.num_heads, g.intermediate_size, g.num_layers) == (768, 12, 3072, 6)


def test_bad_config_values_raise_one_sentence():
    with pytest.raises(ConfigError, match="divisible"):
        ElectraConfig(hidden_size=100, num_heads=3)
    with pytest.raises(ConfigError, match="Unknown ElectraConfig field"):
        ElectraConfig.from_dict({"hidden": 3})
    with pytest.raises(ConfigError, match="Unknown preset 'huge'"):
        ElectraConfig.from_preset("huge")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ElectraConfig.from_json("{")


def test_generator_and_discriminator_share_the_embedding_variables():
    model = ElectraPretrainer(small_config(), seed=0, hyperparameters=TINY_RECIPE)
    assert model.generator.embedding is model.discriminator.embedding
    ids = {id(v) for v in model.embedding.trainable_variables}
    assert len(ids) == 5  # word, position, segment, LayerNorm gamma and beta
    # The generator's output projection is the word-embedding matrix itself.
    assert model.generator_head.token_embedding is model.embedding.token_embedding
    # Variables are not duplicated by the sharing.
    all_ids = [id(v) for v in model.trainable_variables]
    assert len(all_ids) == len(set(all_ids))
    # Each tower projects from the embedding size to its own hidden size.
    assert model.generator.encoder.projection is not None  # 64 != 128
    assert model.discriminator.encoder.projection is None  # 128 == 128


def test_embeddings_get_gradients_from_both_losses():
    model = ElectraPretrainer(small_config(), seed=0, hyperparameters=TINY_RECIPE)
    word = model.embedding.token_embedding.embeddings
    data = batch()
    for loss_name in ("mlm_loss", "disc_loss"):
        with tf.GradientTape() as tape:
            loss = model.compute_objective(data, training=True).losses[loss_name]
        grad = tape.gradient(loss, word)
        assert grad is not None and float(tf.norm(tf.convert_to_tensor(grad))) > 0


def test_total_loss_is_mlm_plus_weighted_disc():
    model = ElectraPretrainer(
        small_config(dropout=0.0), seed=0, hyperparameters={**TINY_RECIPE, "disc_weight": 50.0}
    )
    out = model.compute_objective(batch(), training=False)
    expected = float(out.losses["mlm_loss"]) + 50.0 * float(out.losses["disc_loss"])
    assert float(out.losses["loss"]) == pytest.approx(expected, rel=1e-5)


def test_corrective_lm_adds_its_loss_and_trains_the_discriminator_only():
    config = small_config(dropout=0.0)
    model = ElectraPretrainer(
        config, seed=0, hyperparameters={**TINY_RECIPE, "corrective_weight": 2.0}
    )
    assert ElectraPretrainer(small_config(), seed=0).corrective_head is None
    with tf.GradientTape() as tape:
        out = model.compute_objective(batch(), training=True)
        corrective = out.losses["corrective_loss"]
    # An untrained head spreads its guess over the vocabulary: about log(60).
    assert float(corrective) == pytest.approx(np.log(60), rel=0.1)
    expected = (
        float(out.losses["mlm_loss"])
        + 50.0 * float(out.losses["disc_loss"])
        + 2.0 * float(corrective)
    )
    assert float(out.losses["loss"]) == pytest.approx(expected, rel=1e-5)
    grads = dict(
        zip(
            [v.path for v in model.trainable_variables],
            tape.gradient(corrective, model.trainable_variables),
            strict=True,
        )
    )
    reached = {path.split("/")[0] for path, g in grads.items() if g is not None}
    # It reads the discriminator's states; the generator's tower gets nothing.
    assert {"discriminator", "embedding"} <= reached and "generator" not in reached
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    logs = model.train_on_batch(batch(), return_dict=True)
    assert np.isfinite(logs["corrective_loss"])


def test_exact_gelu_in_the_transformer_layers():
    model = ElectraPretrainer(small_config(), seed=0, hyperparameters=TINY_RECIPE)
    layer = model.discriminator.encoder.transformer_layers[0]
    act = layer._feedforward_intermediate_dense.activation
    x = np.array([-1.0, 0.5, 2.0], "float32")
    from math import erf, sqrt

    exact = [v * 0.5 * (1 + erf(v / sqrt(2))) for v in x]
    np.testing.assert_allclose(np.asarray(act(x)), exact, rtol=1e-6)


def test_train_step_reports_every_metric():
    model = ElectraPretrainer(small_config(), seed=0, hyperparameters=TINY_RECIPE)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    logs = model.train_on_batch(batch(), return_dict=True)
    assert set(logs) == METRICS | GRADIENT_NORMS
    assert all(np.isfinite(v) for v in logs.values())
    # The parts add up to the whole: |g|^2 = sum of the parts' |g|^2.
    parts = sum(logs[name] ** 2 for name in GRADIENT_NORMS - {"grad_norm"})
    assert logs["grad_norm"] == pytest.approx(np.sqrt(parts), rel=1e-5)
    assert all(logs[name] > 0 for name in GRADIENT_NORMS)


def test_gradient_norms_are_euclidean_norms_unscaled():
    model = ElectraPretrainer(small_config(), seed=0, hyperparameters=TINY_RECIPE)
    model.build()
    rng = np.random.default_rng(0)
    total = [rng.normal(size=v.shape).astype("float32") for v in model.trainable_variables]
    present = list(range(len(total)))
    norms = model._gradient_norms(present, [tf.constant(g) for g in total], 2.0)
    want = np.sqrt(sum(float(np.sum(g.astype("float64") ** 2)) for g in total)) / 2.0
    assert float(norms["grad_norm"]) == pytest.approx(want, rel=1e-5)
    parts = gradient_parts(model.trainable_variables)
    heads = [g for g, part in zip(total, parts, strict=True) if part == "heads"]
    want_heads = np.sqrt(sum(float(np.sum(g.astype("float64") ** 2)) for g in heads)) / 2.0
    assert float(norms["grad_norm_heads"]) == pytest.approx(want_heads, rel=1e-5)


def test_mlm_objective_uses_the_same_path_without_a_generator():
    model = ElectraPretrainer(small_config(), objective="mlm", seed=0)
    assert model.generator is None and model.discriminator_head is None
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    logs = model.train_on_batch(batch(), return_dict=True)
    assert set(logs) == {"loss", "mlm_loss", "mlm_accuracy"} | GRADIENT_NORMS - {
        "grad_norm_generator"
    }
    assert logs["loss"] == pytest.approx(logs["mlm_loss"])


def test_pretrainer_save_and_load_round_trip(tmp_path):
    model = ElectraPretrainer(small_config(), seed=3, hyperparameters=TINY_RECIPE)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    model.train_on_batch(batch())
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ElectraPretrainer)
    assert loaded.config == model.config
    data = batch(seed=1)
    np.testing.assert_allclose(loaded(data).numpy(), model(data).numpy(), atol=1e-6)


def test_backbone_round_trips_alone(tmp_path):
    backbone = ElectraBackbone(small_config())
    ids = np.ones((2, 8), "int32")
    inputs = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids}
    backbone.save(tmp_path / "b.keras")
    loaded = keras.saving.load_model(tmp_path / "b.keras")
    np.testing.assert_allclose(loaded(inputs).numpy(), backbone(inputs).numpy(), atol=1e-6)


def test_schedule_is_the_linear_decay_times_the_warm_up_as_the_reference():
    # google-research/electra multiplies the decay by min(1, step / warmup); the warm-up
    # used to replace it, reaching 0.99 of the peak at step 9 and dropping to 0.9 at 10.
    from keras_electra.training.optimizer import WarmupLinearDecay

    schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=100)
    steps = np.arange(0, 151)
    values = np.array([float(schedule(s)) for s in steps])
    expected = 1e-3 * np.maximum(0.0, 1 - steps / 100) * np.minimum(1.0, steps / 10)
    np.testing.assert_allclose(values, expected, atol=1e-9)
    assert values.max() == pytest.approx(9e-4) and np.all(np.diff(values[10:]) <= 0)
    np.testing.assert_allclose([float(schedule(s)) for s in (5, 9)], [4.75e-4, 8.19e-4])


def test_adamw_settings_and_weight_decay_exclusions():
    from keras_electra.training.optimizer import create_optimizer

    model = ElectraPretrainer(small_config(), seed=0, hyperparameters=TINY_RECIPE)
    opt = create_optimizer(model, learning_rate=1e-3, total_steps=100, warmup_steps=10)
    assert (opt.beta_1, opt.beta_2, opt.epsilon, opt.weight_decay) == (0.9, 0.999, 1e-6, 0.01)
    assert opt.global_clipnorm == 1.0
    opt.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if opt._use_weight_decay(v)}
    assert any(p.endswith("token_embedding/embeddings") for p in decayed)
    assert any(p.endswith("query/kernel") for p in decayed)
    assert not any(p.endswith(("bias", "gamma", "beta")) for p in decayed)


@pytest.mark.parametrize("objective", ["electra", "mlm"])
def test_every_random_weight_starts_with_its_own_values(objective):
    # Keras 3 fixes an unseeded initializer's seed at creation: one instance shared
    # by two layers gives them the same values (the position table once equalled
    # the first rows of the word table).
    config = ElectraConfig.from_preset("tiny", vocab_size=60, embedding_sharing="all")
    model = ElectraPretrainer(config, objective=objective, seed=0)
    prefixes = {}
    for v in model.weights:
        values = np.asarray(v.numpy(), "float64").ravel()
        if values.size < 2 or np.ptp(values) == 0:  # constants: LayerNorm, biases, counters
            continue
        prefixes[v.path] = values[:32]
    assert len(prefixes) >= 10
    paths = sorted(prefixes)
    for i, a in enumerate(paths):
        for b in paths[i + 1 :]:
            n = min(len(prefixes[a]), len(prefixes[b]))
            assert not np.array_equal(prefixes[a][:n], prefixes[b][:n]), f"{a} == {b}"


def test_discriminator_starts_at_the_prior_replaced_fraction():
    config = small_config()
    model = ElectraPretrainer(config, seed=0)
    bias = model.discriminator_head.logits.bias.numpy()
    prior = np.log(config.mask_prob / (1 - config.mask_prob))
    np.testing.assert_allclose(bias, [prior], rtol=1e-6)
    probs = tf.sigmoid(model(batch(), training=False)).numpy()
    # The weights are small at initialization: every token starts near the base rate.
    assert abs(probs.mean() - config.mask_prob) < 0.03
    restored = type(model.discriminator_head).from_config(model.discriminator_head.get_config())
    assert restored.output_bias == pytest.approx(prior)


def test_pre_layernorm_towers_train_and_round_trip(tmp_path):
    model = ElectraPretrainer(
        small_config(normalize_first=True), seed=0, hyperparameters=TINY_RECIPE
    )
    for tower in (model.discriminator, model.generator):
        assert tower.encoder.final_layer_norm is not None
        assert all(layer.normalize_first for layer in tower.encoder.transformer_layers)
    assert ElectraPretrainer(small_config(), seed=0).discriminator.encoder.final_layer_norm is None
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    logs = model.train_on_batch(batch(), return_dict=True)
    assert np.isfinite(logs["loss"])
    path = tmp_path / "prenorm.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(restored(batch()), model(batch()), atol=1e-5)


def test_an_optimizer_that_takes_the_clipping_factor_gets_the_gradients_unscaled():
    # Our AdamW multiplies inside its update kernel: the shares are the gradients as
    # they are, and the factor is what tf.clip_by_global_norm would multiply them by.
    from keras_electra.training.optimizer import AdamW
    from keras_electra.training.step import clip_summed_gradient

    grads = [tf.constant([3.0, 4.0]), None]
    optimizer = AdamW(1e-3, global_clipnorm=1.0)

    def norms_of(present, total, loss_scale):
        return {"grad_norm": tf.linalg.global_norm(total) / loss_scale}

    shares, norms, factor = clip_summed_gradient(optimizer, grads, norms_of)
    assert shares[0] is grads[0] and shares[1] is None
    assert float(factor) == pytest.approx(0.2) and float(norms["grad_norm"]) == pytest.approx(5.0)


@pytest.mark.parametrize("scale", [0.3, 3.0, np.inf], ids=["below", "above", "infinite"])
def test_the_summed_gradient_is_clipped_as_tf_clip_by_global_norm_clips_it(scale):
    from keras_electra.training.step import clip_summed_gradient

    rng = np.random.default_rng(0)
    values = [rng.normal(size=(4, 3)), rng.normal(size=(5,))]
    norm = np.sqrt(sum((v**2).sum() for v in values))
    grads = [tf.constant(values[0] * scale / norm, tf.float32), None]
    grads.append(tf.constant(values[1] * scale / norm, tf.float32))

    def norms_of(present, total, loss_scale):
        assert present == [0, 2]
        return {"grad_norm": tf.linalg.global_norm(total) / loss_scale}

    optimizer = keras.optimizers.SGD(1.0, global_clipnorm=1.0)
    shares, norms, factor = clip_summed_gradient(optimizer, grads, norms_of)
    assert factor is None  # SGD takes no factor: the shares are clipped
    want, _ = tf.clip_by_global_norm([grads[0], grads[2]], 1.0)
    assert shares[1] is None
    for got, expected in zip([shares[0], shares[2]], want, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
    if np.isfinite(scale):
        clipped = np.sqrt(sum(float(tf.reduce_sum(s**2)) for s in (shares[0], shares[2])))
        assert clipped == pytest.approx(min(scale, 1.0), rel=1e-5)
        assert float(norms["grad_norm"]) == pytest.approx(scale, rel=1e-5)
    else:
        assert np.isnan(shares[0].numpy()).all() and np.isnan(shares[2].numpy()).all()
