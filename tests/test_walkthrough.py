"""What a new user trips over on the way from a run to a served model, each as one test.

The mistakes are the ones a user makes when following the README and serving/README.md
for the first time: the snippets run as the docs write them, in a fresh process, and a
wrong address or model name is one sentence that says how to fix it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_snippets import run_here, snippet

from keras_electra.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_export(tiny_run, tmp_path_factory) -> Path:
    """The session's tiny pretraining run exported: ``saved_models/electra`` with ``1/``."""
    from keras_electra.export import export

    base = tmp_path_factory.mktemp("saved_models") / "electra"
    export(tiny_run, base)
    return base


def _run_as_the_docs_say(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter from a checkout, with ``tests/`` on the path as the
    docs say (``PYTHONPATH=tests``; the package is installed, here: the checkout)."""
    path = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_serving_readmes_stand_in_snippet_serves_a_real_export_in_a_fresh_process(
    tiny_export, tmp_path
):
    # The stand-in loads the export as TF Serving does; the export's tokenizer ops are TF
    # Text's, which TF Serving has built in: a process that had not imported tensorflow_text
    # failed to load any export ("Op type not registered 'FastBertNormalize'").
    code = snippet("serving/README.md", "## Testing without Docker")
    assert '"saved_models/electra"' in code
    (tmp_path / "saved_models").mkdir()
    (tmp_path / "saved_models" / "electra").symlink_to(tiny_export)
    done = _run_as_the_docs_say(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[[" in done.stdout  # the replaced_prob array, printed


def test_the_readmes_client_snippet_reads_a_served_export(tiny_export):
    from tfserving_standin import ModelServer

    with ModelServer(tiny_export, "electra") as server:
        printed = run_here(
            snippet("README.md", "## Export and serving"),
            {'"localhost:8500"': repr(server.grpc_target)},
        )
    assert printed.startswith("[[") and "]]" in printed  # replaced_prob, a row per text


@pytest.fixture(scope="module")
def served(tiny_export):
    """The tiny export on the stand-in TF Serving as ``pretrained`` (not the default name)."""
    from tfserving_standin import ModelServer

    with ModelServer(tiny_export, "pretrained") as server:
        yield server


def _score(capsys, *args: str) -> tuple[int, str, str]:
    from keras_electra.cli import main

    capsys.readouterr()
    status = main(["score", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_score_without_model_name_on_a_server_naming_it_otherwise_says_to_pass_it(served, capsys):
    # `score --server` asks for the model 'electra' unless told; a server serving it under
    # another name answered NOT_FOUND with nothing about --model-name.
    for where in (served.grpc_target, served.rest_url):
        status, out, err = _score(capsys, "--server", where, "the king is dead")
        assert status == 2 and out == "", err
        assert err.count("\n") == 1 and "--model-name" in err and "'electra'" in err, err
    status, out, err = _score(
        capsys, "--server", served.grpc_target, "--model-name", "pretrained", "the king"
    )
    assert status == 0 and "king(" in out, err


def test_score_over_grpc_at_the_rest_port_says_so_at_once(served, capsys):
    # gRPC to the REST port failed as "Could not reach TF Serving ... after 4 attempts" with
    # gRPC's HTTP/2 parsing error, seconds of retries later.
    rest_port = served.rest_url.removeprefix("http://")
    status, out, err = _score(capsys, "--server", rest_port, "--model-name", "pretrained", "x")
    assert status == 2 and out == "", err
    assert err.count("\n") == 1 and "REST port" in err and "attempts" not in err, err
    assert f"http://{rest_port}" in err, err


def test_score_over_rest_at_the_grpc_port_says_so_without_printing_its_bytes(served, capsys):
    # The gRPC port answers an HTTP/1 request with HTTP/2's binary frames, which the
    # message printed as they came (NUL bytes and all).
    url = f"http://{served.grpc_target}"
    status, out, err = _score(capsys, "--server", url, "--model-name", "pretrained", "x")
    assert status == 2 and out == "", err
    assert err.count("\n") == 1 and err.strip().isprintable(), repr(err)
    assert "binary frames, as TF Serving's gRPC port" in err and "--rest_api_port" in err, err


def test_score_with_the_rest_apis_path_in_the_url_names_the_servers_url(served, capsys):
    # A URL copied from a curl line (.../v1/models/NAME:predict) went out with the client's
    # own path after it, and TF Serving answered "Malformed request".
    url = f"{served.rest_url}/v1/models/pretrained:predict"
    status, out, err = _score(capsys, "--server", url, "the king")
    assert status == 2 and out == "", err
    assert err.count("\n") == 1 and f"URL, '{served.rest_url}'," in err, err
    assert "--model-name pretrained" in err, err
    status, out, err = _score(
        capsys, "--server", served.rest_url + "/", "--model-name", "pretrained", "the king"
    )
    assert status == 0 and "king(" in out, err


def test_a_rest_url_keeps_a_proxys_path_before_the_api_path():
    from keras_electra.serving.errors import ServingError
    from keras_electra.serving.rest_client import RestClient

    client = RestClient("http://127.0.0.1:9/serving/", "electra", insecure=True)
    assert client.model_url == "http://127.0.0.1:9/serving/v1/models/electra"
    client = RestClient("http://127.0.0.1:9/v1/models-proxy", "electra", insecure=True)
    assert client.model_url == "http://127.0.0.1:9/v1/models-proxy/v1/models/electra"
    with pytest.raises(ServingError, match=r"server's URL, 'http://127.0.0.1:9/serving'\.$"):
        RestClient("http://127.0.0.1:9/serving/v1/models", "electra")


def test_score_in_process_refuses_the_flags_of_a_server(tiny_export, capsys):
    # `score --model DIR --model-name sst2` scored with DIR and ignored the name (and
    # --timeout, --tls, a token file) without a word.
    status, out, err = _score(
        capsys, "--model", str(tiny_export), "--model-name", "x", "--timeout", "5", "the king"
    )
    assert status == 2 and out == "", err
    assert err.count("\n") == 1 and "--model-name, --timeout are for a server" in err, err
    status, out, err = _score(capsys, "--model", str(tiny_export), "the king")
    assert status == 0 and "king(" in out, err


def test_score_on_a_run_directory_says_how_to_export_it(tiny_run, capsys):
    # It said "No SavedModel at '...'; create one with `keras-electra export`", leaving the
    # user to find that export takes the run as --run and writes elsewhere.
    status, out, err = _score(capsys, "--model", str(tiny_run), "the king")
    assert status == 2 and out == "", err
    assert err.count("\n") == 1 and f"export --run {tiny_run} --output" in err, err


def test_score_into_a_pipe_whose_reader_closed_stops_without_a_word(
    tiny_export, monkeypatch, capsys
):
    # `keras-electra score --json ... | head -5` ended with "error: could not access (broken
    # pipe); free space or fix the path", the message for a disk that is full.
    from keras_electra.cli import main

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    pipe = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", pipe)
    status = main(["score", "--model", str(tiny_export), "--json", "the king is dead"])
    monkeypatch.undo()
    pipe.close()  # its fd now leads to /dev/null: closing flushes nothing into the pipe
    assert status == 141
    assert capsys.readouterr().err == ""


# === Pretraining, converting and fine-tuning directories mistaken for one another ===


@pytest.fixture(scope="module")
def tiny_finetuned(tiny_run, tmp_path_factory) -> Path:
    """The session's tiny run fine-tuned for one epoch on a 16-row classification file."""
    from keras_electra.finetuning import finetune

    folder = tmp_path_factory.mktemp("finetuned")
    rows = [("the king is good", "pos"), ("the villain is cruel", "neg")] * 8
    train = folder / "train.csv"
    train.write_text("sentence,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    output = folder / "cls"
    finetune(tiny_run, "classify", train, None, output, epochs=1, text_column="sentence")
    return output


@pytest.fixture(scope="module")
def tiny_converted(tiny_run, tmp_path_factory) -> Path:
    """The session's tiny run written as Hugging Face directories and its discriminator
    read back (its generator has embeddings of its own): an init directory."""
    from keras_electra.convert import convert, convert_run

    folder = tmp_path_factory.mktemp("converted")
    convert_run(tiny_run, folder / "hf", "hf")
    return convert(folder / "hf" / "discriminator", folder / "init", "hf").output


def _command(capsys, *args: str) -> tuple[int, str, str]:
    from keras_electra.cli import main

    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("dry_run", [True, False])
def test_pretrain_into_a_fine_tuned_or_converted_directory_is_refused(
    tiny_finetuned, tiny_converted, small_corpus, dry_run, capsys
):
    # A fine-tuned --output was "resumed": the dry run planned to resume at its step, the run
    # said "was started with batch_size=32, not 8" (the fine-tuning's), and with that batch
    # a checkpoint that "does not match the model configuration (Found 223 Python objects
    # ...". A converted one said "was started with batch_size=None".
    dry = ["--dry-run"] if dry_run else []
    for folder, said in (
        (tiny_finetuned, "holds a fine-tuned model, not a pretraining run to resume; choose a new"),
        (tiny_converted, f"pass it as --init '{tiny_converted}' and choose a new --output"),
    ):
        before = sorted(p.name for p in folder.iterdir())
        status, out, err = _command(
            capsys, "pretrain", "--corpus", str(small_corpus), "--output", str(folder),
            "--steps", "2", "--batch-size", "8", "--max-seq-length", "32", *dry,
        )  # fmt: skip
        assert status == 2 and "Dry run" not in out, out
        assert err.count("\n") == 1 and said in err, err
        assert sorted(p.name for p in folder.iterdir()) == before


def test_a_fine_tuned_directory_as_init_or_to_convert_is_one_sentence(
    tiny_finetuned, small_corpus, tmp_path, capsys
):
    # Both read it as a pretraining run: "Checkpoint '.../ckpt-1' does not match the model
    # configuration (Found 52 Python objects that were not bound ...", and pretrain had
    # already written config.json, run.json and vocab.txt into its new --output.
    status, _, err = _command(
        capsys, "pretrain", "--init", str(tiny_finetuned), "--corpus", str(small_corpus),
        "--output", str(tmp_path / "continued"), "--steps", "2", "--batch-size", "8",
        "--max-seq-length", "32",
    )  # fmt: skip
    assert status == 2 and err.count("\n") == 1, err
    assert f"--init '{tiny_finetuned}' holds a fine-tuned model; pass the pretraining" in err
    assert not (tmp_path / "continued").exists()
    status, _, err = _command(
        capsys, "convert", "--to", "hf", "--run", str(tiny_finetuned), "--output",
        str(tmp_path / "hf"),
    )  # fmt: skip
    assert status == 2 and err.count("\n") == 1, err
    assert "holds a fine-tuned model, which --to does not write" in err, err
    assert f"export --run {tiny_finetuned}` serves" in err
    assert not (tmp_path / "hf").exists()


def test_convert_from_a_directory_of_another_kind_names_the_flag_to_use(
    tiny_run, tiny_converted, tiny_finetuned, tmp_path, capsys
):
    # Each reader looked for its own files and said "'RUN/config.json' describes a 'None'
    # model, not ELECTRA" (hf on a keras-electra or keras-hub directory) or "holds a
    # keras-hub None, not an ElectraBackbone" (keras-hub on a run or a Hugging Face model).
    import tensorflow as tf

    from keras_electra.convert import convert_run

    hf = tiny_converted.parent / "hf"  # discriminator/ and generator/
    keras_hub = convert_run(tiny_run, tmp_path / "keras_hub", "keras-hub").output
    google = tmp_path / "google"
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(google / "model.ckpt-1"))
    ours = "is a keras-electra directory, which needs no conversion: pass it to --init or --run"
    cases = [
        ("hf", tiny_run, ours),
        ("keras-hub", tiny_finetuned, ours),
        ("google", tiny_converted, ours),
        # Was: "is not an ELECTRA checkpoint: it has no 'electra/embeddings/word_embeddings'
        # or 'electra/encoder/layer_0/...' variables" (a run's own checkpoints).
        ("google", tiny_run / "checkpoints", "holds the checkpoints of the keras-electra "
         f"directory '{tiny_run}', which needs no conversion: pass '{tiny_run}' to --init"),
        ("google", tiny_run / "checkpoints" / "ckpt-4", "is a checkpoint of the keras-electra "
         f"directory '{tiny_run}', which needs no conversion"),
        ("hf", keras_hub, "holds a keras-hub preset, not a Hugging Face model; convert it with "
         "--from keras-hub."),
        ("keras-hub", hf, "holds a Hugging Face model, not a keras-hub preset; convert it with "
         "--from hf."),
        ("google", hf / "discriminator", "holds a Hugging Face model, not a google-research TF1 "
         "checkpoint; convert it with --from hf."),
        ("hf", google, "holds a google-research TF1 checkpoint, not a Hugging Face model; "
         "convert it with --from google."),
        ("hf", google / "model.ckpt-1", "holds a google-research TF1 checkpoint, not a "
         "Hugging Face model; convert it with --from google."),
    ]  # fmt: skip
    for source_format, source, said in cases:
        output = tmp_path / "out"
        status, _, err = _command(
            capsys, "convert", "--from", source_format, str(source), "--output", str(output)
        )
        assert status == 2 and err.count("\n") == 1, err
        assert f"'{source}' {said}" in err, err
        assert not output.exists()
    status, _, err = _command(
        capsys, "convert", "--from", "hf", str(hf / "discriminator"), "--generator",
        str(keras_hub), "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert status == 2 and err.count("\n") == 1, err
    assert f"--generator '{keras_hub}' holds a keras-hub preset, not a Hugging Face" in err


def test_a_mistyped_directory_is_said_not_to_exist(tmp_path, capsys):
    # Each said the path lacked a file ("'runs/dmeo' is not a run directory (no
    # config.json)", "has no metrics.jsonl", "neither a fine-tuned model directory (no
    # finetune.json) nor an export"), which reads as a directory of the wrong kind.
    from keras_electra.finetuning import load_finetuned

    missing = str(tmp_path / "runs" / "dmeo")
    for args in (
        ("export", "--run", missing, "--output", str(tmp_path / "export")),
        ("convert", "--to", "hf", "--run", missing, "--output", str(tmp_path / "hf")),
        ("pretrain", "--init", missing, "--corpus", str(REPO / "data" / "sample"), "--output",
         str(tmp_path / "run"), "--dry-run"),
        ("predict", "--model", missing, "--input", str(tmp_path / "input.csv")),
        ("report", missing),
    ):  # fmt: skip
        status, _, err = _command(capsys, *args)
        assert status == 2 and err.count("\n") == 1, err
        assert f"'{missing}'" in err and "does not exist" in err and "(no " not in err, err
    with pytest.raises(ConfigError, match="dmeo' is not a fine-tuned model directory \\(it does"):
        load_finetuned(missing)


def test_convert_to_into_a_keras_electra_directory_is_refused(tiny_run, tiny_converted, capsys):
    # `convert --to hf --run RUN --output RUN` wrote discriminator/ and generator/ into the
    # run directory and said "Wrote RUN".
    for output in (tiny_run, tiny_converted):
        for target in ("hf", "keras-hub"):
            before = sorted(p.name for p in output.iterdir())
            status, out, err = _command(
                capsys, "convert", "--to", target, "--run", str(tiny_run), "--output", str(output)
            )
            assert status == 2 and out == "" and err.count("\n") == 1, err
            assert f"--output '{output}' holds a keras-electra directory" in err, err
            assert sorted(p.name for p in output.iterdir()) == before


def test_convert_to_into_a_directory_with_files_is_refused(tiny_run, tmp_path, capsys):
    # `convert --to hf --output DIR` wrote over an earlier conversion (or any files) in DIR
    # without a word, and mixed its files with the ones it did not replace.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _command(capsys, "convert", "--to", "hf", "--run", str(tiny_run), "--output",
                    str(empty))[0] == 0  # fmt: skip
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("mine\n")
    for output in (empty, tmp_path / "notes"):
        for target in ("hf", "keras-hub"):
            before = {p: p.stat().st_mtime_ns for p in output.rglob("*")}
            status, out, err = _command(
                capsys, "convert", "--to", target, "--run", str(tiny_run), "--output", str(output)
            )
            assert status == 2 and out == "" and err.count("\n") == 1, err
            assert f"--output '{output}' is not empty" in err, err
            assert "choose a new or empty --output, or remove it first." in err, err
            assert {p: p.stat().st_mtime_ns for p in output.rglob("*")} == before
    # --from likewise: the converted model's files were written among the folder's own.
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "notes").rglob("*")}
    status, out, err = _command(capsys, "convert", "--from", "hf", str(empty / "discriminator"),
                                "--output", str(tmp_path / "notes"))  # fmt: skip
    assert status == 2 and out == "" and err.count("\n") == 1, err
    assert f"--output '{tmp_path / 'notes'}' is not empty" in err, err
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "notes").rglob("*")} == before
    assert _command(capsys, "convert", "--from", "hf", str(empty / "discriminator"),
                    "--output", str(tmp_path / "new"))[0] == 0  # fmt: skip


def test_load_run_on_a_fine_tuned_directory_names_load_finetuned(tiny_finetuned):
    # It failed on "Checkpoint '.../ckpt-1' does not match the model configuration (Found 52
    # Python objects that were not bound to checkpointed values ...".
    from keras_electra.pretraining.run import load_run

    with pytest.raises(ConfigError) as refused:
        load_run(tiny_finetuned)
    assert str(refused.value) == (
        f"'{tiny_finetuned}' holds a fine-tuned model, not a pretraining run; load it with "
        "keras_electra.finetuning.load_finetuned."
    )
