"""``hf:ORG/NAME`` against a Hub on 127.0.0.1 laid out like the released ELECTRA repositories.

google/electra-{small,base,large}-{discriminator,generator} publish ``pytorch_model.bin``,
``tf_model.h5`` and Flax weights on their main branch; older repositories often carry
``model.safetensors`` only on the Hub's safetensors conversion pull request, newer ones on
main. The
tiny run's discriminator (and generator) is served in each layout: safetensors on main;
safetensors only on a conversion pull request (beside a stale one and one by another
author, which are not read); only ``tf_model.h5``; only ``pytorch_model.bin`` (one
sentence, never downloaded). Each readable layout gives the run's weights exactly, and
``pretrain --init`` and ``finetune --init`` start from it; ``convert`` says which file it
read, online and offline.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hf_hub_standin import FileServer, Hub, Repo, conversion_pull, tf_weights_h5

from keras_electra.convert import convert, convert_run, read_hf
from keras_electra.convert.hub import fetch, init_directory
from keras_electra.errors import ConfigError, InputDataError

ORG = "test-org"
# layout -> (weights file read, revision read from)
READABLE = {
    "safetensors-on-main": ("model.safetensors", "main"),
    "safetensors-on-pr": ("model.safetensors", "refs/pr/5"),
    "tf-weights-only": ("tf_model.h5", "main"),
}
PICKLE = b"\x80\x04 a pickle the library must never download"


@pytest.fixture(scope="module")
def written(tiny_run, tmp_path_factory) -> Path:
    """The tiny run in Hugging Face's layout: ``discriminator/`` and ``generator/``, the
    generator reading the discriminator's embeddings as the released pairs do (the tiny
    preset's towers have their own)."""
    from safetensors.numpy import load_file, save_file

    out = tmp_path_factory.mktemp("hf") / "electra"
    convert_run(tiny_run, out, "hf")
    disc = load_file(str(out / "discriminator" / "model.safetensors"))
    gen_file = out / "generator" / "model.safetensors"
    shared = {k: v for k, v in disc.items() if k.startswith("electra.embeddings.")}
    shared["generator_lm_head.weight"] = shared["electra.embeddings.word_embeddings.weight"]
    save_file({**load_file(str(gen_file)), **shared}, str(gen_file))
    return out


def _released(folder: Path, safetensors: bool) -> dict[str, bytes]:
    """A main branch like google/electra-*'s: config, vocabulary, tokenizer settings,
    PyTorch, TF and Flax weights; ``model.safetensors`` too if ``safetensors``."""
    from safetensors.numpy import load_file

    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    weights = files.pop("model.safetensors")
    files["pytorch_model.bin"] = PICKLE
    files["tf_model.h5"] = tf_weights_h5(load_file(str(folder / "model.safetensors")))
    files["flax_model.msgpack"] = b"flax weights, never read"
    return {**files, "model.safetensors": weights} if safetensors else files


def _saved_by_transformers_5(folder: Path, tmp: Path) -> dict[str, bytes]:
    """A main branch as transformers 5 saves a model and its tokenizer: config.json,
    model.safetensors, tokenizer.json and tokenizer_config.json, no vocab.txt."""
    import transformers

    transformers.ElectraTokenizer(vocab=str(folder / "vocab.txt")).save_pretrained(tmp)
    files = {p.name: p.read_bytes() for p in tmp.iterdir()}
    assert sorted(files) == ["tokenizer.json", "tokenizer_config.json"]
    return {
        **files,
        "config.json": (folder / "config.json").read_bytes(),
        "model.safetensors": (folder / "model.safetensors").read_bytes(),
    }


@pytest.fixture(scope="module")
def hub(written, tmp_path_factory):
    from safetensors.numpy import load_file, save

    disc = written / "discriminator"
    on_pr = _released(disc, safetensors=False)
    weights = (disc / "model.safetensors").read_bytes()
    # Another author's pull request with the conversion's title: other weights, never read.
    zeros = save(
        {k: np.zeros_like(v) for k, v in load_file(str(disc / "model.safetensors")).items()}
    )
    pickle_only = {k: v for k, v in on_pr.items() if k not in ("tf_model.h5", "flax_model.msgpack")}
    repos = {
        f"{ORG}/safetensors-on-main": Repo({"main": _released(disc, safetensors=True)}),
        f"{ORG}/safetensors-on-pr": Repo(
            {
                "main": on_pr,
                # converted from older weights than main's: stale
                "refs/pr/3": {**on_pr, "pytorch_model.bin": b"older", "model.safetensors": zeros},
                "refs/pr/5": {**on_pr, "model.safetensors": weights},
                "refs/pr/7": {**on_pr, "model.safetensors": zeros},
            },
            pulls=[conversion_pull(3), conversion_pull(5), conversion_pull(7, author="someone")],
        ),
        f"{ORG}/tf-weights-only": Repo({"main": on_pr}),
        f"{ORG}/pickle-only": Repo({"main": pickle_only}),
        f"{ORG}/tiny-generator": Repo(
            {"main": _released(written / "generator", safetensors=False)}
        ),
        f"{ORG}/saved-by-transformers-5": Repo(
            {"main": _saved_by_transformers_5(disc, tmp_path_factory.mktemp("tokenizer"))}
        ),
        # Its model.safetensors answered with a server error (Hub.failing), tf_model.h5 not.
        f"{ORG}/failing": Repo({"main": _released(disc, safetensors=True)}),
    }
    server = Hub(repos)
    yield server
    server.close()


@pytest.fixture
def hub_env(hub, tmp_path, monkeypatch) -> dict[str, str]:
    """``HF_ENDPOINT`` at the hub, fresh Hugging Face and keras-electra caches."""
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
        "KERAS_ELECTRA_CACHE": str(tmp_path / "ke-cache"),  # kernels: loaded by tiny_run
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _assert_same_weights(read: dict, expected: dict) -> None:
    assert read.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(read[name], value, err_msg=name)


@pytest.mark.parametrize("layout", sorted(READABLE))
def test_each_layout_reads_the_released_weights_and_says_which_file(layout, hub, hub_env, written):
    before = len(hub.downloads)
    snapshot = fetch(f"hf:{ORG}/{layout}")
    assert (snapshot.weights, snapshot.revision) == READABLE[layout]
    where = "its main branch" if snapshot.revision == "main" else "its safetensors conversion "
    assert snapshot.describe().startswith(f"{snapshot.weights} from {where}")
    _assert_same_weights(
        read_hf(snapshot.folder).weights, read_hf(written / "discriminator").weights
    )
    downloads = hub.downloads[before:]
    assert not [d for d in downloads if d.endswith("/pytorch_model.bin")]  # a HEAD at most
    assert not [d for d in downloads if "refs%2Fpr%2F3" in d or "refs%2Fpr%2F7" in d]


# Every layout converts to the same weights (the test above), so the commands run from the
# one that differs most from a PyTorch-first repo; three runs cost minutes and show no more.
@pytest.mark.parametrize("layout", ["tf-weights-only"])
def test_pretrain_and_finetune_start_from_a_released_layout(
    layout, hub_env, small_corpus, tmp_path
):
    from keras_electra.finetuning import finetune
    from keras_electra.pretraining.run import load_run, pretrain

    model = f"hf:{ORG}/{layout}"
    result = pretrain(
        [str(small_corpus)], tmp_path / "run", init=model, steps=1, batch_size=4,
        max_seq_length=16, log_every=1, progress=False,
    )  # fmt: skip
    assert result.step == 1
    init = init_directory(model)  # converted once, kept in the keras-electra cache
    assert init.parent.parent == Path(hub_env["KERAS_ELECTRA_CACHE"]) / "hub"
    assert load_run(tmp_path / "run")[0].config == load_run(init)[0].config
    record = (init / "convert.json").read_text(encoding="utf-8")
    assert f"Read {model}: {READABLE[layout][0]} from" in record
    train = _train_csv(init, tmp_path / "train.csv")
    tuned = finetune(
        model, "classify", train, output_dir=tmp_path / "cls", epochs=1, batch_size=8,
        max_seq_length=16, progress=False,
    )  # fmt: skip
    assert (tmp_path / "cls" / "finetune.json").is_file() and tuned.model is not None


def _train_csv(init: Path, path: Path) -> Path:
    words = [w for w in (init / "vocab.txt").read_text().split("\n") if w.isalpha()][:200]
    rng = random.Random(0)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(16):
            writer.writerow([" ".join(rng.sample(words, 5)), ("pos", "neg")[i % 2]])
    return path


def test_a_model_with_only_pytorch_weights_is_one_sentence(hub, hub_env):
    with pytest.raises(InputDataError) as raised:
        fetch(f"hf:{ORG}/pickle-only")
    sentence = str(raised.value)
    assert "only as pytorch_model.bin" in sentence and "save_pretrained(DIR)" in sentence
    assert ". " not in sentence and sentence.endswith(".")
    assert not [d for d in hub.downloads if d.endswith("/pytorch_model.bin")]


def test_the_released_generator_converts_from_tf_weights_and_is_no_init(
    hub, hub_env, written, tmp_path
):
    disc, gen = f"hf:{ORG}/tf-weights-only", f"hf:{ORG}/tiny-generator"
    result = convert(disc, tmp_path / "pair", "hf", generator=gen)
    assert [n.split(" (commit")[0] for n in result.notes[:2]] == [
        f"Read {disc}: tf_model.h5 from its main branch",
        f"Read {gen}: tf_model.h5 from its main branch",
    ]
    pair = read_hf(fetch(disc).folder, generator=fetch(gen).folder)
    _assert_same_weights(pair.weights, read_hf(written).weights)
    assert any(name.startswith("generator/") for name in pair.weights)
    with pytest.raises(ConfigError, match=f"generator .* pass hf:{ORG}/tiny-discriminator"):
        init_directory(gen)


def test_convert_says_which_file_it_read_online_and_offline(hub, hub_env, tmp_path):
    def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "keras_electra.cli", *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
        )  # fmt: skip

    model = f"hf:{ORG}/safetensors-on-pr"
    done = cli("convert", "--from", "hf", model, "--output", "online")
    assert done.returncode == 0, done.stderr[-3000:]
    read = f"note: Read {model}: model.safetensors from its safetensors conversion pull request"
    assert f"{read} refs/pr/5" in done.stdout, done.stdout
    asked = len(hub.requests)
    done = cli("convert", "--from", "hf", model, "--output", "offline", HF_HUB_OFFLINE="1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{read} refs/pr/5" in done.stdout and len(hub.requests) == asked  # from the cache
    done = cli("convert", "--from", "hf", f"hf:{ORG}/pickle-only", "--output", "x")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "pytorch_model.bin" in done.stderr


def test_a_hub_that_does_not_answer_is_asked_once_not_retried_for_23_seconds(tmp_path):
    # huggingface_hub retried the uncached config.json five times (1 + 2 + 4 + 8 + 8 s)
    # before keras-electra could say the Hub was not reachable: six requests for it here.
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def hang_up():  # read the request, then close without an answer (a dropped connection)
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            accepted.append(connection.recv(4096).split(b"\r\n")[0])
            connection.close()

    threading.Thread(target=hang_up, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HF_ENDPOINT", endpoint)
            patch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
            patch.delenv("HF_HUB_OFFLINE", raising=False)
            with pytest.raises(InputDataError, match="the Hub is not reachable"):
                fetch(f"hf:{ORG}/gone")
    finally:
        server.close()
    # (huggingface_hub 2.4 also asks for /api/agent-harnesses on its own.)
    asked = [line for line in accepted if f"/{ORG}/gone/".encode() in line]
    assert asked == [f"HEAD /{ORG}/gone/resolve/main/config.json HTTP/1.1".encode()]


def test_an_unreachable_hub_is_one_sentence_without_the_retries_lines(tmp_path, capfd):
    # huggingface_hub printed a line per retry before the sentence: "'[Errno 111] Connection
    # refused' thrown while requesting HEAD http://.../config.json", "Retrying in 1s [Retry
    # 1/5].", ... eleven lines in all.
    import socket

    from keras_electra.cli import main

    with socket.socket() as closed:  # a port on 127.0.0.1 that nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HUB_CACHE": str(tmp_path / "cache")}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.delenv("HF_HUB_OFFLINE", raising=False)
        capfd.readouterr()
        status = main(
            ["convert", "--from", "hf", f"hf:{ORG}/gone", "--output", str(tmp_path / "o")]
        )
    err = capfd.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert f"Could not fetch Hugging Face model '{ORG}/gone': the Hub is not reachable" in err


def test_a_malformed_model_id_or_flags_that_do_not_go_together_fail_before_tensorflow_loads(
    tmp_path,
):
    """One sentence in a fraction of a second, not after the seconds TensorFlow takes to
    load: checked on the command line before it is imported."""
    code = (
        "import json, sys\n"
        "from keras_electra.cli import main\n"
        "status = main(json.loads(sys.argv[1]))\n"
        "print(status, 'tensorflow' in sys.modules)\n"
    )
    corpus = str(Path(__file__).resolve().parents[1] / "data" / "sample" / "shakespeare.txt")
    cases = [
        (["convert", "--from", "hf", "hf:a/b/c", "--output", "x"], "'hf:a/b/c' is not a Hugging"),
        (["convert", "--from", "hf", "d", "--generator", "hf:/g", "--output", "x"], "'hf:/g' is"),
        (["pretrain", "--corpus", corpus, "--init", "hf:", "--output", "x"], "'hf:' is not a"),
        (["finetune", "--init", "hf:a/../b", "--task", "classify", "--train", "t.csv",
          "--output", "x"], "'hf:a/../b' is not a"),
        (["convert", "--from", "google", "ckpt", "--generator", "g", "--output", "x"],
         "--generator applies to --from hf only."),
        (["convert", "--to", "hf", "--output", "x"], "--to needs --run DIR"),
    ]  # fmt: skip
    for argv, said in cases:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(argv)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.stdout.split() == ["2", "False"], (argv, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"keras-electra {argv[0]}: error: ") and said in line, line
    assert not (tmp_path / "x").exists()


# A server error (HTTP 500, after huggingface_hub's retries where it retries) for a file the
# fetch needs: (repository, what fails, the sentence's start, what is fetched once well).
# The weights' was "the Hub is not reachable (or HF_HUB_OFFLINE is set) and its
# model.safetensors is not in the cache"; the list of pull requests', or the pickle's ETag
# that tells a current conversion from a stale one, left no conversion to read. Each time
# the conversion went on to read tf_model.h5 instead.
SERVER_ERRORS = {
    "weights": (
        "failing",
        "model.safetensors",
        "Could not fetch model.safetensors of Hugging Face model '{repo}': the server "
        "answered HTTP 500 for it (also when asked again); retry later",
        "main",
    ),
    "pull-requests": (
        "safetensors-on-pr",
        "discussions",
        "Could not fetch the list of pull requests of Hugging Face model '{repo}': the "
        "server answered HTTP 500 for it; retry later",
        "refs/pr/5",
    ),
    "pickle-etag": (
        "safetensors-on-pr",
        "pytorch_model.bin",
        "Could not fetch pytorch_model.bin of Hugging Face model '{repo}': the server "
        "answered HTTP 500 for it; retry later",
        "refs/pr/5",
    ),
}


@pytest.mark.parametrize("case", list(SERVER_ERRORS))
def test_a_server_error_is_said_and_no_other_weights_file_is_read(
    case, hub, hub_env, tmp_path, capfd
):
    from keras_electra.cli import main

    name, failing, said, revision = SERVER_ERRORS[case]
    repo, model = f"{ORG}/{name}", f"hf:{ORG}/{name}"
    with hub.answering(f"{repo}/{failing}", 500):
        with pytest.raises(InputDataError) as raised:
            fetch(model)
        capfd.readouterr()
        status = main(["convert", "--from", "hf", model, "--output", str(tmp_path / "out")])
        err = capfd.readouterr().err
    assert str(raised.value).startswith(said.format(repo=repo)), str(raised.value)
    assert str(raised.value).endswith(", or convert a local copy with `keras-electra convert "
                                      "--from hf DIR`.")  # fmt: skip
    assert not [d for d in hub.downloads if d.startswith(f"/{repo}/") and "tf_model" in d]
    assert status == 2 and err.count("\n") == 1 and "HTTP 500" in err, err
    assert not (tmp_path / "out").exists()
    fetched = fetch(model)  # the server well again
    assert (fetched.weights, fetched.revision) == ("model.safetensors", revision)


def test_an_endpoint_that_is_not_a_hub_is_said_to_be_one(tmp_path, monkeypatch):
    # A plain file server answers 200 without X-Repo-Commit: huggingface_hub says it "does
    # not seem to be served by a Hugging Face Hub endpoint"; that was reported as "the Hub
    # is not reachable (or HF_HUB_OFFLINE is set)".
    files = tmp_path / "site"
    (files / ORG / "model" / "resolve" / "main").mkdir(parents=True)
    (files / ORG / "model" / "resolve" / "main" / "config.json").write_text("{}")
    server = FileServer(files)
    try:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        with pytest.raises(InputDataError) as raised:
            fetch(f"hf:{ORG}/model")
    finally:
        server.close()
    assert str(raised.value) == (
        f"Could not fetch config.json of Hugging Face model '{ORG}/model': HF_ENDPOINT "
        f"'{server.url}' does not seem to be served by a Hugging Face Hub endpoint (no "
        "X-Repo-Commit header in its answer); point HF_ENDPOINT at the Hub or a mirror of it, "
        "or unset it."
    )


def test_a_damaged_file_in_the_hugging_face_cache_names_the_folder_to_delete(
    hub, hub_env, tmp_path
):
    # It said "the file is damaged or incomplete: fetch or save it again", but
    # huggingface_hub never checks a cached file again, and no option fetches it anew.
    model = f"hf:{ORG}/safetensors-on-main"
    convert(model, tmp_path / "first", "hf")
    folder = Path(hub_env["HF_HUB_CACHE"]) / f"models--{ORG}--safetensors-on-main"
    weights = fetch(model).folder / "model.safetensors"
    blob = weights.resolve()
    assert blob.parent == folder / "blobs"
    blob.write_bytes(blob.read_bytes()[:20000])  # cut short
    with pytest.raises(ConfigError) as raised:
        convert(model, tmp_path / "second", "hf")
    sentence = str(raised.value)
    assert sentence.startswith(f"'{weights}' cannot be read as safetensors (")
    assert sentence.endswith(
        f"); the copy in Hugging Face's cache is damaged: delete '{folder}' so that the next "
        "run fetches the model again."
    )
    shutil.rmtree(folder)
    fetched = len(hub.downloads)
    result = convert(model, tmp_path / "second", "hf")
    assert (result.output / "convert.json").is_file()
    assert f"/{ORG}/safetensors-on-main/resolve/main/model.safetensors" in hub.downloads[fetched:]


def test_a_model_saved_with_transformers_5_reads_its_tokenizer_json(hub, hub_env, written):
    # transformers 5's save_pretrained writes no vocab.txt: the model "has no vocab.txt".
    model = f"hf:{ORG}/saved-by-transformers-5"
    snapshot = fetch(model)
    assert not (snapshot.folder / "vocab.txt").exists()
    converted = read_hf(snapshot.folder)
    expected = read_hf(written / "discriminator")
    assert converted.tokens == expected.tokens and converted.config.lowercase
    _assert_same_weights(converted.weights, expected.weights)
    assert any(d.endswith("/tokenizer.json") for d in hub.downloads)
