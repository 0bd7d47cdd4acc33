"""Objectives as plug-ins (keras_electra.pretraining.objectives): a new objective is
one module plus one registry line, and the pretrainer, the run, the metrics and the
FLOP count all follow it without knowing its name."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_RECIPE

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
    with pytest.raises(ConfigError, match=r"needs a generator \(--objective electra or electric\)"):
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


def test_each_objective_owns_its_hyperparameters():
    electra = objectives.get("electra", temperature=3.0, disc_weight=30.0)
    assert (electra.hyperparameters.temperature, electra.hyperparameters.disc_weight) == (3.0, 30.0)
    assert electra != objectives.get("electra")  # its hyperparameters count
    assert objectives.get("mlm").hyperparameter_names() == ("mlm_weight",)
    assert objectives.get("electric").hyperparameter_values() == {
        "mlm_weight": 1.0,
        "disc_weight": 50.0,
    }
    # One sentence for a hyperparameter an objective does not have, or a bad value.
    with pytest.raises(ConfigError, match="^The mlm objective has no hyperparameter 'temp"):
        objectives.get("mlm", temperature=2.0)
    with pytest.raises(ConfigError, match="^The electra objective's temperature must be > 0"):
        objectives.get("electra", temperature=0.0)
    # The tiny preset's recipe, which tests building a tiny pretrainer by hand use.
    assert objectives.get("electra").preset_hyperparameters["tiny"] == TINY_RECIPE
    model = ElectraPretrainer.from_preset("tiny", vocab_size=64, num_layers=1)
    assert model.hyperparameters.temperature == TINY_RECIPE["temperature"]
    assert (
        ElectraPretrainer.from_preset("tiny", "mlm", vocab_size=64).config.embedding_sharing
        == "all"
    )
    # A saved model comes back with them.
    corrective = ElectraPretrainer(config(), hyperparameters={"corrective_weight": 1.0})
    clone = ElectraPretrainer.from_config(corrective.get_config())
    assert clone.hyperparameters == corrective.hyperparameters and clone.corrective_head
    # The config holds none of them, and says where they went.
    with pytest.raises(ConfigError, match="^temperature is the pretraining objective's"):
        config(temperature=2.0)


def test_a_run_from_before_the_move_keeps_its_hyperparameters(tmp_path):
    """A run directory whose config.json held the objective fields (and no run.json
    record of them) loads, its model built with them (the corrective head too)."""
    from keras_electra.pretraining.loading import load_run
    from keras_electra.run_directory import RunDirectory

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
    model = ElectraPretrainer(
        config(), hyperparameters={"corrective_weight": 1.0, "temperature": 2.0}
    )
    run = RunDirectory(tmp_path)
    run.write_model_files(model.config, tokens)
    legacy = json.loads(run.config_file.read_text()) | {
        "mlm_weight": 1.0,
        "disc_weight": 50.0,
        "corrective_weight": 1.0,
        "temperature": 2.0,
        "disallow_correct": False,
    }
    run.config_file.write_text(json.dumps(legacy))
    run.write_settings({"objective": "electra"})
    run.checkpoints(model).save(1)
    assert ElectraConfig.load(run.config_file) == model.config
    loaded, _, step = load_run(tmp_path)
    assert step == 1 and loaded.hyperparameters == model.hyperparameters
    for a, b in zip(model.get_weights(), loaded.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    # An mlm run of that time keeps only its own.
    assert objectives.from_record("mlm", legacy).hyperparameter_values() == {"mlm_weight": 1.0}
