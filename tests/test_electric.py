"""Electric (keras_electra.pretraining.objectives.electric): the energy-based cloze
objective against the paper's equations, its cloze generator's blindness to the token
it predicts, and one float32 step against a plain-TensorFlow oracle, bit for bit."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_electra import kernels
from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.pretraining import masking, objectives
from keras_electra.pretraining.objectives import electric
from keras_electra.pretraining.pretrainer import ElectraPretrainer

VOCAB, LENGTH = 64, 16


def config(**overrides) -> ElectraConfig:
    values = dict(vocab_size=VOCAB, num_layers=1, max_position_embeddings=32)
    return ElectraConfig.from_preset("tiny", **(values | overrides))


def batch(seed: int = 0, rows: int = 8) -> dict:
    ids = np.random.default_rng(seed).integers(5, VOCAB, (rows, LENGTH)).astype("int32")
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    mask = np.ones_like(ids)
    if rows > 1:
        mask[1, -4:], ids[1, -4:] = 0, 0  # a padded row
        ids[1, -5] = 3
    return {"token_ids": ids, "padding_mask": mask, "segment_ids": 0 * ids}


# === The loss against the paper's equations ===


def paper_losses(cloze_logits, energies, token_ids, noisy_ids, resampled, candidates, real, p):
    """Electric's losses as the paper writes them (section 3): the cloze model's negative
    log-likelihood of the original tokens, and noise-contrastive estimation with noise
    ``q`` (fixed: no gradient) at ``k = p / (1 - p)`` noise tokens per data token:
    ``-log(k q / (k q + exp(-E)))`` for a resampled token, ``-log(exp(-E) / (exp(-E) +
    k q))`` for one left alone."""
    q = tf.nn.softmax(tf.stop_gradient(cloze_logits), axis=-1)
    q_noisy = tf.reduce_sum(q * tf.one_hot(noisy_ids, VOCAB), axis=-1)
    log_model = tf.reduce_sum(
        tf.math.log(tf.nn.softmax(cloze_logits, axis=-1)) * tf.one_hot(token_ids, VOCAB), -1
    )
    cloze = -tf.reduce_sum(log_model * candidates) / tf.reduce_sum(candidates)
    k = p / (1.0 - p)
    unnormalized = tf.exp(-energies)
    noise = k * q_noisy
    per_token = tf.where(
        resampled > 0,
        -tf.math.log(noise / (noise + unnormalized)),
        -tf.math.log(unnormalized / (unnormalized + noise)),
    )
    return cloze, tf.reduce_sum(per_token * real) / tf.reduce_sum(real)


def test_the_loss_and_its_gradients_match_the_papers_equations():
    rng = np.random.default_rng(3)
    data = batch(1, rows=4)
    token_ids, real = tf.constant(data["token_ids"]), tf.constant(data["padding_mask"])
    cloze_logits = tf.constant(rng.normal(0, 2, (4, LENGTH, VOCAB)), tf.float32)
    energies = tf.constant(rng.normal(0, 2, (4, LENGTH)), tf.float32)
    candidates = masking.candidate_mask(token_ids, real, (0, 2, 3))
    masked = masking.mask_tokens(
        token_ids, real, special_ids=(0, 2, 3), mask_token_id=4, max_predictions=4,
        seeds=(tf.constant([1, 2]), tf.constant([3, 4])),
    )  # fmt: skip
    sampled = tf.constant(rng.integers(5, VOCAB, (4, 4)), tf.int32)
    sampled = tf.where(tf.range(4)[None] == 0, masked.labels, sampled)  # a few originals drawn
    noisy = masking.replace_tokens(token_ids, masked.positions, sampled, masked.weights)
    labels = electric.resampled_labels(token_ids, masked.positions, masked.weights)
    # The label is "resampled" where a resample drew the original token too.
    drew_original = tf.reduce_sum(labels * tf.cast(tf.equal(noisy, token_ids), tf.float32))
    assert float(drew_original) >= 4.0
    real_f = tf.cast(real, tf.float32)

    def ours(logits, e):
        cloze, nce, *_ = electric.electric_losses(
            logits, e, token_ids, noisy, labels, candidates, real, 0.15
        )
        return cloze + 50.0 * nce, cloze, nce

    def theirs(logits, e):
        cloze, nce = paper_losses(logits, e, token_ids, noisy, labels, candidates, real_f, 0.15)
        return cloze + 50.0 * nce, cloze, nce

    results = []
    for fn in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch([cloze_logits, energies])
            total, cloze, nce = fn(cloze_logits, energies)
        results.append(([cloze, nce], tape.gradient(total, [cloze_logits, energies])))
    (values, grads), (want_values, want_grads) = results
    np.testing.assert_allclose([float(v) for v in values], [float(v) for v in want_values], 1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-7)
    # The NCE term passes no gradient to the noise: the logits' gradient is the cloze loss's.
    with tf.GradientTape() as tape:
        tape.watch(cloze_logits)
        cloze_only = ours(cloze_logits, energies)[1]
    np.testing.assert_allclose(
        tape.gradient(cloze_only, cloze_logits).numpy() * 1.0, grads[0].numpy(), atol=1e-7
    )


def test_the_head_is_the_energy_and_the_sentence_score_its_negated_sum():
    energies = tf.constant([[0.5, 2.0, -1.0, 7.0]])
    scored = tf.constant([[0, 1, 1, 0]])
    assert float(electric.sentence_scores(energies, scored)[0]) == pytest.approx(-1.0)
    # A higher energy makes "resampled" more likely: the head's output is E, not -E.
    low, high = electric.noise_logits(tf.constant([0.0, 3.0]), tf.constant([-2.0, -2.0]), 0.15)
    assert float(high) - float(low) == pytest.approx(3.0)
    assert float(low) == pytest.approx(-2.0 + math.log(0.15 / 0.85), rel=1e-6)


# === The cloze generator cannot see the token it predicts ===


@pytest.mark.parametrize("training", [False, True])
def test_the_cloze_distribution_at_t_does_not_change_when_x_t_does(training):
    model = ElectraPretrainer(config(dropout=0.0), objective="electric", seed=0)
    data = batch(2, rows=1)
    ids = np.repeat(data["token_ids"], LENGTH, 0)
    changed = ids.copy()
    for t in range(LENGTH):  # row t: the token at t replaced
        changed[t, t] = 5 + (changed[t, t] - 5 + 17) % (VOCAB - 5)

    @tf.function
    def cloze_logits(token_ids):
        inputs = {"token_ids": token_ids, "segment_ids": 0 * token_ids}
        inputs["padding_mask"] = tf.ones_like(token_ids)
        hidden = model.generator(inputs, training=training)
        return model.generator_head(hidden, electric.all_positions(token_ids))

    before, after = cloze_logits(tf.constant(ids)).numpy(), cloze_logits(changed).numpy()
    rows = np.arange(LENGTH)
    np.testing.assert_array_equal(after[rows, rows], before[rows, rows])
    # ... while every other position (each sees x_t from one side) does change.
    others = ~np.eye(LENGTH, dtype=bool)
    moved = np.abs(after - before).max(axis=-1)[others]
    assert (moved > 0).all()


# === One step against a plain-TensorFlow oracle ===


def oracle_loss(model: ElectraPretrainer, prepared) -> tf.Tensor:
    """Electric's loss written out with TensorFlow's own ops on the model's towers and
    heads: the two causal towers shifted by one position, the cloze cross-entropy,
    resampling with the step's own draws, and the sigmoid cross-entropy of
    ``E + log q + log(p / (1 - p))`` against "resampled"."""
    c = model.config
    ids, real = prepared.token_ids, prepared.padding_mask
    masked = prepared.masked
    inputs = {"token_ids": ids, "segment_ids": prepared.segment_ids, "padding_mask": real}
    forward = model.generator.left_to_right(inputs, training=True)
    backward = model.generator.right_to_left(inputs, training=True)
    length = ids.shape[1]
    first, last = tf.one_hot(0, length)[None, :, None], tf.one_hot(length - 1, length)
    forward = tf.roll(forward, 1, axis=1) * (1.0 - first)  # position t: forward's t - 1
    backward = tf.roll(backward, -1, axis=1) * (1.0 - last[None, :, None])  # t + 1
    hidden = tf.concat([forward, backward], -1)
    positions = tf.tile(tf.range(length)[None], [ids.shape[0], 1])
    logits = model.generator_head(hidden, positions)
    candidates = tf.cast(real > 0, tf.float32) * tf.cast(ids > 3, tf.float32)  # not 0, 2 or 3
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    cloze = tf.reduce_sum(cross_entropy * candidates) / (tf.reduce_sum(candidates) + 1e-6)

    at_masked = tf.gather(logits, masked.positions, batch_dims=1)
    sampled = masking.sample_tokens(at_masked, masked.labels, uniform=prepared.sample_uniforms)
    rows = tf.tile(tf.range(ids.shape[0])[:, None], [1, masked.positions.shape[1]])
    where = tf.boolean_mask(tf.stack([rows, masked.positions], -1), masked.weights > 0)
    noisy = tf.tensor_scatter_nd_update(ids, where, tf.boolean_mask(sampled, masked.weights > 0))
    resampled = tf.scatter_nd(where, tf.ones(tf.shape(where)[0]), tf.shape(ids))

    noisy_inputs = dict(inputs, token_ids=noisy)
    energies = model.discriminator_head(model.discriminator(noisy_inputs, training=True))
    log_q = -tf.nn.sparse_softmax_cross_entropy_with_logits(noisy, tf.stop_gradient(logits))
    nce_logits = energies + log_q + math.log(c.mask_prob / (1 - c.mask_prob))
    per_token = tf.nn.sigmoid_cross_entropy_with_logits(labels=resampled, logits=nce_logits)
    weights = tf.cast(real, tf.float32)
    nce = tf.reduce_sum(per_token * weights) / (tf.reduce_sum(weights) + 1e-6)
    h = model.hyperparameters
    return h.mlm_weight * cloze + h.disc_weight * nce


def test_one_float32_step_matches_the_oracle_bit_for_bit(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "reference")
    kernels.clear()
    try:
        cfg = config(dropout=0.0)
        model = ElectraPretrainer(cfg, objective="electric", seed=4)
        twin = ElectraPretrainer(cfg, objective="electric", seed=4)
        twin.set_weights(model.get_weights())
        data = batch(3)
        rate = 0.05
        # A clipping bound never reached: the step hands the optimizer dense gradients
        # (unclipped, Keras' SGD would apply an embedding's rows one by one).
        sgd = keras.optimizers.SGD(rate, global_clipnorm=1e6)
        model.compile(optimizer=sgd, jit_compile=False)
        logs = model.train_on_batch(data, return_dict=True)

        @tf.function  # the batch an argument, as fit's is (a constant would be folded)
        def oracle_step(data):
            prepared = twin.prepare_batch(data)
            with tf.GradientTape() as tape:
                loss = oracle_loss(twin, prepared)
            grads = tape.gradient(loss, twin.trainable_variables)
            for v, g in zip(twin.trainable_variables, grads, strict=True):
                v.assign_sub(rate * tf.convert_to_tensor(g))
            return loss

        loss = oracle_step({k: tf.constant(v) for k, v in data.items()})
    finally:
        kernels.clear()
    assert np.float32(logs["loss"]) == loss.numpy()
    metrics = {"cloze_loss", "cloze_accuracy", "resampled_original", "disc_loss", "disc_auc"}
    assert metrics | {"grad_norm_generator", "grad_norm_discriminator"} <= set(logs)
    differ = [
        (got.path, float(np.abs(got.numpy() - want.numpy()).max()))
        for got, want in zip(model.trainable_variables, twin.trainable_variables, strict=True)
        if not np.array_equal(got.numpy(), want.numpy())
    ]
    assert not differ, differ


def test_disc_auc_ranks_the_tiny_nce_probabilities_of_a_young_model():
    # A young Electric model's NCE probabilities sit between 3e-5 and 5e-4: AUC's default
    # thresholds (even in [0, 1]) put them all in one bin and read 0.5 at every window.
    auc = objectives.get("electric").metrics(ElectraConfig.from_preset("tiny"))["disc_auc"]
    logits = tf.constant([-8.0, -10.0, -7.9, -10.2, -9.0, -8.5])  # sigmoid: 3.4e-4 to 3.7e-5
    labels = tf.constant([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    objectives.update_detector_metrics(
        {"disc_accuracy": keras.metrics.Mean(), "disc_auc": auc},
        {"disc_logits": logits, "disc_labels": labels, "padding_mask": tf.ones([6])},
        ("disc_auc",),
    )
    assert float(auc.result()) == pytest.approx(1.0, abs=1e-6)
    flat = keras.metrics.AUC()
    flat.update_state(labels, tf.sigmoid(logits))
    assert float(flat.result()) == 0.5  # the default thresholds' reading


# === The plug-in ===


def test_electric_is_a_plugin_with_its_own_towers_metrics_and_checks():
    cfg = config()
    model = ElectraPretrainer(cfg, objective="electric", seed=0)
    parts = electric.EnergyCloze().parameters(cfg)
    assert sum(parts.values()) == model.count_params() - 1  # less the step counter
    assert model.generator.left_to_right.encoder.direction == "left_to_right"
    assert model.generator.right_to_left.encoder.direction == "right_to_left"
    # Two generator towers and a cloze head at every position: more than ELECTRA's step.
    flops = electric.EnergyCloze().forward_flops(cfg, 8, 128)
    assert flops["generator_left_to_right"] == flops["generator_right_to_left"]
    assert objectives.get("electric").step_flops(cfg, 8, 128) > objectives.get(
        "electra"
    ).step_flops(cfg, 8, 128)
    # It samples from q itself and has no corrective LM: no such hyperparameters.
    with pytest.raises(ConfigError, match="electric objective has no hyperparameter 'temp"):
        objectives.get("electric", temperature=2.0)
    with pytest.raises(ConfigError, match="no hyperparameters 'corrective_weight', 'disallow"):
        objectives.get("electric", corrective_weight=1.0, disallow_correct=True)


def test_a_run_that_sets_another_temperature_is_refused_in_one_sentence(small_corpus, tmp_path):
    from keras_electra.pretraining.run import pretrain

    # A dry run resolves the config as a run does (a run checks it after learning the
    # vocabulary, before its first write). The sentence names the flag that was given.
    with pytest.raises(ConfigError, match="^--temperature applies to an objective that samp"):
        pretrain(
            [str(small_corpus)],
            tmp_path / "run",
            objective="electric",
            temperature=2.0,
            dry_run=True,
        )
    assert not (tmp_path / "run").exists()


def test_a_google_research_electric_checkpoint_is_refused_in_one_sentence(tmp_path):
    from keras_electra.convert.google import read_google

    graph = tf.Graph()
    with graph.as_default():
        names = ("electra/embeddings/word_embeddings", "generator_ltr/encoder/layer_0/x")
        for name in names:
            tf.compat.v1.get_variable(name, initializer=tf.zeros([4, 2]))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, str(tmp_path / "model.ckpt-1"))
    with pytest.raises(ConfigError, match=r"is an Electric checkpoint .* does not read"):
        read_google(tmp_path / "model.ckpt-1")
