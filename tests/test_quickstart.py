"""The README's quickstart from released weights, through a Hugging Face Hub on 127.0.0.1.

The test writes a small ELECTRA checkpoint in Hugging Face's layout (config.json,
model.safetensors, vocab.txt: what ``keras-electra convert --to hf`` writes) and serves
it the way the Hub serves files (``tests/hf_hub_standin.py``), and points ``HF_ENDPOINT``
at it. Then the quickstart's commands run as a user runs them, each a ``keras-electra``
process: fine-tune from ``--init hf:ORG/NAME``, export, and classify through the exported
model served over gRPC; ``convert --from hf hf:ORG/NAME`` reads the same model, offline
from the cache once fetched; offline without it, and an unknown model, are one sentence.
"""

import csv
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_snippets import run_here, snippet
from hf_hub_standin import Hub, Repo
from tfserving_standin import ModelServer

from keras_electra.serving import GrpcClient

MODEL = "test-org/electra-tiny-discriminator"
QUICKSTART_1 = "## 1. Released weights → your CSV → a server that answers with class scores"


@pytest.fixture(scope="module")
def hub(tiny_run, tmp_path_factory):
    """The tiny run's discriminator in Hugging Face's layout, served on 127.0.0.1."""
    from keras_electra.convert import convert_run

    written = tmp_path_factory.mktemp("hf") / "electra"
    convert_run(tiny_run, written, "hf")
    files = {p.name: p.read_bytes() for p in (written / "discriminator").iterdir()}
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(files)
    del files["tokenizer_config.json"]  # optional: many released models lack it
    server = Hub({MODEL: Repo({"main": files})})
    yield server
    server.close()


def _cli(*args, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """``keras-electra ARGS`` in a fresh process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "keras_electra.cli", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _with_built_kernels(cache: Path) -> Path:
    """``cache`` (a fresh ``KERAS_ELECTRA_CACHE``) holding the compiled kernels this
    process built, where it built them: a user's cache has them after the first run,
    and the fine-tuning process would otherwise spend a minute compiling them."""
    from keras_electra.kernels import compiled

    if compiled.kernels() is None:
        return cache
    built = compiled.library_path(compiled._compiler())
    target = cache.resolve() / "kernels" / built.parent.name / built.name
    target.parent.mkdir(mode=0o700, parents=True)
    for directory in (cache, target.parent.parent, target.parent):
        directory.chmod(0o700)
    for source in (built, compiled.digest_path(built)):  # the library and its recorded digest
        shutil.copy2(source, target.parent / source.name)
    target.chmod(0o700)
    return cache


def _one_sentence(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _train_csv(tiny_run, path: Path) -> Path:
    vocab = (tiny_run / "vocab.txt").read_text(encoding="utf-8").split("\n")
    words = [w for w in vocab if w.isalpha() and len(w) > 2 and w not in ("good", "bad")]
    rng = random.Random(0)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["sentence", "label"])
        for _ in range(128):
            positive = rng.random() < 0.5
            sentence = rng.sample(words, 6)
            sentence.insert(rng.randrange(7), "good" if positive else "bad")
            writer.writerow([" ".join(sentence), "pos" if positive else "neg"])
    return path


def test_the_quickstart_from_released_weights_fetch_finetune_export_and_serve(
    hub, tiny_run, tmp_path
):
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
        "KERAS_ELECTRA_CACHE": str(_with_built_kernels(tmp_path / "ke-cache")),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    train = _train_csv(tiny_run, tmp_path / "train.csv")
    done = _cli(
        "finetune", "--init", f"hf:{MODEL}", "--task", "classify", "--train", train,
        "--text-column", "sentence", "--epochs", "2", "--batch-size", "16",
        "--max-seq-length", "32", "--output", "runs/cls", "--quiet",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(r.endswith("/model.safetensors") for r in hub.requests)
    # Converted once into the keras-electra cache, keyed by the model's commit.
    commit = hub.repos[MODEL].commit("main")
    assert (tmp_path / "ke-cache" / "hub" / MODEL.replace("/", "--") / commit).is_dir()

    done = _cli(
        "export", "--run", "runs/cls", "--output", "saved_models/cls", env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with ModelServer(tmp_path / "saved_models" / "cls", "cls") as server:
        with GrpcClient(server.grpc_target, "cls", timeout=30.0) as client:
            results = client.classify([{"text": "the good king"}, {"text": "a bad day"}])
        printed = run_here(  # the page's Python, as written
            snippet("docs/quickstart.md", QUICKSTART_1),
            {'"localhost:8500"': repr(server.grpc_target)},
        )
    assert [sorted(label for label, _ in r) for r in results] == [["neg", "pos"]] * 2
    assert "'neg'" in printed and "'pos'" in printed, printed

    # convert --from hf takes the same id; then offline, the cache serves it.
    done = _cli("convert", "--from", "hf", f"hf:{MODEL}", "--output", "conv", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    asked = len(hub.requests)
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    done = _cli(
        "convert", "--from", "hf", f"hf:{MODEL}", "--output", "conv2", env=offline, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(hub.requests) == asked  # read from the cache
    assert (tmp_path / "conv2" / "config.json").read_text() == (
        tmp_path / "conv" / "config.json"
    ).read_text()


def test_a_model_that_cannot_be_fetched_is_one_sentence(hub, tmp_path):
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "empty-cache")}
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    done = _cli(
        "convert", "--from", "hf", f"hf:{MODEL}", "--output", "x", env=offline, cwd=tmp_path
    )
    assert done.returncode == 2
    sentence = _one_sentence(done.stderr)
    assert MODEL in sentence and str(tmp_path / "empty-cache") in sentence, sentence
    done = _cli(
        "convert", "--from", "hf", "hf:nobody/no-such-model", "--output", "x", env=env,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no model 'nobody/no-such-model'" in _one_sentence(done.stderr)
    done = _cli("convert", "--from", "hf", "hf:a/b/c", "--output", "x", env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert "not a Hugging Face model id" in _one_sentence(done.stderr)
    assert not (tmp_path / "x").exists()
