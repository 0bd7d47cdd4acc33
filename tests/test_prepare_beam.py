"""Corpus preparation at scale (issue 51): one packing rule, whoever packs.

The in-process writer, the Beam pipeline (DirectRunner, 1 and 2 workers) and the
on-the-fly ``tf.data`` pipeline give the same examples for the same corpus, vocabulary,
length and seed; shards are cut at document boundaries, written atomically and skipped
when a rerun finds them finished; bad input is one sentence.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import signal

import numpy as np
import pytest
import tensorflow as tf
from conftest import as_rows, records

from keras_electra.cli import _descendants, main
from keras_electra.data import ElectraTokenizer, pretraining_examples, write_pretraining_tfrecords
from keras_electra.data.beam import beam_available
from keras_electra.data.packing import _PACKING, Packer, _stream_seed, packing_seed
from keras_electra.data.pretraining import line_dataset, pack_examples, tokenize_lines
from keras_electra.data.tfrecords import plan_shards, serializer
from keras_electra.data.vocab import SPECIAL_TOKENS, count_words
from keras_electra.errors import InputDataError

needs_beam = pytest.mark.skipif(
    not beam_available(),
    reason="Apache Beam is not installed (the beam extra; `make test` installs it with dev)",
)

WORDS = "the cat sat on mat dog ran far away and then came home a big red".split()
VOCAB = [*SPECIAL_TOKENS, ".", ",", "!", "?", *WORDS, "##s", "##ed", "un", "##happy"]
LENGTH = 24


@pytest.fixture(scope="module")
def tokenizer():
    return ElectraTokenizer(VOCAB)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    """Three files: documents of sentences, CRLF line ends, whitespace-only lines, a line
    with no token, a file without a final newline, a long document."""
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("corpus")

    def sentence() -> str:
        return " ".join(rng.choice(WORDS, size=rng.integers(2, 14))).capitalize() + "."

    def document(n: int) -> str:
        return "\n".join(sentence() for _ in range(n))

    first = "\n\n".join(document(int(rng.integers(1, 8))) for _ in range(40)) + "\n"
    second = "\r\n".join(document(3).split("\n")) + "\r\n \t\n" + "###\n" + document(60)
    third = "\n\n\n".join(document(int(rng.integers(2, 5))) for _ in range(15))
    paths = []
    for name, text in (("a.txt", first), ("b.txt", second), ("c.txt", third)):
        path = root / name
        path.write_bytes(text.encode("utf-8"))
        paths.append(str(path))
    return paths


def test_packer_equals_the_tf_data_scan(corpus, tokenizer):
    # The rule's Python form and its tf.data form, at probabilities that exercise every
    # branch (single segments, random lengths, the coin), over the same lines. (The
    # default probabilities: test_shards_start_at_documents_and_read_back_as_one_pass.)
    for probs in ((0.5, 0.5),):
        seed = _stream_seed(7, 0, _PACKING)
        lines = tokenize_lines(line_dataset(corpus), tokenizer)
        want = list(
            pack_examples(
                lines,
                max_seq_length=LENGTH,
                cls_id=tokenizer.cls_id,
                sep_id=tokenizer.sep_id,
                pad_id=tokenizer.pad_id,
                seed=seed,
                single_segment_prob=probs[0],
                random_length_prob=probs[1],
            ).as_numpy_iterator()
        )
        packer = Packer(
            LENGTH, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, packing_seed(7), *probs
        )
        for ids, blank in lines.ragged_batch(50):
            packer.add(ids.flat_values.numpy(), ids.row_splits.numpy(), blank.numpy())
        packer.finish()
        got = packer.take()
        assert len(want) > 40 and len(got["token_ids"]) == len(want)
        for name in got:
            assert np.array_equal(got[name], np.stack([w[name] for w in want])), name


def test_serializer_writes_protobufs_bytes(tokenizer):
    ids = np.array([[2, 5, 300, 20000, 3, 0], [2, 7, 3, 8, 3, 0]], np.int32)
    examples = {
        "token_ids": ids,
        "padding_mask": (np.arange(6) < 5).astype(np.int32)[None].repeat(2, 0),
        "segment_ids": np.array([[0] * 6, [0, 0, 0, 1, 1, 0]], np.int32),
    }
    for row, record in enumerate(serializer(6)(examples)):
        feature = {
            stored: tf.train.Feature(int64_list=tf.train.Int64List(value=examples[name][row]))
            for name, stored in (
                ("token_ids", "input_ids"),
                ("padding_mask", "input_mask"),
                ("segment_ids", "segment_ids"),
            )
        }
        proto = tf.train.Example(features=tf.train.Features(feature=feature))
        assert record == proto.SerializeToString(deterministic=True)


def test_shards_start_at_documents_and_read_back_as_one_pass(corpus, tokenizer, tmp_path):
    for plan in plan_shards(corpus, 7):
        for path, start, _ in plan.pieces:
            data = open(path, "rb").read()
            before = data[: start - 1].rsplit(b"\n", 1)[-1] if start else b""
            assert start == 0 or (data[start - 1 : start] == b"\n" and not before.strip())
    streamed = list(pretraining_examples(corpus, tokenizer, max_seq_length=LENGTH, seed=3))
    names = ("token_ids", "padding_mask", "segment_ids")
    want = [tuple(tuple(ex[k].numpy().tolist()) for k in names) for ex in streamed]
    for shards in (1, 7, 40):  # 40: more shards than documents in some ranges (empty ones)
        out = str(tmp_path / f"r{shards}")
        paths = write_pretraining_tfrecords(
            corpus, tokenizer, out, max_seq_length=LENGTH, num_shards=shards, seed=3, progress=False
        )
        assert as_rows(records(paths)) == want
        with open(os.path.join(out, "metadata.json"), encoding="utf-8") as f:
            metadata = json.load(f)
        assert metadata["num_examples"] == len(want) and metadata["complete"]
        assert metadata["corpus_bytes"] == sum(os.path.getsize(p) for p in corpus)
        assert metadata["pipeline"] == {"runner": "in-process"}


def test_an_interrupted_run_resumes(corpus, tokenizer, tmp_path, capsys):
    out = tmp_path / "records"
    options = {"max_seq_length": LENGTH, "num_shards": 4, "seed": 1, "progress": False}
    paths = write_pretraining_tfrecords(corpus, tokenizer, str(out), **options)
    finished = {p: open(p, "rb").read() for p in paths}
    # As a run stopped while writing shard 2 leaves the directory: shards 0 and 1 final,
    # shard 2 partial under its temporary name, 3 not begun, metadata incomplete.
    os.replace(paths[2], paths[2] + ".tmp")
    with open(paths[2] + ".tmp", "r+b") as f:
        f.truncate(10)
    os.remove(paths[3])
    metadata = json.loads((out / "metadata.json").read_text())
    (out / "metadata.json").write_text(
        json.dumps({"complete": False, "settings": metadata["settings"]})
    )
    os.utime(paths[0], (1, 1))  # a finished shard is kept: its time stays
    write_pretraining_tfrecords(corpus, tokenizer, str(out), **options)
    assert os.path.getmtime(paths[0]) == 1
    assert {p: open(p, "rb").read() for p in paths} == finished
    assert sorted(os.listdir(out)) == sorted([*map(os.path.basename, paths), "metadata.json"])
    assert json.loads((out / "metadata.json").read_text())["complete"]
    # Another seed is another corpus of examples: nothing is kept, and the rerun says so.
    capsys.readouterr()
    write_pretraining_tfrecords(corpus, tokenizer, str(out), **{**options, "seed": 2})
    assert os.path.getmtime(paths[0]) != 1
    said = capsys.readouterr().err
    assert "Discarding 4 finished shards" in said and "(--seed 1, now 2)" in said, said


def test_a_rerun_naming_the_corpus_another_way_keeps_the_finished_shards(
    corpus, tokenizer, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "records"
    options = {"max_seq_length": LENGTH, "num_shards": 3, "seed": 1, "progress": False}
    paths = write_pretraining_tfrecords(corpus, tokenizer, str(out), **options)
    for path in paths:
        os.utime(path, (1, 1))
    linked = tmp_path / "linked"
    os.symlink(os.path.dirname(corpus[0]), linked)
    spellings = {  # the working directory → how the corpus is named from it
        os.path.dirname(corpus[0]): [os.path.basename(p) for p in corpus],
        str(tmp_path): [os.path.join("linked", ".", os.path.basename(p)) for p in corpus],
    }
    capsys.readouterr()
    for cwd, named in spellings.items():
        monkeypatch.chdir(cwd)
        write_pretraining_tfrecords(named, tokenizer, str(out), **options)
        assert [os.path.getmtime(p) for p in paths] == [1] * len(paths), cwd
    assert "Discarding" not in capsys.readouterr().err


@needs_beam
def test_beam_writes_the_same_shards_with_one_and_two_workers(corpus, tokenizer, tmp_path, capfd):
    from keras_electra.data.beam import count_words_beam, write_tfrecords_beam

    options = {"max_seq_length": LENGTH, "num_shards": 5, "seed": 4}
    want = write_pretraining_tfrecords(
        corpus, tokenizer, str(tmp_path / "in_process"), progress=False, **options
    )
    runs = {
        1: [],
        2: ["--direct_running_mode=multi_threading"],  # two workers in one process: fast
    }
    for workers, args in runs.items():
        out = tmp_path / f"beam_{workers}"
        got = write_tfrecords_beam(
            corpus,
            tokenizer,
            str(out),
            num_workers=workers,
            pipeline_args=args,
            progress=False,
            **options,
        )
        assert [open(p, "rb").read() for p in got] == [open(p, "rb").read() for p in want]
        metadata = json.loads((out / "metadata.json").read_text())
        assert metadata["pipeline"]["runner"] == "DirectRunner"
        assert metadata["pipeline"]["direct_num_workers"] == workers
    capfd.readouterr()
    # What a count stopped midway leaves: its marks, and a count file of other shard names
    # (counted again, it was added to this count's).
    (tmp_path / "counts" / "counted").mkdir(parents=True)
    (tmp_path / "counts" / "counted" / "piece-00000").write_text("")
    stale = tmp_path / "counts" / "word-counts-00000-of-00009.jsonl"
    stale.write_text('["the", 1000000]\n', encoding="utf-8")
    counts = count_words_beam(
        corpus, temp_dir=str(tmp_path / "counts"), num_workers=2, pipeline_args=runs[2]
    )
    assert counts == dict(count_words(corpus))
    # Its progress bar counted every piece (it said nothing while Beam counted), and the
    # pieces' marks are gone.
    bar = re.findall(
        r"Counting words: 100%\|[^|]*\| (\d+)/(\d+) \[.* pieces/s\]", capfd.readouterr().err
    )
    assert bar and bar[-1][0] == bar[-1][1] and int(bar[-1][0]) >= 2, bar
    assert os.listdir(tmp_path / "counts") == []


def test_local_worker_processes_log_to_a_file_not_between_the_commands_lines(capfd):
    """Beam's local worker processes inherit stderr and print start-up warnings there (Beam's
    apitools notice, TensorFlow's absl line): while a multi-process pipeline runs they go
    to a log file, removed after a clean run and named on an error; the progress bar
    still reaches the terminal. Other running modes are left alone."""
    import subprocess
    import sys

    from keras_electra.data.beam import quiet_local_workers

    noise = [sys.executable, "-c", "import sys; print('worker noise', file=sys.stderr)"]
    local = {"direct_running_mode": "multi_processing"}
    with quiet_local_workers(local) as stderr:
        subprocess.run(noise, check=True)
        print("Packing: 1/1", file=stderr)
    said = capfd.readouterr().err
    assert "worker noise" not in said and "Packing: 1/1" in said, said
    with pytest.raises(RuntimeError) as error, quiet_local_workers(local):
        subprocess.run(noise, check=True)
        raise RuntimeError("the pipeline failed")
    (note,) = error.value.__notes__
    log = note.removeprefix("The Beam workers' log: ")
    assert open(log).read() == "worker noise\n"
    os.remove(log)
    with quiet_local_workers({"direct_running_mode": "multi_threading"}) as stderr:
        subprocess.run(noise, check=True)
    assert "worker noise" in capfd.readouterr().err


def test_beam_writer_takes_the_in_process_writers_settings():
    # Named in its signature (not **kwargs), with the same defaults: a typo or a missing
    # max_seq_length is Python's TypeError naming write_tfrecords_beam, before Beam starts.
    from keras_electra.data.beam import write_tfrecords_beam

    beam_writer = inspect.signature(write_tfrecords_beam).parameters
    in_process = inspect.signature(write_pretraining_tfrecords).parameters
    for name in ("max_seq_length", "num_shards", "seed"):
        assert beam_writer[name].default == in_process[name].default
    with pytest.raises(TypeError, match="write_tfrecords_beam"):
        write_tfrecords_beam([], None, "out", num_shard=2)  # type: ignore[call-arg]


def run_prepare(capsys, *args: str) -> tuple[int, str]:
    code = main(["prepare", *args])
    return code, capsys.readouterr().err.strip()


def test_bad_input_is_one_sentence(tmp_path, capsys):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(bytes(range(256)) * 64)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = str(tmp_path / "out")
    for path, reason in ((binary, "is not text"), (empty, "is empty")):
        code, err = run_prepare(capsys, "--corpus", str(path), "--output", out, "--workers", "1")
        assert code == 2 and reason in err, err
        lines = [line for line in err.splitlines() if "keras-electra prepare" in line]
        assert len(lines) == 1 and lines[0].count(". ") == 0 and lines[0].endswith(".")
    with pytest.raises(InputDataError, match="is empty"):
        write_pretraining_tfrecords(
            [str(empty)], ElectraTokenizer(VOCAB), out, max_seq_length=LENGTH, progress=False
        )


@needs_beam
def test_prepare_names_an_unknown_beam_option(corpus, tmp_path, capsys):
    code, err = run_prepare(
        capsys, "--corpus", corpus[0], "--output", str(tmp_path), "--runer", "DataflowRunner"
    )
    assert code == 2 and "Unknown option --runer" in err


@needs_beam
def test_a_dry_run_refuses_a_runner_beam_does_not_know(corpus, tmp_path, capsys):
    # The dry run passed --runner Bogus; the run failed once Beam made the pipeline.
    out = str(tmp_path / "out")
    argv = ("--corpus", corpus[0], "--output", out, "--vocab-size", "60", "--dry-run")
    for given, shown in (
        (["--runner", "Bogus"], "Bogus"),
        (["--runner=no_such_module.MyRunner"], "no_such_module.MyRunner"),
    ):
        code, err = run_prepare(capsys, *argv, *given)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, err
        assert f"--runner {shown} is not an Apache Beam runner; pass one of " in err
        assert "DataflowRunner" in err and "FlinkRunner" in err
    # Runners Beam knows pass without being reached (no Dataflow project, Flink or Spark
    # cluster here), in Beam's spellings: any case, "Runner" left out, the class's path.
    dataflow = ["--project", "p", "--region", "r", "--temp_location", "gs://bucket/tmp"]
    for runner in (
        "DataflowRunner",
        "FlinkRunner",
        "SparkRunner",
        "PortableRunner",
        "direct",
        "apache_beam.runners.portability.flink_runner.FlinkRunner",
    ):
        if runner == "DataflowRunner":  # its workers read and write buckets (ram:// here)
            code, err = run_prepare(capsys, *in_bucket(corpus[0], tmp_path), *dataflow)
        else:
            code, err = run_prepare(capsys, *argv, "--runner", runner)
        assert code == 0, (runner, err)
    assert not os.path.exists(out)
    # What every Dataflow job needs: the dry run passed without it, the run then failed.
    for given, needs in (
        ([], "needs --project, --region and --temp_location; pass them as in "),
        (dataflow[:4] + ["--temp_location", "/t"], "needs a gs:// --temp_location (not '/t')"),
        (dataflow, f"runs on Google Cloud workers, which cannot reach '{corpus[0]}' on "),
    ):
        code, err = run_prepare(capsys, *argv, "--runner", "DataflowRunner", *given)
        assert code == 2 and f"--runner DataflowRunner {needs}" in err, err


def in_bucket(text: str, tmp_path) -> list[str]:
    """``prepare``'s flags for Dataflow (no options) on a copy of the corpus file ``text``
    and an output in TensorFlow's in-memory ``ram://`` filesystem, for gs://."""
    bucket = f"ram://bucket-{tmp_path.name}"
    tf.io.gfile.copy(text, f"{bucket}/corpus/a.txt", overwrite=True)
    return ["--corpus", f"{bucket}/corpus/a.txt", "--output", f"{bucket}/out", "--runner",
            "DataflowRunner", "--vocab-size", "60", "--dry-run"]  # fmt: skip


def test_prepare_writes_to_a_url_and_pretraining_reads_it(corpus, tmp_path):
    """``--output gs://...`` with TensorFlow's in-memory ``ram://`` filesystem for gs://."""
    from keras_electra.data import pretraining_dataset
    from keras_electra.data.prepare import prepare

    url = f"ram://bucket-{tmp_path.name}/records"
    result = prepare(corpus, url, vocab_size=60, max_seq_length=LENGTH, num_shards=2, workers=1)
    assert str(result.vocab_file) == f"{url}/vocab.txt" and tf.io.gfile.exists(result.vocab_file)
    local = write_pretraining_tfrecords(
        corpus,
        ElectraTokenizer.from_vocab_file(str(result.vocab_file)),
        str(tmp_path / "local"),
        max_seq_length=LENGTH,
        num_shards=2,
        progress=False,
    )
    assert records(result.shards) == records(local)
    batches = pretraining_dataset(url, batch_size=4, max_seq_length=LENGTH, shuffle=False)
    assert next(iter(batches))["token_ids"].shape == (4, LENGTH)


def test_a_dry_run_sizes_a_corpus_of_urls_asking_each_file_once(tmp_path, monkeypatch):
    # The plan's corpus row counted local files only ("0.0 MB" for gs://...), and each
    # URL's size was asked twice (the Beam decision, then the pipeline row).
    from keras_electra.data import prepare as prepare_module

    base = f"ram://corpus-{tmp_path.name}"
    text = "The quick brown fox jumps over the lazy dog.\n" * 4000  # 180,000 bytes
    for name in ("a.txt", "b.txt"):
        with tf.io.gfile.GFile(f"{base}/{name}", "w") as f:
            f.write(text)
    asked = []
    real = prepare_module.file_size
    monkeypatch.setattr(prepare_module, "file_size", lambda p: asked.append(p) or real(p))
    result = prepare_module.prepare(base, tmp_path / "out", vocab_size=60, dry_run=True)
    assert sorted(asked) == [f"{base}/a.txt", f"{base}/b.txt"]
    assert result.corpus_bytes == 2 * len(text)
    assert "2 text files, 0.4 MB" in result.describe()


def test_the_written_bytes_are_pinned(corpus, tokenizer, tmp_path):
    # The shards, metadata.json (corpus paths as file names) and a learned vocabulary of a
    # fixed corpus, as digests: a refactoring of the writers must leave every byte alone.
    import hashlib

    from keras_electra.data import learn_vocab

    out = tmp_path / "pinned"
    paths = write_pretraining_tfrecords(
        corpus, tokenizer, str(out), max_seq_length=LENGTH, num_shards=3, seed=5, progress=False
    )
    metadata = json.loads((out / "metadata.json").read_text())
    for piece in metadata["settings"]["corpus"]:
        piece[0] = os.path.basename(piece[0])
    # The files' sizes and modification times (a rerun on an edited corpus starts over).
    versions = metadata["settings"].pop("corpus_versions")
    assert [size for _, size, _ in versions] == [os.path.getsize(f) for f in corpus]
    assert metadata.pop("shard_bytes") == [os.path.getsize(p) for p in paths]
    digests = [hashlib.sha256(open(p, "rb").read()).hexdigest()[:16] for p in paths]
    digests.append(hashlib.sha256(json.dumps(metadata).encode()).hexdigest()[:16])
    vocab = "\n".join(learn_vocab(corpus, 60, lowercase=False)).encode("utf-8")
    digests.append(hashlib.sha256(vocab).hexdigest()[:16])
    assert digests == [
        "97d3170305cff6d9",
        "472385064e6467dc",
        "f9a6ed23099b51ad",
        "6df68907b9d49276",
        "b62d8e791de81b03",
    ]


def test_workers_help_says_when_prepare_runs_on_beam():
    # It said "default: every core when the beam extra is installed", where prepare packs in
    # its process below LOCAL_BEAM_MIN_BYTES or LOCAL_BEAM_MIN_CORES.
    import dataclasses

    from keras_electra.data.prepare import LOCAL_BEAM_MIN_BYTES, LOCAL_BEAM_MIN_CORES
    from keras_electra.settings import PrepareSettings

    field = next(f for f in dataclasses.fields(PrepareSettings) if f.name == "workers")
    text = field.metadata["help"]
    assert f"{LOCAL_BEAM_MIN_BYTES // 10**6} MB or more" in text, text
    assert f"{LOCAL_BEAM_MIN_CORES} cores or more" in text, text


def test_a_corpus_of_fewer_documents_than_shards_gets_fewer_shards(tmp_path, capsys):
    # A one-line corpus wrote one shard and seven empty ones, which a multi-worker run
    # could hand a worker as all its data.
    from keras_electra.data import pretraining_dataset

    corpus = tmp_path / "one.txt"
    corpus.write_text("The cat sat on the mat.\n\nA dog ran.\n", encoding="utf-8")
    out = tmp_path / "records"
    args = ("--corpus", str(corpus), "--output", str(out), "--vocab-size", "40", "--workers", "1")
    assert main(["prepare", *args, "--dry-run"]) == 0
    assert "2 shards (too few documents for --num-shards 8) in" in capsys.readouterr().out
    assert main(["prepare", *args]) == 0
    printed = capsys.readouterr().out
    assert "Wrote 2 shards (too few documents for --num-shards 8)" in printed
    names = sorted(p.name for p in out.glob("pretraining-*"))
    assert names == [f"pretraining-0000{i}-of-00002.tfrecord" for i in range(2)]
    metadata = json.loads((out / "metadata.json").read_text(encoding="utf-8"))
    assert metadata["num_shards"] == 2 and all(n > 0 for n in metadata["shard_examples"])
    assert len(records([str(out / name) for name in names])) == metadata["num_examples"]
    batches = pretraining_dataset(str(out), batch_size=1, max_seq_length=128, shuffle=False)
    assert next(iter(batches))["token_ids"].shape == (1, 128)


def test_a_line_longer_than_a_read_is_one_line_not_a_document_break(tmp_path):
    # A read holding no line end gave an empty line: a false document break inside a
    # document, so the shards differed from the on-the-fly pass.
    from keras_electra.data.tfrecords import read_lines

    path = tmp_path / "long.txt"
    data = b"first line\n" + b"word " * 500_000 + b"\nlast line\n"
    path.write_bytes(data)
    lines = [line for block, _ in read_lines(str(path), 0, len(data)) for line in block]
    assert lines == data.split(b"\n")[:-1]


def test_a_damaged_shard_is_written_again_by_a_rerun(corpus, tokenizer, tmp_path):
    # The rerun kept it and counted its records: a DataLossError traceback.
    out = str(tmp_path / "records")
    options = {"max_seq_length": LENGTH, "num_shards": 3, "seed": 2, "progress": False}
    paths = write_pretraining_tfrecords(corpus, tokenizer, out, **options)
    whole = records(paths)
    with open(paths[1], "r+b") as f:
        f.truncate(os.path.getsize(paths[1]) // 2)
    assert records(write_pretraining_tfrecords(corpus, tokenizer, out, **options)) == whole


def test_blank_line_runs_get_no_shard(tokenizer, tmp_path):
    # Two documents between runs of blank lines gave shard_examples [1, 0, 0, 1, 0].
    corpus = tmp_path / "few.txt"
    corpus.write_text("the cat sat.\n" + "\n" * 300 + "a dog ran.\n" + "\n" * 300, encoding="utf-8")
    out = tmp_path / "records"
    write_pretraining_tfrecords(
        [str(corpus)], tokenizer, str(out), max_seq_length=LENGTH, num_shards=8, progress=False
    )
    metadata = json.loads((out / "metadata.json").read_text(encoding="utf-8"))
    assert metadata["num_shards"] == 2 and metadata["shard_examples"] == [1, 1]


def test_corpus_files_inside_the_output_are_refused(tmp_path, capsys):
    # A shell's expansion of out/*.txt passed, and the rerun read out/vocab.txt as text.
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("The cat sat.\n", encoding="utf-8")
    code, err = run_prepare(capsys, "--corpus", str(out / "a.txt"), "--output", str(out))
    assert code == 2 and f"--output '{out}' holds the corpus file '{out / 'a.txt'}'" in err, err


@needs_beam
def test_a_runner_that_cannot_run_here_is_one_sentence(corpus, tmp_path, capsys):
    # Dataflow without apache-beam[gcp] was Beam's ImportError traceback, exit 1.
    argv = [a for a in in_bucket(corpus[0], tmp_path) if a != "--dry-run"]
    argv += ["--project", "p", "--region", "r", "--temp_location", "gs://bucket/tmp"]
    code, err = run_prepare(capsys, *argv)
    assert code == 2 and "The Beam runner DataflowRunner could not run the pipeline (" in err, err


@needs_beam
def test_workers_beside_another_runner_is_refused_and_direct_options_are_its_own(
    corpus, tmp_path, capsys
):
    # --workers beside --runner DataflowRunner was ignored without a word, and metadata.json
    # recorded Beam's default direct_num_workers for a Dataflow job.
    from keras_electra.data.beam import pipeline_options

    out = str(tmp_path / "out")
    argv = ("--corpus", corpus[0], "--output", out, "--vocab-size", "60", "--dry-run")
    code, err = run_prepare(capsys, *argv, "--runner", "DataflowRunner", "--workers", "4")
    assert code == 2 and len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert "--workers sets the local DirectRunner's processes, not DataflowRunner's" in err
    given = ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t"]
    _, described = pipeline_options(given)
    assert described == {"runner": "DataflowRunner", "project": "p", "region": "r"}
    # The DirectRunner named explicitly takes --workers as it does by default.
    for args in ([], ["--runner", "direct"], ["--runner=DirectRunner"]):
        options, described = pipeline_options(args, num_workers=3)
        assert described["direct_num_workers"] == 3, args
        assert described["direct_running_mode"] == "multi_processing", args
    _, described = pipeline_options(["--direct_num_workers=2"], num_workers=None)
    assert described["direct_num_workers"] == 2  # the user's own option is kept


_STUCK = """
import os, subprocess, sys, time
from keras_electra.cli import _stopped_within
child = subprocess.Popen(["sleep", "120"])
with _stopped_within(1.0, "prepare"):
    while True:  # a runner that swallows the stop, waiting on workers the signal ended
        try:
            if child.returncode is None:
                print(child.pid, flush=True)
                child.returncode = "shown"
            time.sleep(60)
        except BaseException:
            pass
"""


@pytest.mark.parametrize(
    "number, status, said",
    [
        (signal.SIGINT, 130, "interrupted; run the command again (pretrain and finetune"),
        (signal.SIGTERM, 75, "Stopped by SIGTERM; run the same command again (prepare keeps"),
    ],
)
def test_a_stopped_prepare_ends_even_when_its_runner_swallows_the_stop(number, status, said):
    # A Ctrl-C during a local Beam prepare hung in about one try of ten (the runner waited
    # on workers the signal had ended), and a SIGTERM left Beam's workers running.
    import subprocess
    import sys
    import time

    process = subprocess.Popen(
        [sys.executable, "-c", _STUCK],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # xdist ignores it
    )
    child = int(process.stdout.readline())
    start = time.monotonic()
    process.send_signal(number)
    _, err = process.communicate(timeout=60)
    assert process.returncode == status, err
    assert time.monotonic() - start < 30
    assert err.strip().splitlines()[-1].startswith(f"keras-electra prepare: {said}"), err
    with pytest.raises(ProcessLookupError):  # its worker ended with it (reaped by init)
        for _ in range(100):
            os.kill(child, 0)
            time.sleep(0.05)


@needs_beam
def test_sigterm_during_a_local_beam_prepare_is_one_sentence_and_ends_its_workers(corpus, tmp_path):
    # It exited 143 without a word, and Beam's workers outlived it by about 9 s.
    import subprocess
    import sys
    import time

    command = [sys.executable, "-m", "keras_electra.cli", "prepare", "--corpus", *corpus]
    command += ["--output", str(tmp_path / "out"), "--vocab-size", "60", "--workers", "2"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline, workers = time.monotonic() + 120, []
    while not workers and time.monotonic() < deadline and process.poll() is None:
        workers = [pid for pid in _descendants(process.pid) if "sdk_worker_main" in _cmdline(pid)]
        time.sleep(0.1)
    if not workers:
        pytest.skip("the pipeline ended before its workers were seen")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 75, err
    assert err.strip().splitlines()[-1] == (
        "keras-electra prepare: Stopped by SIGTERM; run the same command again (prepare "
        "keeps what it finished)."
    ), err
    time.sleep(0.5)
    assert not [pid for pid in workers if _running(pid)]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def test_a_second_prepare_into_the_same_output_stops_in_one_sentence(tmp_path, capsys):
    # Both ran: one removed the other's partial shard and it ended in a NotFoundError
    # traceback on a .tmp file. Another process holds the lock here as a prepare would.
    from conftest import held_by_another_process

    corpus = tmp_path / "one.txt"
    corpus.write_text("The cat sat on the mat.\n\nA dog ran.\n", encoding="utf-8")
    out = tmp_path / "records"
    out.mkdir()
    args = ["--corpus", str(corpus), "--output", str(out), "--vocab-size", "40", "--workers", "1"]
    with held_by_another_process(out):
        code, err = run_prepare(capsys, *args)
        assert code == 2
        assert err.strip().splitlines() == [
            f"keras-electra prepare: error: Another keras-electra process is writing into "
            f"'{out}'; wait for it to end or stop it, or choose another --output."
        ]
        assert os.listdir(out) == []
    assert run_prepare(capsys, *args)[0] == 0  # the lock went with the other process
    assert json.loads((out / "metadata.json").read_text())["complete"]


def test_a_flag_of_prepares_own_misspelled_is_named_with_its_spelling(corpus, tmp_path, capsys):
    # --max_seq_length went to Beam as an unknown pipeline option, with no hint of
    # --max-seq-length; a typo with dashes came back in Beam's underscores.
    argv = ["prepare", "--corpus", corpus[0], "--output", str(tmp_path / "out"), "--dry-run"]
    for given, meant in (
        (["--max_seq_length", "64"], "--max_seq_length; did you mean --max-seq-length?"),
        (["--num-shadrs=4"], "--num-shadrs; did you mean --num-shards?"),
    ):
        with pytest.raises(SystemExit) as stopped:
            main([*argv, *given])
        assert stopped.value.code == 2
        assert capsys.readouterr().err.endswith(f"error: unrecognized argument {meant}\n")
    if beam_available():
        assert main([*argv, "--temp-locaton", "gs://b/t"]) == 2
        assert "Unknown option --temp-locaton; " in capsys.readouterr().err
