"""``convert`` meets damaged files and stops: each is one sentence, and a conversion that
fails or is stopped part-way leaves no half-written ``--output`` (the same command runs
again). The models are the real implementations' (tests/test_convert.py builds them)."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest
from test_convert import (
    SIZES,
    VOCAB,
    build_hf_pair,
    build_keras_hub,
    hf_to_tf1_names,
    save_hf_pair,
    write_tf1_checkpoint,
)

import keras_electra.convert as convert_module
from keras_electra.cli import main
from keras_electra.convert import convert, convert_run
from keras_electra.errors import ConfigError
from keras_electra.pretraining import load_run


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    return save_hf_pair(*build_hf_pair(SIZES["projected"], seed=11), folder)


def _siblings(output) -> list[str]:
    return sorted(p.name for p in output.parent.iterdir() if p.name.startswith(f".{output.name}"))


def test_a_truncated_safetensors_file_is_one_sentence(hf_pair, tmp_path):
    # It was safetensors' own traceback ("incomplete metadata, file not fully covered").
    disc_dir, _ = hf_pair
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in os.listdir(disc_dir):
        (bad / name).write_bytes((disc_dir / name).read_bytes())
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20000])
    with pytest.raises(ConfigError) as caught:
        convert(bad, tmp_path / "out", "hf")
    assert str(caught.value).startswith(f"'{weights}' cannot be read as safetensors (")
    assert str(caught.value).endswith("the file is damaged or incomplete: fetch or save it again.")
    assert not (tmp_path / "out").exists()


def test_a_truncated_tf1_checkpoint_is_one_sentence(tmp_path):
    # It was "IndexError: Read less bytes than requested" (the .data file) or "not an
    # sstable (bad magic number)" (the .index file), each with a traceback.
    disc, gen = build_hf_pair(SIZES["projected"], seed=12)
    arrays = {
        **hf_to_tf1_names(disc.state_dict(), "discriminator"),
        **hf_to_tf1_names(gen.state_dict(), "generator"),
    }
    folder = tmp_path / "electra"
    folder.mkdir()
    prefix = folder / "model.ckpt-1"
    write_tf1_checkpoint(arrays, prefix)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    for part in (".data-00000-of-00001", ".index"):
        damaged = tmp_path / f"damaged{part[:6]}"
        damaged.mkdir()
        for name in os.listdir(folder):
            data = (folder / name).read_bytes()
            (damaged / name).write_bytes(data[: len(data) // 3] if name.endswith(part) else data)
        with pytest.raises(ConfigError, match=r"^The checkpoint '.*' cannot be read \(") as caught:
            convert(damaged / "model.ckpt-1", tmp_path / "out", "google", num_heads=2)
        assert "damaged or incomplete: unpack or download it again." in str(caught.value)


def test_a_keras_hub_preset_that_does_not_load_is_one_sentence(tmp_path):
    # A config.json that does not fit the weights was Keras' "A total of 8 objects could not
    # be loaded" traceback; a truncated model.weights.h5 advised freeing disk space.
    _, folder = build_keras_hub(tmp_path)
    spec = json.loads((folder / "config.json").read_text())
    spec["config"]["num_layers"] = 3
    (folder / "config.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigError) as caught:
        convert(folder, tmp_path / "out", "keras-hub")
    assert str(caught.value).startswith(
        f"The keras-hub preset '{folder}' cannot be loaded (A total of "
    )
    spec["config"]["num_layers"] = 2
    (folder / "config.json").write_text(json.dumps(spec))
    weights = folder / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[:3000])
    with pytest.raises(ConfigError, match="its model.weights.h5 is damaged, or does not fit"):
        convert(folder, tmp_path / "out", "keras-hub")


def test_another_implementations_directory_passed_as_a_run_says_to_convert_it(
    hf_pair, tmp_path, capsys
):
    # It was "Unknown ElectraConfig field(s): add_cross_attention, architectures, ...".
    disc_dir, _ = hf_pair
    with pytest.raises(ConfigError) as caught:
        load_run(disc_dir)
    assert str(caught.value) == (
        f"'{disc_dir}' holds a Hugging Face model, not a keras-electra run; convert it first "
        f"(keras-electra convert --from hf {disc_dir} --output NEW_DIR) and pass NEW_DIR, or "
        "pass the Hub's copy as hf:ORG/NAME."
    )
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("w1 w2 w3\n")
    command = ["pretrain", "--init", str(disc_dir), "--corpus", str(corpus), "--dry-run"]
    assert main([*command, "--output", str(tmp_path / "run")]) == 2
    assert "holds a Hugging Face model, not a keras-electra run" in capsys.readouterr().err
    _, hub_folder = build_keras_hub(tmp_path)
    with pytest.raises(
        ConfigError, match=r"holds a keras-hub model.*--from keras-hub .* NEW_DIR\.$"
    ):
        load_run(hub_folder)


def test_a_conversion_stopped_part_way_leaves_no_output_and_runs_again(
    hf_pair, tmp_path, monkeypatch
):
    # A full disk or Ctrl-C after the model files were written left config.json without a
    # checkpoint: the rerun was refused ("already holds a model") and the directory could
    # not be used.
    disc_dir, gen_dir = hf_pair
    output = tmp_path / "ours"
    real = convert_module.write_init_dir

    def stopped(converted, where):
        real(converted, where)
        raise KeyboardInterrupt

    monkeypatch.setattr(convert_module, "write_init_dir", stopped)
    with pytest.raises(KeyboardInterrupt):
        convert(disc_dir, output, "hf", generator=gen_dir)
    assert not output.exists() and _siblings(output) == []
    monkeypatch.setattr(convert_module, "write_init_dir", real)
    result = convert(disc_dir, output, "hf", generator=gen_dir)
    assert load_run(result.output)[2] == 0

    # The other way: --to hf on a disk that fills up while the generator is written.
    written = convert_module.write_hf

    def full(model, tokens, where):
        written(model, tokens, where)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where / "generator"))

    monkeypatch.setattr(convert_module, "write_hf", full)
    back = tmp_path / "back"
    with pytest.raises(OSError):
        convert_run(output, back, "hf")
    assert not back.exists() and _siblings(back) == []
    monkeypatch.setattr(convert_module, "write_hf", written)
    assert sorted(p.name for p in convert_run(output, back, "hf").output.iterdir()) == [
        "discriminator",
        "generator",
    ]


def test_safetensors_reports_a_full_disk_as_the_os_error_it_was(tmp_path):
    # safetensors raised its own SafetensorError ("I/O error: No space left on device (os
    # error 28)"), a traceback; as an OSError the command line says it in one sentence.
    from safetensors import SafetensorError

    from keras_electra.convert.hf import _save_safetensors

    def no_room(tensors, path, metadata):
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    target = tmp_path / "model.safetensors"
    with pytest.raises(OSError) as caught:
        _save_safetensors({"a": np.zeros(2, "float32")}, target, no_room)
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(target))


def test_num_heads_0_with_another_format_is_refused_as_any_value_is(hf_pair, tmp_path, capsys):
    # `--from hf DIR --num-heads 0` converted without a word: 0 read as "not given".
    disc_dir, _ = hf_pair
    command = ["convert", "--from", "hf", str(disc_dir), "--output", str(tmp_path / "o")]
    assert main([*command, "--num-heads", "0"]) == 2
    assert "--num-heads applies to --from google only." in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
