"""A pretrainer trained in a user's own script (``model.fit``) goes on to fine-tuning,
export and serving: ``save_run`` writes it as a run directory (docs/pretraining.md, "From
Python"), and the page's snippet runs as written, on tiny sizes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from doc_snippets import snippet, swapped
from tfserving_standin import SignatureRunner

from keras_electra.data import ElectraTokenizer, learn_vocab, pretraining_dataset
from keras_electra.errors import ConfigError
from keras_electra.finetuning import finetune
from keras_electra.pretraining import ElectraPretrainer, load_run, save_run
from keras_electra.pretraining.run import pretrain
from keras_electra.run_directory import RunDirectory
from keras_electra.training.optimizer import create_optimizer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fitted(small_corpus):
    """A one-layer tiny pretrainer after three steps of ``model.fit``, its tokenizer and
    its data."""
    tokenizer = ElectraTokenizer(learn_vocab([str(small_corpus)], 2000))
    model = ElectraPretrainer.from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, seed=0, num_layers=1
    )
    model.compile(
        optimizer=create_optimizer(model, learning_rate=5e-4, total_steps=10, warmup_steps=1)
    )
    data = pretraining_dataset([str(small_corpus)], tokenizer, batch_size=8, max_seq_length=32)
    model.fit(data, steps_per_epoch=3, epochs=1, verbose=0)
    return model, tokenizer, data


def test_a_fitted_model_saved_as_a_run_loads_back_and_saves_on(fitted, tmp_path):
    model, tokenizer, data = fitted
    run_dir = tmp_path / "run"
    assert save_run(model, tokenizer, run_dir) == str(run_dir / "checkpoints" / "ckpt-3")
    loaded, loaded_tokenizer, step = load_run(run_dir)
    assert step == 3 and loaded_tokenizer.vocab == tokenizer.vocab
    assert loaded.objective == model.objective == "electra"
    assert loaded.hyperparameters == model.hyperparameters
    ours = {v.path: v.numpy() for v in model.weights}
    theirs = {v.path: v.numpy() for v in loaded.weights}
    assert ours.keys() == theirs.keys()
    for path, value in ours.items():
        np.testing.assert_array_equal(theirs[path], value, err_msg=path)
    assert RunDirectory(run_dir).stored_objective() == "electra"

    model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)  # more training, saved again
    assert save_run(model, tokenizer, run_dir).endswith("ckpt-5")
    assert RunDirectory(run_dir).latest_step() == 5


def test_what_save_run_refuses_is_one_sentence(fitted, small_corpus, tmp_path):
    model, tokenizer, _ = fitted
    with pytest.raises(ConfigError, match="is not the model's") as caught:
        save_run(model, ElectraTokenizer(tokenizer.vocab[:-1]), tmp_path / "a")
    assert "\n" not in str(caught.value) and not (tmp_path / "a").exists()
    # A vocabulary list, or the arguments swapped: "'list' object has no attribute 'vocab'".
    with pytest.raises(TypeError) as caught:
        save_run(model, list(tokenizer.vocab), tmp_path / "a")
    assert str(caught.value) == (
        "save_run(model, tokenizer, run_dir) takes an ElectraTokenizer as its tokenizer, not a "
        "list (a vocabulary: pass ElectraTokenizer(vocab))."
    )
    with pytest.raises(TypeError, match="takes an ElectraPretrainer as its model, not a "):
        save_run(tokenizer, model, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    run_dir = tmp_path / "run"
    saved = save_run(model, tokenizer, run_dir)
    step = int(saved.rsplit("-", 1)[1])
    assert saved == str(run_dir / "checkpoints" / f"ckpt-{step}")
    other = ElectraPretrainer.from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, seed=0, num_layers=2
    )
    with pytest.raises(ConfigError, match="already holds another model"):
        save_run(other, tokenizer, run_dir)
    assert RunDirectory(run_dir).latest_step() == step  # untouched
    # A worker other than the chief saves, but not into the directory.
    # It returns the chief's path, as the chief does: its own copy is removed (it returned
    # that removed copy's path).
    elsewhere = save_run(model, tokenizer, tmp_path / "b", chief=False)
    assert not (tmp_path / "b").exists()
    assert elsewhere == str(tmp_path / "b" / "checkpoints" / f"ckpt-{step}")
    # The command line cannot resume it (no corpus, no schedule): it says to start from it.
    with pytest.raises(ConfigError, match="a model saved by save_run.*--init"):
        pretrain([str(small_corpus)], run_dir, steps=6, progress=False)


def test_save_run_into_the_command_line_run_it_loaded_names_the_directory(
    tiny_run, small_corpus, tmp_path
):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    model, tokenizer, step = load_run(run_dir)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-4, total_steps=2, warmup_steps=1)
    )
    data = pretraining_dataset([str(small_corpus)], tokenizer, batch_size=8, max_seq_length=32)
    model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
    # The same model: not "already holds another model", but why the directory is refused.
    with pytest.raises(
        ConfigError,
        match=r"holds a command-line run \(`keras-electra pretrain` wrote it\), and save_run "
        r"adds checkpoints only to directories it wrote; save into a new directory\.",
    ):
        save_run(model, tokenizer, run_dir)
    assert RunDirectory(run_dir).latest_step() == step  # untouched
    assert save_run(model, tokenizer, tmp_path / "new").endswith(f"ckpt-{step + 1}")


def test_a_saved_run_fine_tunes_like_a_pretraining_run(fitted, tmp_path):
    model, tokenizer, _ = fitted
    run_dir = tmp_path / "run"
    save_run(model, tokenizer, run_dir)
    rows = ["sentence\tlabel"] + [
        f"{'good' if i % 2 else 'bad'} king {i}\t{'pos' if i % 2 else 'neg'}" for i in range(32)
    ]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    result = finetune(
        run_dir,
        "classify",
        tmp_path / "train.tsv",
        None,
        tmp_path / "cls",
        text_column="sentence",
        epochs=1,
        batch_size=16,
        max_seq_length=16,
        progress=False,
    )
    assert result.config == model.config
    assert RunDirectory(tmp_path / "cls").is_finetuned()


# What the page's snippet runs with here: its sizes made tiny, each swap checked to apply.
TINY = {
    '"data/sample/shakespeare.txt"': None,  # the small corpus, filled in below
    "vocab_size=8000": "vocab_size=2000",
    "total_steps=300, warmup_steps=30": "total_steps=4, warmup_steps=1",
    "batch_size=32, max_seq_length=128": "batch_size=8, max_seq_length=32",
    "steps_per_epoch=100, epochs=3": "steps_per_epoch=2, epochs=2, verbose=0",
    'from_preset("tiny", vocab_size=len(vocab), seed=0)': (
        'from_preset("tiny", vocab_size=len(vocab), seed=0, num_layers=1)'
    ),
}


def test_the_readmes_python_snippet_is_the_pages_without_the_strategy():
    # The test below runs the page's; the README's must be the same code, on one device.
    def code(block: str) -> list[str]:
        skipped = ("import tensorflow as tf", "strategy")
        return [line.strip() for line in block.splitlines() if not any(s in line for s in skipped)]

    readme = snippet("README.md", "## Python API")
    assert code(readme) == code(snippet("docs/pretraining.md", "## From Python"))


def test_the_pages_python_snippet_trains_saves_and_exports_a_servable_model(small_corpus, tmp_path):
    code = snippet("docs/pretraining.md", "## From Python")
    code = swapped(code, {**TINY, '"data/sample/shakespeare.txt"': repr(str(small_corpus))})
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert RunDirectory(tmp_path / "runs" / "from-python").latest_step() == 4
    with SignatureRunner(str(tmp_path / "saved_models" / "from-python" / "1")) as runner:
        out = runner.run("serving_default", {"text": np.array([b"the king is dead"], object)})
    probs = out["replaced_prob"]
    assert probs.shape[0] == 1 and np.all((probs >= 0) & (probs <= 1))


def test_a_saved_run_converts_and_starts_a_command_line_run(fitted, small_corpus, tmp_path):
    from keras_electra.cli import main

    model, tokenizer, _ = fitted
    run_dir = tmp_path / "run"
    save_run(model, tokenizer, run_dir)
    out = tmp_path / "hf"
    assert main(["convert", "--to", "hf", "--run", str(run_dir), "--output", str(out)]) == 0
    assert (out / "discriminator" / "config.json").is_file()
    result = pretrain(
        [str(small_corpus)],
        tmp_path / "next",
        init=str(run_dir),
        steps=2,
        batch_size=8,
        max_seq_length=32,
        progress=False,
        health=False,
    )
    assert result.step == 2 and result.model.config == model.config


def test_a_loaded_run_saves_on_at_its_step_and_an_older_model_is_refused(fitted, tmp_path):
    # Saved after load_run and two steps of fit, the run's latest checkpoint went back from
    # step 3 to 2 (the new optimizer's count); saved with no fit, to 0.
    model, tokenizer, data = fitted
    run_dir = tmp_path / "run"
    save_run(model, tokenizer, run_dir)
    loaded, _, step = load_run(run_dir)
    assert loaded.restored_step == step == model.optimizer.iterations.numpy()
    assert save_run(loaded, tokenizer, run_dir).endswith(f"ckpt-{step}")  # nothing trained
    loaded.compile(
        optimizer=create_optimizer(loaded, learning_rate=1e-4, total_steps=4, warmup_steps=1)
    )
    loaded.fit(data, steps_per_epoch=2, epochs=1, verbose=0)
    assert save_run(loaded, tokenizer, run_dir).endswith(f"ckpt-{step + 2}")
    assert load_run(run_dir)[2] == step + 2
    fresh = ElectraPretrainer.from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, seed=0, num_layers=1
    )
    with pytest.raises(ConfigError, match=f"holds a checkpoint at step {step + 2}, past this"):
        save_run(fresh, tokenizer, run_dir)
    assert RunDirectory(run_dir).latest_step() == step + 2


def test_save_run_refuses_an_export_folder_and_a_file(fitted, tmp_path):
    from keras_electra.errors import StorageError

    model, tokenizer, _ = fitted
    exports = tmp_path / "saved_models" / "electra"
    (exports / "1").mkdir(parents=True)
    (exports / "1" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(ConfigError, match="holds exports"):
        save_run(model, tokenizer, exports)
    assert sorted(p.name for p in exports.iterdir()) == ["1"]
    a_file = tmp_path / "train.csv"
    a_file.write_text("text,label\n", encoding="utf-8")
    with pytest.raises(StorageError, match="is a file"):
        save_run(model, tokenizer, a_file)
