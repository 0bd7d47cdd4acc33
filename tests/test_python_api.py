"""Mistakes a user makes from Python (a notebook or a Keras script) give one sentence, and
what the library hands back is the right thing: scoring, tokenizers, summaries, lengths."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import tensorflow as tf

from keras_electra.data import ElectraTokenizer
from keras_electra.errors import ConfigError, InputDataError
from keras_electra.pretraining import ElectraPretrainer, load_run
from keras_electra.scoring import LoadedExport, score_sentences, score_texts


@pytest.fixture(scope="module")
def loaded(tiny_run):
    return load_run(tiny_run)


def test_one_text_in_place_of_a_list_is_refused_not_scored_by_character(loaded):
    # score_texts(model, tokenizer, "king") scored four one-character texts; "The king"
    # failed on its space as "Text 4 is empty".
    model, tokenizer, _ = loaded
    for text in ("king", "The king", b"king"):
        with pytest.raises(InputDataError, match=r"^Pass a list of texts, not one text"):
            score_texts(model, tokenizer, text)
    (pairs,) = score_texts(model, tokenizer, ["the king"])
    assert [token for token, _ in pairs] == ["the", "king"]
    assert all(0.0 < p < 1.0 for _, p in pairs)


def test_scoring_checks_the_objective_and_the_tokenizer(loaded, tiny_run):
    # score_sentences on an ELECTRA model gave its logits as energies; on an MLM model,
    # both functions failed with "only 0-dimensional arrays can be converted".
    model, tokenizer, _ = loaded
    with pytest.raises(ConfigError, match=r"objective electra, not electric; use score_texts"):
        score_sentences(model, tokenizer, ["the king"])
    mlm = ElectraPretrainer.from_preset("tiny", vocab_size=tokenizer.vocab_size, objective="mlm")
    for function in (score_texts, score_sentences):
        with pytest.raises(ConfigError, match=r"an MLM model has no detector"):
            function(mlm, tokenizer, ["the king"])
    # A tokenizer of more tokens than the model's table: ids past it, found at the first call.
    other = ElectraTokenizer([*tokenizer.vocab, "zzz"])
    with pytest.raises(ConfigError, match=r"tokenizer has [\d,]+ tokens and the model [\d,]+"):
        score_texts(model, other, ["the king"])


def test_a_sequence_longer_than_the_position_table_is_one_sentence(loaded):
    model, tokenizer, _ = loaded
    table = model.config.max_position_embeddings
    with pytest.raises(ConfigError, match=rf"^Sequences of {table + 6} tokens are longer"):
        score_texts(model, tokenizer, ["the king"], max_length=table + 6)
    ids = tf.ones([2, table + 6], tf.int32)
    with pytest.raises(ConfigError, match=rf"\({table} positions\); cut them"):
        model.embedding(ids, tf.zeros_like(ids))


def test_a_file_name_given_as_the_vocabulary_is_one_sentence(tiny_run):
    # ElectraTokenizer("runs/x/vocab.txt") said "The vocabulary lists 'r' twice".
    for vocab in (str(tiny_run / "vocab.txt"), tiny_run / "vocab.txt"):
        with pytest.raises(InputDataError, match=r"use ElectraTokenizer\.from_vocab_file"):
            ElectraTokenizer(vocab)


@pytest.mark.parametrize("objective", ["electra", "electric", "mlm"])
def test_the_pretrainer_has_a_summary(objective, capsys):
    model = ElectraPretrainer.from_preset("tiny", vocab_size=100, objective=objective)
    model.summary()
    out = capsys.readouterr().out
    assert "Total params" in out and "embedding" in out


def test_an_exports_batch_size_below_one_is_refused(tiny_run, tmp_path):
    # batch_size=-1 answered nothing, silently.
    from keras_electra.export import export

    loaded = LoadedExport(export(tiny_run, tmp_path / "electra"))
    for size in (0, -1):
        with pytest.raises(ConfigError, match=f"batch_size must be 1 or more, not {size}"):
            loaded.score(["a", "b c"], batch_size=size)
    assert len(loaded.score(["a", "b c"], batch_size=1)) == 2
    assert np.isfinite([p for _, p in loaded.score(["the king"])[0]]).all()


def test_fit_on_sequences_longer_than_the_position_table_is_one_sentence(small_corpus):
    # Was "Paddings must be non-negative for '{{node gradient_tape/.../Pad}}'".
    from keras_electra.data import learn_vocab, pretraining_dataset
    from keras_electra.training.optimizer import create_optimizer

    tokenizer = ElectraTokenizer(learn_vocab([str(small_corpus)], 500))
    model = ElectraPretrainer.from_preset("tiny", vocab_size=tokenizer.vocab_size, num_layers=1)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-4, total_steps=2, warmup_steps=1)
    )
    table = model.config.max_position_embeddings
    data = pretraining_dataset(
        [str(small_corpus)], tokenizer, batch_size=2, max_seq_length=table + 8
    )
    with pytest.raises(ConfigError) as caught:
        model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
    assert str(caught.value) == (
        f"Sequences of {table + 8} tokens are longer than the model's position table ({table} "
        f"positions); cut them to at most {table} tokens (max_seq_length or max_length), or use "
        "a model with a longer table."
    )


def test_a_layers_error_is_its_own_sentence_not_kerass_wrapper(loaded):
    # Keras rewrote an ElectraError raised in a layer's call as "Exception encountered
    # when calling GdesEmbedding.call()." with the sentence in bold codes and the arguments.
    model, _, _ = loaded
    table = model.config.max_position_embeddings
    ids = tf.ones([1, table + 3], tf.int32)
    with pytest.raises(ConfigError) as caught:
        model.discriminator({"token_ids": ids, "padding_mask": ids, "segment_ids": ids * 0})
    assert str(caught.value).startswith(f"Sequences of {table + 3} tokens are longer")
    assert "\n" not in str(caught.value) and "Exception encountered" not in str(caught.value)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fit_on_ids_past_the_models_vocabulary_is_one_sentence(small_corpus, jit_compile):
    # Was "indices[0,1] = 607 is not in [0, 300)" from inside TensorFlow; compiled by XLA
    # (jit_compile), it trained on, reading a clamped row for every id past the table.
    from keras_electra.data import learn_vocab, pretraining_dataset
    from keras_electra.training.optimizer import create_optimizer

    tokenizer = ElectraTokenizer(learn_vocab([str(small_corpus)], 500))
    assert tokenizer.vocab_size > 300
    model = ElectraPretrainer.from_preset("tiny", vocab_size=300, num_layers=1)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-4, total_steps=2, warmup_steps=1),
        jit_compile=jit_compile,
    )
    data = pretraining_dataset([str(small_corpus)], tokenizer, batch_size=2, max_seq_length=32)
    with pytest.raises(InputDataError) as caught:
        model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)
    message = str(caught.value)
    assert re.fullmatch(
        r"Token id \d+ is outside the model's vocabulary of 300 tokens \(config\.vocab_size\): "
        r"the data was tokenized with a larger vocabulary; build the model with "
        r"vocab_size=len\(tokenizer\.vocab\), or tokenize with the model's own vocab\.txt\.",
        message,
    ), message
    assert int(message.split()[2]) >= 300


def test_batches_the_step_cannot_mask_are_one_sentence_and_a_new_length_retraces(small_corpus):
    # A dataset padded per batch (a length unknown while tracing) was "unsupported operand
    # type(s) for *: 'float' and 'NoneType'"; so was a second fit at another length (the
    # retrace generalized the length to None); an unbatched one an IndexError; (x, y) pairs
    # trained with y dropped.
    from keras_electra.data import learn_vocab, pretraining_dataset
    from keras_electra.pretraining.pretrainer import FEATURES
    from keras_electra.training.optimizer import create_optimizer

    tokenizer = ElectraTokenizer(learn_vocab([str(small_corpus)], 500))
    model = ElectraPretrainer.from_preset("tiny", vocab_size=tokenizer.vocab_size, num_layers=1)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-4, total_steps=9, warmup_steps=1)
    )

    def data(length):
        return pretraining_dataset(
            [str(small_corpus)], tokenizer, batch_size=2, max_seq_length=length
        )

    for length in (16, 32):  # the second fit traces its own length
        history = model.fit(data(length), steps_per_epoch=1, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0]), length
    ragged = (
        data(16)
        .unbatch()
        .map(lambda x: {k: x[k][: tf.reduce_sum(x["padding_mask"])] for k in FEATURES})
    )
    refused = {
        "one sequence length known when the step is traced": ragged.padded_batch(2),
        "[batch, length], but these have shape (16,)": data(16).unbatch(),
        "a dataset of (inputs, labels) pairs": data(16).map(lambda x: (x, x["token_ids"])),
    }
    for said, dataset in refused.items():
        with pytest.raises(ValueError) as caught:
            model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0)
        assert said in str(caught.value) and "\n" not in str(caught.value), caught.value


def test_a_fit_past_the_end_of_the_learning_rate_schedule_warns(small_corpus):
    # "More fit" after create_optimizer's total_steps trained at learning rate 0 and the
    # weights did not change, without a word.
    from keras_electra.data import learn_vocab, pretraining_dataset
    from keras_electra.training.optimizer import create_optimizer

    tokenizer = ElectraTokenizer(learn_vocab([str(small_corpus)], 500))
    model = ElectraPretrainer.from_preset("tiny", vocab_size=tokenizer.vocab_size, num_layers=1)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-3, total_steps=2, warmup_steps=0)
    )
    data = pretraining_dataset([str(small_corpus)], tokenizer, batch_size=2, max_seq_length=16)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)  # the schedule's 2 steps
        assert not [w for w in said if "learning-rate schedule" in str(w.message)]
        before = [w.numpy() for w in model.trainable_weights]
        model.fit(data, steps_per_epoch=1, epochs=3, verbose=0)
    (warning,) = [str(w.message) for w in said if "learning-rate schedule" in str(w.message)]
    assert warning == (
        "The learning-rate schedule ends at step 2 (create_optimizer's total_steps) and this "
        "fit trains to step 5 from 2: its steps past 2 train at learning rate 0 and change "
        "nothing; compile with an optimizer whose total_steps covers them."
    )
    after = [w.numpy() for w in model.trainable_weights]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))  # as it says
