"""A Keras user's own script around the library's models: ``model.fit`` with Keras'
callbacks, a model saved to a ``.keras`` file and loaded again, ``evaluate`` between
epochs, weights loaded into a model built afresh. Each test is a way such a script went
wrong."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest

from keras_electra import internals
from keras_electra.data import ElectraTokenizer, learn_vocab, pretraining_dataset
from keras_electra.finetuning.layerwise import create_finetune_optimizer
from keras_electra.finetuning.models import ElectraClassifier
from keras_electra.layers import ElectraBackbone
from keras_electra.pretraining import ElectraPretrainer
from keras_electra.training.optimizer import create_optimizer


@pytest.fixture(scope="module")
def tokenizer(small_corpus):
    return ElectraTokenizer(learn_vocab([str(small_corpus)], 500))


def _pretrainer(tokenizer):
    model = ElectraPretrainer.from_preset("tiny", vocab_size=tokenizer.vocab_size, num_layers=1)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-3, total_steps=10, warmup_steps=1)
    )
    return model


def _batches(small_corpus, tokenizer, length=32):
    return pretraining_dataset(
        [str(small_corpus)], tokenizer, batch_size=4, max_seq_length=length, seed=1
    )


def _decayed(model) -> list[str]:
    return sorted(
        v.path.split("/")[-1]
        for v in model.trainable_variables
        if internals.uses_weight_decay(model.optimizer, v)
    )


def test_a_model_loaded_from_a_keras_file_decays_the_same_variables(
    small_corpus, tokenizer, tmp_path
):
    # Weight decay's exclusions were a list of variables, which a .keras file does not
    # keep: the loaded optimizer decayed every LayerNorm parameter and bias (34 decayed
    # variables became 85), and a fit resumed from a ModelCheckpoint file drifted.
    model = _pretrainer(tokenizer)
    model.fit(_batches(small_corpus, tokenizer), steps_per_epoch=1, epochs=1, verbose=0)
    decayed = _decayed(model)
    assert decayed and not [n for n in decayed if re.search(r"^(gamma|beta)$|bias$", n)]
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert _decayed(loaded) == decayed
    # The fine-tuning optimizer (layer-wise rates) keeps them too.
    classifier = ElectraClassifier(ElectraBackbone(model.config), 2)
    backbone = classifier.backbone
    optimizer = create_finetune_optimizer(classifier, backbone, learning_rate=1e-4, total_steps=10)
    again = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    for v in classifier.trainable_variables:
        assert internals.uses_weight_decay(again, v) == internals.uses_weight_decay(optimizer, v)


def test_weights_load_into_a_fine_tuning_model_just_made(tmp_path):
    # "You are loading weights into a model that has not yet been built": the models
    # build every layer when created, but did not say so.
    from keras_electra.config import ElectraConfig

    config = ElectraConfig.from_preset("tiny", vocab_size=100, num_layers=1)
    first = ElectraClassifier(ElectraBackbone(config), 3)
    first.save_weights(tmp_path / "classifier.weights.h5")
    second = ElectraClassifier(ElectraBackbone(config), 3)
    second.load_weights(tmp_path / "classifier.weights.h5")
    for a, b in zip(first.weights, second.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_sequence_too_long_for_a_function_traced_for_any_length_names_the_table():
    # predict at lengths 16, then 20 (Keras traces again, for any length), then 160:
    # "Expected size[0] in [0, 128], but got 160" from a Slice deep in the graph.
    import tensorflow as tf

    from keras_electra.config import ElectraConfig

    config = ElectraConfig.from_preset("tiny", vocab_size=100, num_layers=1)
    classifier = ElectraClassifier(ElectraBackbone(config), 2)

    def inputs(length):
        ids = np.ones((2, length), "int32")
        return {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids}

    for length in (16, 20):
        assert classifier.predict(inputs(length), verbose=0).shape == (2, 2)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        classifier.predict(inputs(160), verbose=0)
    said = caught.value.message  # TensorFlow escapes the sentence's apostrophe
    assert "assertion failed: [Sequences are longer than the model" in said
    assert "position table (128 positions); cut them to at most 128 tokens" in said


def _weights(model) -> list[np.ndarray]:
    return [v.numpy() for v in model.weights]


def test_fit_and_evaluate_at_a_second_sequence_length(small_corpus, tokenizer):
    # The paper's two phases (short sequences, then 512): evaluate, fit with
    # validation_data, or fit compiled with steps_per_execution, at a second length
    # failed with "Pretraining batches need one sequence length known when the step is
    # traced" (Keras traced its function again for any length); fit's came after the
    # second phase had trained.
    for options in ({}, {"steps_per_execution": 2}):
        model = _pretrainer(tokenizer)
        model.compile(optimizer=model.optimizer, **options)
        for length in (32, 48):
            data = _batches(small_corpus, tokenizer, length)
            history = model.fit(
                data, steps_per_epoch=2, validation_data=data.take(1), epochs=1, verbose=0
            )
            assert np.isfinite(history.history["val_loss"]).all()
        for length in (32, 64):
            logs = model.evaluate(_batches(small_corpus, tokenizer, length).take(1), verbose=0)
            assert np.isfinite(logs).all()


def test_evaluate_is_steady_and_leaves_the_training_masks_alone(small_corpus, tokenizer):
    # evaluate drew its masks from training's random stream: three evaluations of the
    # same data gave three losses (0.3794, 0.3785, 0.3792), and a fit with
    # validation_data trained on other masks than the same fit without it.
    data = _batches(small_corpus, tokenizer)
    held = _batches(small_corpus, tokenizer).take(2)
    trained = []
    for validation in (None, held):
        keras.utils.set_random_seed(0)
        model = _pretrainer(tokenizer)
        model.fit(data, steps_per_epoch=2, epochs=2, validation_data=validation, verbose=0)
        trained.append(model)
    for a, b in zip(*map(_weights, trained), strict=True):
        np.testing.assert_array_equal(a, b)
    steps = int(trained[0].random_step.numpy())
    losses = [trained[0].evaluate(held, verbose=0, return_dict=True) for _ in range(3)]
    assert losses[0]["loss"] == losses[1]["loss"] == losses[2]["loss"], losses
    assert int(trained[0].random_step.numpy()) == steps
