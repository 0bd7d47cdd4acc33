"""Objectives as plug-ins (keras_electra.pretraining.objectives): a new objective is
one module plus one registry line, and the pretrainer, the run, the metrics and the
FLOP count all follow it without knowing its name."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.layers import DiscriminatorHead
from keras_electra.pretraining import masking, objectives
from keras_electra.pretraining.flops import tower_flops
from keras_electra.pretraining.objectives import Objective, ObjectiveOutput, share
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.settings import OBJECTIVES


class MaskDetection(Objective):
    """A toy objective: the discriminator tells which input tokens are ``[MASK]``."""

    name = "mask_detection"
    gradient_parts = ("discriminator", "embeddings", "heads")
    # One tower: it reads the shared block (a new run's config takes this).
    config_overrides = {"embedding_sharing": "all"}

    def check(self, config):
        if config.mask_token_prob == 0:
            raise ConfigError("mask_detection needs mask_token_prob > 0: nothing to detect.")

    def add_layers(self, model):
        model.discriminator_head = DiscriminatorHead(
            model.config.hidden_size,
            model.config.initializer_range,
            dtype=model.dtype_policy,
            name="mask_predictions",
        )
        return [(model.discriminator_head, model.config.hidden_size)]

    def metrics(self, config):
        return {
            "mask_loss": keras.metrics.Mean(name="mask_loss"),
            "mask_accuracy": keras.metrics.Mean(name="mask_accuracy"),
        }

    def compute(self, model, prepared, totals, training):
        masked = prepared.masked
        labels = tf.cast(tf.equal(masked.token_ids, model.config.mask_token_id), tf.float32)
        inputs = {
            "token_ids": masked.token_ids,
            "segment_ids": prepared.segment_ids,
            "padding_mask": prepared.padding_mask,
        }
        logits = model.discriminator_head(model.discriminator(inputs, training=training))
        loss = masking.disc_loss(logits, labels, prepared.padding_mask)
        loss *= share(tf.reduce_sum(tf.cast(prepared.padding_mask, tf.float32)), totals.real)
        tokens = {"logits": logits, "labels": labels, "mask": prepared.padding_mask}
        return ObjectiveOutput({"loss": loss, "mask_loss": loss}, masked, tokens)

    def update_metrics(self, metrics, out):
        t = out.tokens
        correct = tf.equal(tf.cast(t["logits"] > 0, tf.float32), t["labels"])
        metrics["mask_accuracy"].update_state(
            tf.cast(correct, tf.float32), sample_weight=tf.cast(t["mask"], tf.float32)
        )

    def forward_flops(self, config, batch, length):
        h = config.hidden_size
        return {
            "discriminator": tower_flops(
                config.discriminator_config(), config.embedding_size, batch, length
            ),
            "head": 2.0 * batch * length * (h * h + h),
        }


@pytest.fixture
def registered(monkeypatch):
    """The toy objective, registered for one test as a module's would be: one line,
    ``"module:Class"``, imported when a model asks for it."""
    monkeypatch.setitem(OBJECTIVES, "mask_detection", f"{__name__}:MaskDetection")
    return "mask_detection"


def config(**overrides) -> ElectraConfig:
    return ElectraConfig.from_preset(
        "tiny", vocab_size=64, num_layers=1, max_position_embeddings=32, **overrides
    )


def toy_config(**overrides) -> ElectraConfig:
    return config(**MaskDetection.config_overrides, **overrides)


def batch(seed: int = 0) -> dict:
    ids = np.random.default_rng(seed).integers(5, 64, (8, 16)).astype("int32")
    ids[:, 0] = 2  # [CLS]
    return {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": 0 * ids}


def test_a_toy_objective_trains_through_the_pretrainer(registered):
    model = ElectraPretrainer(toy_config(), objective=registered, seed=0)
    assert model.generator is None and model.corrective_head is None
    assert model.discriminator_head.name == "mask_predictions"
    model.compile(optimizer=keras.optimizers.AdamW(3e-3))
    data = batch()
    first = model.train_on_batch(data, return_dict=True)
    for _ in range(40):
        last = model.train_on_batch(data, return_dict=True)
    assert set(last) == {
        "loss",
        "mask_loss",
        "mask_accuracy",
        "grad_norm",
        "grad_norm_discriminator",
        "grad_norm_embeddings",
        "grad_norm_heads",
    }
    # [MASK] is one token id: the toy task is learned in a few dozen steps.
    assert last["mask_loss"] < 0.5 * first["mask_loss"]
    assert last["mask_accuracy"] > 0.95
    # The objective's name is the model's config, so a saved model comes back with it.
    clone = ElectraPretrainer.from_config(model.get_config())
    assert clone.objective == registered and clone.discriminator_head.name == "mask_predictions"
    # The FLOP count is the objective's own.
    c = toy_config()
    assert objectives.get(registered).step_flops(c, 8, 16) == 3 * sum(
        MaskDetection().forward_flops(c, 8, 16).values()
    )
    assert type(model._objective).__name__ == "MaskDetection"


def test_the_objectives_check_refuses_a_config_in_one_sentence(registered):
    with pytest.raises(ConfigError, match="nothing to detect"):
        ElectraPretrainer(toy_config(mask_token_prob=0.0), objective=registered)


def test_an_unknown_objective_is_one_sentence():
    with pytest.raises(ConfigError, match=r"Unknown objective 'bert'; choose one of: electra, mlm"):
        ElectraPretrainer(config(), objective="bert")


@pytest.mark.parametrize("objective", [None, 3, MaskDetection])
def test_an_objective_that_is_neither_a_name_nor_one_looked_up_is_one_sentence(objective):
    """A run.json holding ``"objective": null`` (load_run passes it on), or a class where
    an instance is wanted: the same sentence as an unknown name, not an AttributeError."""
    with pytest.raises(ConfigError, match=r"Unknown objective .*; choose one of: electra, mlm"):
        ElectraPretrainer(config(), objective=objective)


def test_the_run_trains_a_registered_objective_and_records_it(registered, small_corpus, tmp_path):
    from keras_electra.pretraining.run import pretrain

    run_dir = tmp_path / "toy"
    pretrain(
        [str(small_corpus)],
        run_dir,
        objective=registered,
        steps=3,
        batch_size=4,
        max_seq_length=32,
        vocab_size=500,
        log_every=1,
    )
    assert json.loads((run_dir / "run.json").read_text())["objective"] == registered
    # The objective's config_overrides reached the new run's config.
    assert json.loads((run_dir / "config.json").read_text())["embedding_sharing"] == "all"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert {"mask_loss", "mask_accuracy", "grad_norm_heads"} <= set(last)
    assert "disc_loss" not in last and "mlm_loss" not in last
    # Health: the representation metrics of the discriminator, and the fixed
    # corruption AUCs through the objective's head.
    assert {"disc_effective_rank", "context_auc", "rarity_auc"} <= set(last)


def test_the_builtin_objectives_are_plugins():
    electra, mlm = objectives.get("electra"), objectives.get("mlm")
    assert (electra.name, mlm.name) == ("electra", "mlm")
    assert "generator" not in mlm.gradient_parts
    assert mlm.config_overrides == {"embedding_sharing": "all"}
    with pytest.raises(ConfigError, match="needs --objective electra"):
        mlm.check(config(embedding_sharing="gdes"))
    electra.check(config(embedding_sharing="gdes"))  # the two-tower objective takes any mode


def test_a_registration_that_cannot_train_is_one_sentence(monkeypatch):
    monkeypatch.setitem(OBJECTIVES, "missing", "keras_electra.pretraining.objectives.nope:Gone")
    with pytest.raises(ConfigError) as missing:
        objectives.get("missing")
    assert str(missing.value) == (
        "Objective 'missing' is registered as 'keras_electra.pretraining.objectives.nope:Gone', "
        "which does not import (No module named 'keras_electra.pretraining.objectives.nope'); "
        "fix its entry in keras_electra.settings.OBJECTIVES."
    )
    with pytest.raises(TypeError, match="register takes an Objective subclass or 'module:Class'"):
        objectives.register("toy", object)
    assert "toy" not in OBJECTIVES
