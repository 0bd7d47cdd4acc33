"""Embedding sharing between the towers: ``all``, ``gdes``, ``word`` and ``none``.

``all`` is checked everywhere else (every other test uses it); here: the config
option, where each mode's gradients go, its variables, and a round trip of each
other mode through save, resume, fine-tuning, export and conversion to Hugging
Face with the discriminator's outputs unchanged.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_RECIPE

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.layers.embedding import TABLES
from keras_electra.pretraining import ElectraPretrainer
from keras_electra.pretraining.pretrainer import gradient_parts, transfer_weights

MODES = ("gdes", "word", "none")
TOLERANCE = 1e-5
SHARED = "embedding/"  # the generator's block: the shared one unless the mode is none
OWN = "discriminator/embedding/"


def small_config(mode="all", **kw):
    return ElectraConfig.from_preset(
        "tiny", vocab_size=60, num_layers=1, embedding_sharing=mode, **kw
    )


def batch(seed=0, b=4, length=16):
    ids = np.random.default_rng(seed).integers(5, 60, (b, length)).astype("int32")
    ids[:, 0], ids[:, -1] = 2, 3
    segments = np.zeros_like(ids)
    segments[:, length // 2 :] = 1
    return {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": segments}


def backbone_inputs(data):
    return {
        "token_ids": data["token_ids"],
        "segment_ids": data["segment_ids"],
        "padding_mask": data["padding_mask"],
    }


def perturb(model, seed=0):
    """Move every weight off its initial value (GDES deltas start at zero)."""
    rng = np.random.default_rng(seed)
    for v in model.trainable_variables:
        v.assign(v.numpy() + 0.05 * rng.standard_normal(v.shape).astype("float32"))


def gradient(tape, loss, variable) -> np.ndarray:
    """The dense gradient; an unconnected variable's is zero (exactly)."""
    g = tape.gradient(loss, variable)
    return np.zeros(variable.shape, "float32") if g is None else np.asarray(tf.convert_to_tensor(g))


# === The option ===


def test_the_option_is_validated_saved_and_defaults_to_all(tmp_path):
    assert ElectraConfig().embedding_sharing == "all"
    with pytest.raises(ConfigError, match=r"embedding_sharing must be one of all, gdes"):
        ElectraConfig(embedding_sharing="tied")
    config = small_config("gdes")
    assert ElectraConfig.from_json(config.to_json()) == config
    # A config.json written before the option existed loads as "all".
    values = json.loads(small_config().to_json())
    del values["embedding_sharing"]
    assert ElectraConfig.from_dict(values).embedding_sharing == "all"
    with pytest.raises(ConfigError, match=r"needs a generator \(--objective electra or electric\)"):
        ElectraPretrainer(config, objective="mlm")


# === Gradients ===


def test_gdes_stops_the_discriminator_loss_at_the_shared_tables():
    model = ElectraPretrainer(small_config("gdes"), seed=0, hyperparameters=TINY_RECIPE)
    shared = list(model.embedding.table_variables().values())[:3]  # word, position, segment
    disc = model.discriminator.embedding
    deltas = [disc.word_delta, disc.position_delta, disc.segment_delta]
    with tf.GradientTape(persistent=True) as tape:
        out = model.compute_objective(batch(), training=True)
    for table in shared:
        assert np.all(gradient(tape, out.losses["disc_loss"], table) == 0.0), table.path
        assert np.abs(gradient(tape, out.losses["mlm_loss"], table)).max() > 0, table.path
    for delta in deltas:
        assert np.abs(gradient(tape, out.losses["disc_loss"], delta)).max() > 0, delta.path
        assert np.all(gradient(tape, out.losses["mlm_loss"], delta) == 0.0), delta.path


def test_under_all_both_losses_reach_the_shared_table():
    model = ElectraPretrainer(small_config("all"), seed=0, hyperparameters=TINY_RECIPE)
    word = model.embedding.token_embedding.embeddings
    with tf.GradientTape(persistent=True) as tape:
        out = model.compute_objective(batch(), training=True)
    for name in ("mlm_loss", "disc_loss"):
        assert np.abs(gradient(tape, out.losses[name], word)).max() > 0, name


# === Variables ===

# The discriminator's own embedding weights in each mode (paths after "discriminator/embedding/").
OWN_WEIGHTS = {
    "all": set(),
    "gdes": {
        "word_delta",
        "position_delta",
        "segment_delta",
        "layer_norm/gamma",
        "layer_norm/beta",
    },
    "word": set(TABLES) - {"token_embedding/embeddings"},
    "none": set(TABLES),
}


@pytest.mark.parametrize("mode", ["all", *MODES])
def test_each_mode_has_its_own_weights_and_a_plain_discriminator(mode, tmp_path):
    model = ElectraPretrainer(small_config(mode), seed=0, hyperparameters=TINY_RECIPE)
    paths = [v.path for v in model.trainable_variables]
    assert len(paths) == len(set(paths))
    assert {p.removeprefix(OWN) for p in paths if p.startswith(OWN)} == OWN_WEIGHTS[mode]
    assert {p.removeprefix(SHARED) for p in paths if p.startswith(SHARED)} == set(TABLES)
    assert model.generator.embedding is model.embedding
    assert model.generator_head.token_embedding is model.embedding.token_embedding
    if mode != "gdes":
        same = model.discriminator.embedding.token_embedding is model.embedding.token_embedding
        assert same == (mode in ("all", "word"))
    # Every embedding weight, a tower's own included, counts as "embeddings".
    for path, part in zip(paths, gradient_parts(model.trainable_variables), strict=True):
        assert (part == "embeddings") == (path.startswith((SHARED, OWN))), path
    if mode == "gdes":
        deltas = [v for v in model.trainable_variables if v.path.endswith("_delta")]
        assert len(deltas) == 3 and all(not np.any(v.numpy()) for v in deltas)

    # The standalone discriminator (fine-tuning, export, conversion) computes the same.
    perturb(model)
    inputs = backbone_inputs(batch(1))
    expected = model.discriminator(inputs).numpy()
    plain = model.discriminator_backbone()
    assert len(plain.embedding.trainable_variables) == len(TABLES)
    np.testing.assert_array_equal(plain(inputs).numpy(), expected)
    if mode == "gdes":  # its word table is the folded shared + delta
        folded = model.embedding.tables()[TABLES[0]] + model.discriminator.embedding.word_delta
        np.testing.assert_array_equal(plain.embedding.tables()[TABLES[0]], folded)

    # Keras saving keeps the mode and every weight.
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.config.embedding_sharing == mode
    np.testing.assert_array_equal(loaded.discriminator(inputs).numpy(), expected)


@pytest.mark.parametrize("mode", MODES)
def test_weights_shared_as_all_start_any_mode_exactly(mode):
    source = ElectraPretrainer(small_config("all"), seed=0, hyperparameters=TINY_RECIPE)
    perturb(source)
    target = ElectraPretrainer(small_config(mode), seed=1, hyperparameters=TINY_RECIPE)
    transfer_weights(source, target)
    inputs = backbone_inputs(batch(2))
    for tower in ("discriminator", "generator"):
        np.testing.assert_array_equal(
            getattr(target, tower)(inputs).numpy(), getattr(source, tower)(inputs).numpy()
        )
    with pytest.raises(ConfigError, match="only 'all' can start any mode"):
        transfer_weights(
            target, ElectraPretrainer(small_config("all"), seed=2, hyperparameters=TINY_RECIPE)
        )


def test_the_health_probe_reads_the_discriminators_effective_word_table():
    from keras_electra.pretraining.health import HealthProbe, mean_pairwise_cosine

    model = ElectraPretrainer(small_config("gdes"), seed=0, hyperparameters=TINY_RECIPE)
    perturb(model)
    probe = HealthProbe(model, batch(3, b=8))
    folded = model.discriminator_backbone().embedding.tables()[TABLES[0]]
    expected = mean_pairwise_cosine(folded[probe.top_tokens])
    assert probe.measure()["embedding_cosine"] == pytest.approx(expected, abs=1e-5)
    shared = mean_pairwise_cosine(model.embedding.tables()[TABLES[0]][probe.top_tokens])
    assert abs(shared - expected) > 1e-4  # the deltas are seen (10x the check above)


# === Runs: save, resume, fine-tune, export, convert ===

RUN = dict(batch_size=4, max_seq_length=16, log_every=1, progress=False, health=False)
TEXTS = ["The king is dead, long live the king.", "What light through yonder window breaks?"]


@pytest.fixture(scope="module")
def vocab_file(small_corpus, tmp_path_factory):
    from keras_electra.data import learn_vocab, save_vocab

    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    save_vocab(learn_vocab([str(small_corpus)], 300, max_lines=400), str(path))
    return path


SIZES = {"num_layers": 1, "hidden_size": 64, "embedding_size": 32, "intermediate_size": 128}


def run_kwargs(mode, vocab_file):
    return dict(RUN, vocab=str(vocab_file), config_overrides={**SIZES, "embedding_sharing": mode})


def write_init_dir(path, mode, vocab_file):
    """An init directory as `keras-electra convert` writes one: a pretrainer at step 0."""
    from keras_electra.training.checkpoints import RunCheckpoints

    tokens = vocab_file.read_text().splitlines()
    config = ElectraConfig.from_preset(
        "tiny", vocab_size=len(tokens), embedding_sharing=mode, **SIZES
    )
    model = ElectraPretrainer(config, seed=5, hyperparameters=TINY_RECIPE)
    perturb(model, seed=5)
    path.mkdir()
    config.save(path / "config.json")
    (path / "vocab.txt").write_text(vocab_file.read_text())
    (path / "run.json").write_text(json.dumps({"preset": "tiny", "objective": "electra"}))
    RunCheckpoints(path / "checkpoints", model, optimizer=None).save(0)
    return path


def disc_logits(model, inputs):
    return np.asarray(model(inputs, training=False))


@pytest.mark.parametrize("mode", MODES)
def test_a_run_round_trips_through_resume_finetune_export_and_hf(
    mode, small_corpus, vocab_file, tmp_path
):
    import torch
    import transformers
    from tfserving_standin import SignatureRunner

    from keras_electra.convert import convert, convert_run
    from keras_electra.encoding import encode_texts
    from keras_electra.export import export
    from keras_electra.finetuning.source import load_backbone
    from keras_electra.pretraining.run import load_run, pretrain

    # gdes continues from weights shared as "all" (a converted checkpoint, say); the
    # others start from random weights.
    init = write_init_dir(tmp_path / "init", "all", vocab_file) if mode == "gdes" else None
    run_dir, kw = tmp_path / "run", run_kwargs(mode, vocab_file)
    first = pretrain([str(small_corpus)], run_dir, steps=2, init=init, **kw)
    settings = json.loads((run_dir / "run.json").read_text())
    assert settings["embedding_sharing"] == mode
    assert json.loads((run_dir / "config.json").read_text())["embedding_sharing"] == mode
    tokenizer = first.tokenizer
    inputs = {
        k: v.numpy() for k, v in encode_texts(tokenizer, tf.constant(TEXTS), max_length=16).items()
    }
    mask = inputs["padding_mask"].astype(bool)
    expected = disc_logits(first.model, inputs)

    # Save: the checkpoint restores the trained model exactly.
    model, _, step = load_run(run_dir)
    assert step == 2 and model.config.embedding_sharing == mode
    np.testing.assert_array_equal(disc_logits(model, inputs), expected)
    hidden = model.discriminator(inputs, training=False).numpy()

    # Resume: another mode is one sentence; the same mode restores model and optimizer
    # (every variable, strictly) and finds the run finished.
    with pytest.raises(ConfigError, match="embedding_sharing='" + mode):
        pretrain([str(small_corpus)], run_dir, steps=2, **run_kwargs("all", vocab_file))
    resumed = pretrain([str(small_corpus)], run_dir, steps=2, **kw)
    assert resumed.step == 2 and resumed.history == first.history  # the run's, read back
    assert int(resumed.model.optimizer.iterations.numpy()) == 2
    np.testing.assert_array_equal(disc_logits(resumed.model, inputs), expected)

    # Fine-tuning starts from a plain backbone with the discriminator's effective tables.
    backbone, _, _ = load_backbone(run_dir)
    gap = np.abs(backbone(inputs, training=False).numpy() - hidden).max()
    assert gap <= TOLERANCE, gap

    # Export: the SavedModel scores what the model scores.
    exported = export(run_dir, tmp_path / "saved")
    runner = SignatureRunner(str(exported))
    try:
        got = runner.run("serving_default", {"text": np.array([t.encode() for t in TEXTS], object)})
    finally:
        runner.close()
    probs = 1.0 / (1.0 + np.exp(-expected.astype("float64")))
    gap = np.abs(got["replaced_prob"][mask] - probs[mask]).max()
    assert gap <= TOLERANCE, gap

    # Hugging Face: each tower's directory loads in transformers and computes what ours does.
    convert_run(run_dir, tmp_path / "hf", "hf")
    disc = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf" / "discriminator")
    gen = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "hf" / "generator")
    args = {
        "input_ids": torch.tensor(inputs["token_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(inputs["padding_mask"], dtype=torch.long),
        "token_type_ids": torch.tensor(inputs["segment_ids"], dtype=torch.long),
    }
    with torch.no_grad():
        theirs = disc.eval()(**args).logits.numpy()
        gen_hidden = gen.eval()(**args, output_hidden_states=True).hidden_states[-1].numpy()
    gap = np.abs(theirs[mask] - expected[mask]).max()
    assert gap <= TOLERANCE, gap
    ours = model.generator(inputs, training=False).numpy()
    gap = np.abs(gen_hidden[mask] - ours[mask]).max()
    assert gap <= TOLERANCE, gap
    # ... and the discriminator converts back (into "all") unchanged.
    back = convert(tmp_path / "hf" / "discriminator", tmp_path / "back", "hf").output
    again, _, _ = load_run(back)
    assert again.config.embedding_sharing == "all"
    np.testing.assert_array_equal(disc_logits(again, inputs), expected)
    if mode == "gdes":  # keras-hub holds the discriminator's tower alone, the same way
        kh = convert_run(run_dir, tmp_path / "kh", "keras-hub").output
        again, _, _ = load_run(convert(kh, tmp_path / "kh_back", "keras-hub").output)
        np.testing.assert_array_equal(again.discriminator(inputs, training=False), hidden)


def test_init_and_objective_errors_are_one_sentence(small_corpus, vocab_file, tmp_path, capsys):
    from keras_electra.cli import main
    from keras_electra.pretraining.run import pretrain

    # A gdes directory cannot start an "all" run: its towers read different tables.
    init = write_init_dir(tmp_path / "init", "gdes", vocab_file)
    with pytest.raises(ConfigError, match="can start only runs with the same mode"):
        pretrain(
            [str(small_corpus)], tmp_path / "a", steps=1, init=init, **run_kwargs("all", vocab_file)
        )
    # The mlm baseline has one tower; nothing is written.
    code = main(
        [
            "pretrain",
            "--corpus",
            str(small_corpus),
            "--output",
            str(tmp_path / "mlm"),
            "--vocab",
            str(vocab_file),
            "--objective",
            "mlm",
            "--embedding-sharing",
            "gdes",
        ]
    )
    assert (
        code == 2
        and "needs a generator (--objective electra or electric)" in capsys.readouterr().err
    )
    assert not (tmp_path / "mlm").exists()
