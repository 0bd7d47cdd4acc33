"""Interop: Hugging Face, google-research TF1 and keras-hub checkpoints, with parity.

The references are the real implementations, built here with random weights
(no downloads): transformers' ``ElectraForPreTraining`` / ``ElectraForMaskedLM``
on PyTorch, a TF1 checkpoint written by ``tf.compat.v1.train.Saver`` under the
original variable names, and keras-hub's ``ElectraBackbone``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import OnFirstUse

from keras_electra.cli import main
from keras_electra.convert import convert, convert_run, read_google, read_hf
from keras_electra.convert.core import write_init_dir
from keras_electra.errors import ConfigError
from keras_electra.pretraining.run import load_run

torch, transformers, keras_hub = (OnFirstUse(n) for n in ("torch", "transformers", "keras_hub"))

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
TOLERANCE = 1e-4

# Two shapes: embeddings narrower than both towers (projections in both), and
# embeddings as wide as the discriminator with a full-width generator (Small++-like:
# no projection anywhere).
SIZES = {
    "projected": dict(embedding=32, hidden=64, heads=2, layers=2, generator_hidden=32),
    "unprojected": dict(embedding=64, hidden=64, heads=1, layers=2, generator_hidden=64),
}


def hf_config(sizes: dict, tower: str) -> transformers.ElectraConfig:
    hidden = sizes["hidden"] if tower == "discriminator" else sizes["generator_hidden"]
    heads = sizes["heads"] if tower == "discriminator" else max(1, hidden // 64)
    return transformers.ElectraConfig(
        vocab_size=len(VOCAB),
        embedding_size=sizes["embedding"],
        hidden_size=hidden,
        num_hidden_layers=sizes["layers"],
        num_attention_heads=heads,
        intermediate_size=4 * hidden if tower == "generator" else 2 * hidden,
        max_position_embeddings=40,
    )


def build_hf_pair(sizes: dict, seed: int = 0):
    """A random HF discriminator + generator sharing one embedding module, like ELECTRA."""
    torch.manual_seed(seed)
    disc = transformers.ElectraForPreTraining(hf_config(sizes, "discriminator")).eval()
    gen = transformers.ElectraForMaskedLM(hf_config(sizes, "generator")).eval()
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    with torch.no_grad():  # move every tensor off its initial value (LayerNorm 1/0, zero biases)
        seen = set()
        for model in (disc, gen):
            for p in model.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    p.add_(0.05 * torch.randn_like(p))
    return disc, gen


def save_hf_pair(disc, gen, folder) -> tuple:
    disc_dir, gen_dir = folder / "disc", folder / "gen"
    disc.save_pretrained(disc_dir, safe_serialization=True)
    gen.save_pretrained(gen_dir, safe_serialization=True)
    (disc_dir / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (disc_dir / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return disc_dir, gen_dir


def batch(seed: int = 1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, len(VOCAB), (3, 12)).astype("int32")
    ids[:, 0] = 2
    mask = np.ones_like(ids)
    mask[1, 8:] = 0  # padding
    ids[1, 8:] = 0
    segments = np.zeros_like(ids)
    segments[:, 6:] = 1
    return ids, mask, segments


def hf_outputs(disc, gen, ids, mask, segments) -> dict:
    args = dict(
        input_ids=torch.tensor(ids, dtype=torch.long),
        attention_mask=torch.tensor(mask, dtype=torch.long),
        token_type_ids=torch.tensor(segments, dtype=torch.long),
        output_hidden_states=True,
    )
    with torch.no_grad():
        d, g = disc(**args), gen(**args)
    return {
        "disc_logits": d.logits.numpy(),
        "disc_hidden": d.hidden_states[-1].numpy(),
        "gen_logits": g.logits.numpy(),
        "gen_hidden": g.hidden_states[-1].numpy(),
    }


def our_outputs(model, ids, mask, segments) -> dict:
    inputs = {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}
    disc_hidden = model.discriminator(inputs, training=False)
    gen_hidden = model.generator(inputs, training=False)
    positions = np.tile(np.arange(ids.shape[1], dtype="int32"), (ids.shape[0], 1))
    return {
        "disc_logits": np.asarray(model.discriminator_head(disc_hidden)),
        "disc_hidden": np.asarray(disc_hidden),
        "gen_logits": np.asarray(model.generator_head(gen_hidden, positions)),
        "gen_hidden": np.asarray(gen_hidden),
    }


def max_gaps(ours: dict, theirs: dict, mask) -> dict:
    real = mask.astype(bool)
    return {k: float(np.max(np.abs(ours[k][real] - theirs[k][real]))) for k in theirs}


def assert_parity(ours: dict, theirs: dict, mask) -> None:
    gaps = max_gaps(ours, theirs, mask)
    assert max(gaps.values()) < TOLERANCE, gaps


def weights_of(model) -> dict:
    return {
        v.path: np.asarray(v.numpy()) for v in model.variables if "seed_generator" not in v.path
    }


# === Hugging Face ===


@pytest.mark.parametrize("shape", sorted(SIZES))
def test_hf_pair_converts_with_parity(tmp_path, shape):
    disc, gen = build_hf_pair(SIZES[shape])
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    result = convert(disc_dir, tmp_path / "ours", "hf", generator=gen_dir)
    model, tokenizer, step = load_run(result.output)
    assert step == 0 and tokenizer.vocab == VOCAB
    sizes = SIZES[shape]
    assert model.config.generator_config().hidden_size == sizes["generator_hidden"]
    assert (model.discriminator.encoder.projection is None) == (shape == "unprojected")
    ids, mask, segments = batch()
    assert_parity(
        our_outputs(model, ids, mask, segments), hf_outputs(disc, gen, ids, mask, segments), mask
    )


@pytest.mark.parametrize("einsum", [False, True], ids=["dense", "einsum-dense"])
def test_tf_model_h5_converts_with_parity(tmp_path, einsum):
    """transformers' TF weights file (what the Hub's older repositories publish beside
    pytorch_model.bin) in place of model.safetensors: read with h5py, same outputs."""
    from hf_hub_standin import tf_weights_h5

    disc, gen = build_hf_pair(SIZES["projected"], seed=7)
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    for folder, model in ((disc_dir, disc), (gen_dir, gen)):
        (folder / "model.safetensors").unlink()
        state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        heads = model.config.num_attention_heads if einsum else None
        (folder / "tf_model.h5").write_bytes(tf_weights_h5(state, heads=heads))
    result = convert(disc_dir, tmp_path / "ours", "hf", generator=gen_dir)
    model, _, _ = load_run(result.output)
    ids, mask, segments = batch()
    assert_parity(
        our_outputs(model, ids, mask, segments), hf_outputs(disc, gen, ids, mask, segments), mask
    )
    (disc_dir / "tf_model.h5").write_bytes(b"not HDF5")
    with pytest.raises(ConfigError, match="cannot be read as HDF5"):
        convert(disc_dir, tmp_path / "bad", "hf")
    (disc_dir / "tf_model.h5").unlink()
    (disc_dir / "pytorch_model.bin").write_bytes(b"a pickle")
    with pytest.raises(
        ConfigError, match="only pytorch_model.bin, a pickle keras-electra does not"
    ):
        convert(disc_dir, tmp_path / "pickle", "hf")


def test_ours_to_hf_loads_in_transformers_and_round_trips_exactly(tmp_path):
    disc, gen = build_hf_pair(SIZES["projected"], seed=3)
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    first = convert(disc_dir, tmp_path / "ours", "hf", generator=gen_dir).output
    model, _, _ = load_run(first)

    assert (
        main(["convert", "--to", "hf", "--run", str(first), "--output", str(tmp_path / "hf")]) == 0
    )
    disc2, info_d = transformers.ElectraForPreTraining.from_pretrained(
        tmp_path / "hf" / "discriminator", output_loading_info=True
    )
    gen2, info_g = transformers.ElectraForMaskedLM.from_pretrained(
        tmp_path / "hf" / "generator", output_loading_info=True
    )
    for info in (info_d, info_g):
        assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids, mask, segments = batch(seed=2)
    assert_parity(
        our_outputs(model, ids, mask, segments),
        hf_outputs(disc2.eval(), gen2.eval(), ids, mask, segments),
        mask,
    )
    # ours -> HF -> ours is exact, tensor by tensor.
    second = convert(
        tmp_path / "hf", tmp_path / "again", "hf"
    ).output  # discriminator/ + generator/
    again, _, _ = load_run(second)
    before, after = weights_of(model), weights_of(again)
    assert before.keys() == after.keys()
    for path in before:
        np.testing.assert_array_equal(before[path], after[path], err_msg=path)


def test_discriminator_alone_converts_and_reports_random_generator(tmp_path):
    disc, gen = build_hf_pair(SIZES["projected"], seed=4)
    disc_dir, _ = save_hf_pair(disc, gen, tmp_path)
    result = convert(disc_dir, tmp_path / "ours", "hf")
    assert any("generator" in note and "random" in note for note in result.notes), result.notes
    model, _, _ = load_run(result.output)
    ids, mask, segments = batch()
    ours, theirs = (
        our_outputs(model, ids, mask, segments),
        hf_outputs(disc, gen, ids, mask, segments),
    )
    for key in ("disc_logits", "disc_hidden"):
        assert max_gaps({key: ours[key]}, {key: theirs[key]}, mask)[key] < TOLERANCE


def test_hf_errors_name_the_mismatch(tmp_path):
    disc, gen = build_hf_pair(SIZES["projected"], seed=5)
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    # A generator trained separately: its embeddings are not the discriminator's.
    _, other = build_hf_pair(SIZES["projected"], seed=6)
    other.save_pretrained(tmp_path / "other", safe_serialization=True)
    with pytest.raises(ConfigError, match="differs from the discriminator's"):
        convert(disc_dir, tmp_path / "a", "hf", generator=tmp_path / "other")
    # A generator whose heads break ELECTRA's sizing rule.
    odd = transformers.ElectraConfig(
        **{**hf_config(SIZES["projected"], "generator").to_dict(), "num_attention_heads": 2}
    )
    bad = transformers.ElectraForMaskedLM(odd)
    bad.electra.embeddings = disc.electra.embeddings
    bad.save_pretrained(tmp_path / "odd", safe_serialization=True)
    with pytest.raises(ConfigError, match="2 heads"):
        convert(disc_dir, tmp_path / "b", "hf", generator=tmp_path / "odd")
    # Generator passed where the discriminator goes.
    (gen_dir / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    with pytest.raises(ConfigError, match="holds a generator"):
        convert(gen_dir, tmp_path / "c", "hf")
    # Approximate GELU is not ELECTRA's.
    config = json.loads((disc_dir / "config.json").read_text())
    (disc_dir / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu_new"}))
    with pytest.raises(ConfigError, match="gelu_new"):
        convert(disc_dir, tmp_path / "d", "hf")
    # A config.json without the sizes, or not JSON at all: one sentence, nothing written.
    without = {k: v for k, v in config.items() if k not in ("vocab_size", "num_hidden_layers")}
    (disc_dir / "config.json").write_text(json.dumps(without))
    with pytest.raises(ConfigError, match=r"config.json' has no vocab_size, num_hidden_layers;"):
        convert(disc_dir, tmp_path / "f", "hf")
    (disc_dir / "config.json").write_text('{"model_type": "electra",')
    with pytest.raises(ConfigError, match=r"config.json' is not valid JSON \("):
        convert(disc_dir, tmp_path / "g", "hf")
    assert not (tmp_path / "f").exists() and not (tmp_path / "g").exists()
    # The command: one sentence, exit 2.
    assert (
        main(
            ["convert", "--from", "hf", str(tmp_path / "missing"), "--output", str(tmp_path / "e")]
        )
        == 2
    )


def test_hf_discriminator_passed_as_the_generator_is_named(tmp_path):
    disc, gen = build_hf_pair(SIZES["projected"], seed=5)
    disc_dir, _ = save_hf_pair(disc, gen, tmp_path)
    # Not "2 heads and feed-forward size 128": the directory holds the wrong model.
    with pytest.raises(ConfigError, match=r"holds a discriminator \(ElectraForPreTraining\), not"):
        convert(disc_dir, tmp_path / "a", "hf", generator=disc_dir)
    assert not (tmp_path / "a").exists()


def test_hf_config_layer_count_other_than_the_weights_is_named(tmp_path):
    disc, gen = build_hf_pair(SIZES["projected"], seed=5)  # two layers
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    config = json.loads((disc_dir / "config.json").read_text())
    for said in (1, 3):  # not "16 weight(s) ELECTRA has no place for", nor "missing"
        (disc_dir / "config.json").write_text(json.dumps({**config, "num_hidden_layers": said}))
        with pytest.raises(
            ConfigError, match=f"says num_hidden_layers {said}, but the weights hold 2 layers;"
        ):
            convert(disc_dir, tmp_path / f"a{said}", "hf")
    (disc_dir / "config.json").write_text(json.dumps(config))
    generator = json.loads((gen_dir / "config.json").read_text())
    (gen_dir / "config.json").write_text(json.dumps({**generator, "num_hidden_layers": 1}))
    with pytest.raises(ConfigError, match=r"gen/config.json' says num_hidden_layers 1, but"):
        convert(disc_dir, tmp_path / "b", "hf", generator=gen_dir)


def test_a_directory_saved_with_transformers_5_reads_its_tokenizer_json(tmp_path):
    # transformers 5's tokenizers save tokenizer.json and tokenizer_config.json, no
    # vocab.txt: "'DIR' has no vocab.txt; copy the model's vocabulary next to it."
    disc, gen = build_hf_pair(SIZES["projected"], seed=14)
    disc_dir, _ = save_hf_pair(disc, gen, tmp_path)
    (tmp_path / "vocab.txt").write_bytes((disc_dir / "vocab.txt").read_bytes())
    for name in ("vocab.txt", "tokenizer_config.json"):
        (disc_dir / name).unlink()
    for cased in (True, False):
        tokenizer = transformers.ElectraTokenizer(
            vocab=str(tmp_path / "vocab.txt"), do_lower_case=not cased
        )
        tokenizer.save_pretrained(disc_dir)
        assert not (disc_dir / "vocab.txt").exists()  # what transformers 5 writes
        converted = read_hf(disc_dir)
        assert converted.tokens == VOCAB and converted.config.lowercase is not cased
    result = convert(disc_dir, tmp_path / "ours", "hf")
    model, loaded, _ = load_run(result.output)
    assert loaded.vocab == VOCAB
    ids, mask, segments = batch()
    ours = our_outputs(model, ids, mask, segments)["disc_logits"]
    theirs = hf_outputs(disc, gen, ids, mask, segments)["disc_logits"]
    assert max_gaps({"d": ours}, {"d": theirs}, mask)["d"] < TOLERANCE


def test_tokenizer_json_lowercasing_and_what_is_refused(tmp_path):
    from keras_electra.convert.hf import read_tokenizer_json

    path = tmp_path / "tokenizer.json"
    vocab = {token: i for i, token in enumerate(VOCAB)}

    def read(normalizer, model=None):
        model = model or {"type": "WordPiece", "vocab": vocab}
        path.write_text(json.dumps({"normalizer": normalizer, "model": model}))
        return read_tokenizer_json(path)

    lowercase = {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]}
    assert read(lowercase) == (VOCAB, True)
    assert read({"type": "Sequence", "normalizers": [{"type": "NFD"}]})[1] is False
    assert read({"type": "BertNormalizer", "lowercase": False})[1] is False
    assert read(None)[1] is None  # tokenizer_config.json's do_lower_case decides
    for kind in ("BPE", "Unigram"):
        with pytest.raises(ConfigError) as caught:
            read(None, {"type": kind, "vocab": vocab if kind == "BPE" else [["a", 0.0]]})
        assert str(caught.value) == (
            f"'{path}' holds a {kind} tokenizer, but ELECTRA conversion needs a WordPiece "
            "vocabulary (a BERT-style vocab.txt, or a tokenizer.json whose model is WordPiece); "
            "pass the model's own vocabulary."
        )
    gap = {**vocab, "w58": len(VOCAB) + 3}
    with pytest.raises(ConfigError) as caught:
        read(None, {"type": "WordPiece", "vocab": gap})
    assert str(caught.value) == (
        f"The WordPiece vocabulary in '{path}' does not number its {len(VOCAB)} tokens 0 to "
        f"{len(VOCAB) - 1} (id {len(VOCAB) + 3} where {len(VOCAB) - 1} comes next); save the "
        "tokenizer again with save_pretrained."
    )


def test_a_vocab_txt_with_a_byte_order_mark_reads(tmp_path):
    # Its first token was read as "\ufeff[PAD]": "... has no [PAD] token".
    disc, gen = build_hf_pair(SIZES["projected"], seed=15)
    disc_dir, _ = save_hf_pair(disc, gen, tmp_path)
    (disc_dir / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8-sig")
    assert (disc_dir / "vocab.txt").read_bytes().startswith(b"\xef\xbb\xbf[PAD]")
    assert read_hf(disc_dir).tokens == VOCAB


# === google-research TF1 ===


def hf_to_tf1_names(state: dict, tower: str) -> dict:
    """The original variable names for an HF state dict, spelled out independently here."""
    scope = "electra" if tower == "discriminator" else "generator"
    out = {}
    for name, value in state.items():
        value = value.detach().numpy()
        if name.startswith("electra.embeddings."):
            if tower == "generator":
                continue  # shared: written once, under electra/embeddings
            leaf = name.removeprefix("electra.embeddings.")
            tf_name = {
                "word_embeddings.weight": "electra/embeddings/word_embeddings",
                "position_embeddings.weight": "electra/embeddings/position_embeddings",
                "token_type_embeddings.weight": "electra/embeddings/token_type_embeddings",
                "LayerNorm.weight": "electra/embeddings/LayerNorm/gamma",
                "LayerNorm.bias": "electra/embeddings/LayerNorm/beta",
            }[leaf]
        elif name == "generator_lm_head.weight":
            continue  # tied to the word embeddings
        elif name == "generator_lm_head.bias":
            tf_name = "generator_predictions/output_bias"
        else:
            path = name.replace("electra.", f"{scope}.", 1).replace(
                "encoder.layer.", "encoder.layer_"
            )
            path = path.replace("dense_prediction", "dense_1").replace(".", "/")
            if "LayerNorm" in path:
                path = path.replace("/weight", "/gamma").replace("/bias", "/beta")
            else:
                path = path.replace("/weight", "/kernel")
                value = value.T
            tf_name = path
        out[tf_name] = value
    return out


def write_tf1_checkpoint(arrays: dict, prefix) -> None:
    graph = tf.Graph()
    with graph.as_default():
        variables = []
        for name, value in arrays.items():
            variables.append(tf.compat.v1.get_variable(name, initializer=tf.constant(value)))
            for slot in ("adam_m", "adam_v"):  # optimizer slots, as in the released checkpoints
                tf.compat.v1.get_variable(f"{name}/{slot}", initializer=tf.zeros_like(value))
        tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, str(prefix))


def test_tf1_checkpoint_with_original_names_loads_with_parity(tmp_path):
    disc, gen = build_hf_pair(SIZES["projected"], seed=7)
    arrays = {
        **hf_to_tf1_names(disc.state_dict(), "discriminator"),
        **hf_to_tf1_names(gen.state_dict(), "generator"),
    }
    folder = tmp_path / "electra_tiny"
    folder.mkdir()
    write_tf1_checkpoint(arrays, folder / "model.ckpt-1000")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")

    code = main(
        [
            "convert",
            "--from",
            "google",
            str(folder / "model.ckpt-1000"),
            "--num-heads",
            "2",
            "--output",
            str(tmp_path / "ours"),
        ]
    )
    assert code == 0
    model, _, _ = load_run(tmp_path / "ours")
    record = json.loads((tmp_path / "ours" / "convert.json").read_text())
    assert record["parts"] == [
        "embeddings",
        "discriminator",
        "discriminator head",
        "generator",
        "generator head",
    ]
    assert any("optimizer" in note for note in record["notes"])
    ids, mask, segments = batch(seed=8)
    assert_parity(
        our_outputs(model, ids, mask, segments), hf_outputs(disc, gen, ids, mask, segments), mask
    )


def test_tf1_generator_size_mismatch_is_named(tmp_path):
    sizes = SIZES["unprojected"]  # full-width generator, like Small++
    disc, gen = build_hf_pair(sizes, seed=9)
    arrays = {
        **hf_to_tf1_names(disc.state_dict(), "discriminator"),
        **hf_to_tf1_names(gen.state_dict(), "generator"),
    }
    write_tf1_checkpoint(arrays, tmp_path / "model.ckpt-1")
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    converted = read_google(tmp_path / "model.ckpt-1")
    assert converted.config.generator_hidden_size == 1.0
    # The user's configuration says a quarter-width generator (Small's), the checkpoint is 1.0.
    converted.config = converted.config.replace(generator_hidden_size=0.25)
    with pytest.raises(ConfigError, match="generator_hidden_size 0.25.*small\\+\\+"):
        write_init_dir(converted, tmp_path / "out")
    with pytest.raises(ConfigError, match="No vocab.txt next to"):
        (tmp_path / "vocab.txt").unlink()
        read_google(tmp_path / "model.ckpt-1")


def test_tf1_preset_of_another_width_names_the_discriminator_and_zero_heads_are_refused(
    tmp_path, capsys
):
    disc, gen = build_hf_pair(SIZES["projected"], seed=9)  # 64 wide, generator 32
    arrays = {
        **hf_to_tf1_names(disc.state_dict(), "discriminator"),
        **hf_to_tf1_names(gen.state_dict(), "generator"),
    }
    write_tf1_checkpoint(arrays, tmp_path / "model.ckpt-1")
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    prefix = str(tmp_path / "model.ckpt-1")
    # The whole model is narrower than --preset's: not "the generator is 32 wide ... use
    # preset small++", the preset passed.
    args = ["convert", "--from", "google", prefix, "--preset", "small++", "--output"]
    assert main([*args, str(tmp_path / "a")]) == 2
    error = capsys.readouterr().err
    assert (
        "The discriminator in '" + prefix + "' is 64 wide, but the configuration says "
        "hidden_size 256; leave out --preset to read the sizes from the checkpoint." in error
    ), error
    # --num-heads 0 is refused as -2 is, not replaced by the default.
    for heads in ("0", "-2"):
        args = ["convert", "--from", "google", prefix, "--num-heads", heads, "--output"]
        assert main([*args, str(tmp_path / f"heads{heads}")]) == 2
        error = capsys.readouterr().err
        assert f"num_heads must be a positive integer, got {heads}." in error, error
        assert not (tmp_path / f"heads{heads}").exists()


def test_tf1_directory_takes_its_latest_checkpoint_by_step_and_says_which(tmp_path, capfd):
    # Without a usable `checkpoint` file the last *.index in alphabetical order was read:
    # model.ckpt-999 over model.ckpt-1000; with a stale one TensorFlow first logged
    # "ERROR:tensorflow:Couldn't match files for checkpoint ..." to stderr.
    disc, gen = build_hf_pair(SIZES["projected"], seed=13)
    arrays = {
        **hf_to_tf1_names(disc.state_dict(), "discriminator"),
        **hf_to_tf1_names(gen.state_dict(), "generator"),
    }
    folder = tmp_path / "run"
    folder.mkdir()
    table = "electra/embeddings/word_embeddings"
    write_tf1_checkpoint(arrays, folder / "model.ckpt-1000")
    write_tf1_checkpoint({k: v + 1.0 for k, v in arrays.items()}, folder / "model.ckpt-999")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    latest, older = str(folder / "model.ckpt-1000"), str(folder / "model.ckpt-999")
    # The checkpoint file (the last save wrote it: 999) is what TensorFlow calls the latest.
    converted = read_google(folder, num_heads=2)
    np.testing.assert_array_equal(converted.weights[table], arrays[table] + 1.0)
    assert converted.notes[0] == (
        f"Read '{older}', the latest of the 2 checkpoints in '{folder}' by its checkpoint file."
    )
    # No checkpoint file: the highest step.
    (folder / "checkpoint").unlink()
    converted = read_google(folder, num_heads=2)
    np.testing.assert_array_equal(converted.weights[table], arrays[table])
    assert converted.notes[0] == (
        f"Read '{latest}', the latest of the 2 checkpoints in '{folder}' by step number (it "
        "has no checkpoint file naming its latest)."
    )
    # Copied from the machine that wrote it: the file of that name here.
    (folder / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/model.ckpt-1000"\n')
    converted = read_google(folder, num_heads=2)
    np.testing.assert_array_equal(converted.weights[table], arrays[table])
    assert converted.notes[0] == (
        f"Read '{latest}', the checkpoint '{folder}/checkpoint' names as "
        "'/elsewhere/model.ckpt-1000'."
    )
    # A stale checkpoint file: the highest step, said on the command line, no TF log line.
    (folder / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-2000"\nall_model_checkpoint_paths: "model.ckpt-2000"\n'
    )
    capfd.readouterr()
    args = ["convert", "--from", "google", str(folder), "--num-heads", "2", "--output"]
    assert main([*args, str(tmp_path / "ours")]) == 0
    out, err = capfd.readouterr()
    assert f"note: Read '{latest}', the latest of the 2 checkpoints in '{folder}' by step " in out
    assert "names 'model.ckpt-2000', which is not there)." in out
    assert "Couldn't match files" not in err and "ERROR" not in err, err
    record = json.loads((tmp_path / "ours" / "convert.json").read_text())
    assert record["notes"][0].startswith(f"Read '{latest}', the latest of the 2 checkpoints")
    model, _, _ = load_run(tmp_path / "ours")
    ids, mask, segments = batch(seed=8)
    assert_parity(
        our_outputs(model, ids, mask, segments), hf_outputs(disc, gen, ids, mask, segments), mask
    )


# === keras-hub ===


def build_keras_hub(tmp_path):
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=len(VOCAB),
        num_layers=2,
        num_heads=2,
        hidden_dim=64,
        embedding_dim=32,
        intermediate_dim=128,
        max_sequence_length=40,
    )
    rng = np.random.default_rng(0)
    for v in backbone.weights:
        v.assign(np.asarray(v.numpy()) + rng.normal(0, 0.05, v.shape).astype("float32"))
    folder = tmp_path / "keras_hub"
    backbone.save_to_preset(str(folder))
    keras_hub.models.ElectraTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(str(folder))
    return backbone, folder


def test_keras_hub_weights_land_in_place_and_outputs_agree(tmp_path):
    backbone, folder = build_keras_hub(tmp_path)
    result = convert(folder, tmp_path / "ours", "keras-hub")
    assert any("pooler" in note and "not converted" in note for note in result.notes), result.notes
    assert any("tanh-approximate GELU" in note for note in result.notes)
    model, _, _ = load_run(result.output)
    # Tensor by tensor: every keras-hub weight but the pooler sits at the same path in our tower.
    ours = {v.path: np.asarray(v.numpy()) for v in model.discriminator.weights}
    compared = 0
    for v in backbone.weights:
        if v.path.startswith("pooled_dense"):
            continue
        path = v.path.replace("embeddings_layer_norm", "layer_norm")
        path = path.replace("embeddings_projection", "projection")
        match = [p for p in ours if p.endswith("/" + path)]
        assert len(match) == 1, (v.path, match)
        np.testing.assert_array_equal(ours[match[0]], np.asarray(v.numpy()), err_msg=v.path)
        compared += 1
    assert compared == len(backbone.weights) - 2

    ids, mask, segments = batch()
    inputs = {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}
    theirs = np.asarray(backbone(inputs)["sequence_output"])
    our_hidden = np.asarray(model.discriminator(inputs, training=False))
    gap = float(np.max(np.abs(our_hidden - theirs)[mask.astype(bool)]))
    # tanh-approximate vs exact GELU differ by at most 4.7e-4 per activation; over two
    # layers the hidden states differ by ~1.4e-4 (measured), bounded here by 1e-3.
    assert 0 < gap < 1e-3, gap
    # And that is the whole difference: with keras-hub's GELU our tower matches to 1e-5.
    for layer in model.discriminator.encoder.transformer_layers:
        layer._feedforward_intermediate_dense.activation = (
            keras_hub.src.utils.keras_utils.gelu_approximate
        )
    same_gelu = np.asarray(model.discriminator(inputs, training=False))
    assert float(np.max(np.abs(same_gelu - theirs)[mask.astype(bool)])) < 1e-5


def test_ours_to_keras_hub_round_trips(tmp_path):
    _, folder = build_keras_hub(tmp_path)
    first = convert(folder, tmp_path / "ours", "keras-hub").output
    result = convert_run(first, tmp_path / "back", "keras-hub")
    assert any("pooler" in note for note in result.notes)
    again = convert(result.output, tmp_path / "again", "keras-hub").output
    a, b = load_run(first)[0], load_run(again)[0]
    before = {v.path: np.asarray(v.numpy()) for v in a.discriminator.weights}
    after = {v.path: np.asarray(v.numpy()) for v in b.discriminator.weights}
    for path in before:
        np.testing.assert_array_equal(before[path], after[path], err_msg=path)


# === Using a converted directory ===


def test_converted_directory_pretrains_finetunes_and_exports(tmp_path, small_corpus):
    from keras_electra.export import export
    from keras_electra.pretraining.run import pretrain

    disc, gen = build_hf_pair(SIZES["projected"], seed=10)
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    init = convert(disc_dir, tmp_path / "init", "hf", generator=gen_dir).output
    # Continue pretraining from it: step 0 has the converted weights.
    result = pretrain(
        [str(small_corpus)],
        tmp_path / "run",
        init=init,
        steps=2,
        batch_size=4,
        max_seq_length=32,
        log_every=1,
        progress=False,
    )
    assert result.step == 2
    assert load_run(tmp_path / "run")[0].config == load_run(init)[0].config
    exported = export(init, tmp_path / "saved")
    assert (exported / "saved_model.pb").is_file()
    # Fine-tune from it (the command's --init).
    rows = "\n".join(f"w{i % 50} w{(i * 7) % 50},{i % 2}" for i in range(16))
    (tmp_path / "train.csv").write_text("text,label\n" + rows + "\n")
    code = main(
        [
            "finetune",
            "--init",
            str(init),
            "--task",
            "classify",
            "--train",
            str(tmp_path / "train.csv"),
            "--output",
            str(tmp_path / "cls"),
            "--epochs",
            "1",
            "--max-seq-length",
            "16",
            "--quiet",
        ]
    )
    assert code == 0 and (tmp_path / "cls" / "finetune.json").is_file()


def test_a_converted_tiny_model_pretrains_with_the_tiny_presets_temperature(tmp_path, small_corpus):
    from keras_electra.pretraining import save_run
    from keras_electra.pretraining.run import pretrain

    disc, gen = build_hf_pair(SIZES["projected"], seed=10)  # tiny-sized: hidden 64
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    init = convert(disc_dir, tmp_path / "init", "hf", generator=gen_dir).output
    assert json.loads((init / "run.json").read_text())["preset"] == "tiny"
    # It records no hyperparameters: --temperature's default is the preset's (tiny's 2),
    # as the flag's help says, not the objective's 1.
    corpus, run = [str(small_corpus)], tmp_path / "run"
    plan = pretrain(corpus, run, init=str(init), max_seq_length=32, dry_run=True)
    assert plan.settings.preset == "tiny" and plan.settings.temperature == 2.0
    assert plan.objective.hyperparameters.temperature == 2.0
    given = pretrain(corpus, run, init=str(init), max_seq_length=32, temperature=1.5, dry_run=True)
    assert given.settings.temperature == 1.5
    # save_run into it names why it refuses: the directory, not the model.
    model, tokenizer, _ = load_run(init)
    with pytest.raises(ConfigError, match=r"holds a converted model .*; save into a new dir"):
        save_run(model, tokenizer, init)


def test_a_converted_small_plus_plus_model_is_recorded_as_small_plus_plus(tmp_path, small_corpus):
    from keras_electra.pretraining.run import pretrain

    # The released ELECTRA-Small's sizes (a small vocabulary): a generator as wide as the
    # discriminator, which alone tells it from Small.
    sizes = dict(embedding=128, hidden=256, heads=4, layers=12, generator_hidden=256)
    positions = {"max_position_embeddings": 512}
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(
        transformers.ElectraConfig(
            **{
                **hf_config(sizes, "discriminator").to_dict(),
                **positions,
                "intermediate_size": 1024,
            }
        )
    )
    gen = transformers.ElectraForMaskedLM(
        transformers.ElectraConfig(**{**hf_config(sizes, "generator").to_dict(), **positions})
    )
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    disc_dir, gen_dir = save_hf_pair(disc, gen, tmp_path)
    init = convert(disc_dir, tmp_path / "init", "hf", generator=gen_dir).output
    assert json.loads((init / "run.json").read_text())["preset"] == "small++"
    # pretrain --init takes Small++'s recipe: 512-token sequences, not Small's 128.
    plan = pretrain([str(small_corpus)], tmp_path / "run", init=str(init), dry_run=True)
    assert plan.settings.preset == "small++" and plan.settings.max_seq_length == 512


# === Presets of the released models ===


@pytest.mark.parametrize(
    "preset, discriminator, generator",
    [
        # (hidden, layers, heads, intermediate, embedding) of google/electra-*-discriminator
        # and (hidden, layers, heads, intermediate) of google/electra-*-generator.
        ("small++", (256, 12, 4, 1024, 128), (256, 12, 4, 1024)),
        ("base", (768, 12, 12, 3072, 768), (256, 12, 4, 1024)),
        ("large", (1024, 24, 16, 4096, 1024), (256, 24, 4, 1024)),
    ],
)
def test_presets_describe_the_released_models(preset, discriminator, generator):
    from keras_electra.config import ElectraConfig

    config = ElectraConfig.from_preset(preset)
    assert (
        config.hidden_size,
        config.num_layers,
        config.num_heads,
        config.intermediate_size,
        config.embedding_size,
    ) == discriminator
    g = config.generator_config()
    assert (g.hidden_size, g.num_layers, g.num_heads, g.intermediate_size) == generator
    assert (config.vocab_size, config.max_position_embeddings) == (30522, 512)
