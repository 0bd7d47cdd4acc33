"""``keras-electra prepare``: a text corpus packed once into sharded TFRecords.

:func:`prepare` learns a vocabulary (or takes ``vocab``) and writes it as ``vocab.txt``
next to the shards, in this process or on Apache Beam (:func:`uses_beam`), which write
the same shards (docs/pretraining.md, "The corpus").

Examples:
    >>> result = prepare(["my_corpus/"], "tfrecords-128/", max_seq_length=128)  # doctest: +SKIP
    >>> print(result.describe())  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from keras_electra.atomic import check_writable, held_directory
from keras_electra.data.beam import (
    beam_available,
    count_words_beam,
    pipeline_options,
    write_tfrecords_beam,
)
from keras_electra.data.files import (
    check_corpus_has_text,
    check_output_outside_corpus,
    file_size,
    file_versions,
    is_remote,
    left_out_note,
    real_path,
    resolve_corpus_files,
)
from keras_electra.data.tfrecords import (
    check_writing,
    finished_shards_note,
    plan_shards,
    shard_paths,
    vocab_digest,
    write_pretraining_tfrecords,
)
from keras_electra.data.tokenizer import ElectraTokenizer, corpus_warnings
from keras_electra.data.vocab import (
    check_cased_vocab,
    check_vocab_size,
    learn_vocab,
    load_vocab,
    save_vocab,
    vocab_from_counts,
)
from keras_electra.errors import ConfigError, InputDataError
from keras_electra.run_directory import RunDirectory
from keras_electra.settings import PrepareSettings, check_seed, with_options


@dataclass
class PrepareResult:
    """What :func:`prepare` wrote (or, for a dry run, would write).

    Attributes:
        output_dir: the directory of the shards and ``vocab.txt``.
        settings: the options.
        corpus_files: the text files read.
        vocab_size: the vocabulary's size (a learned one: at most this).
        shards: the shard files.
        written: False for a dry run.
        corpus_bytes: the corpus files' total size (local files and URLs alike).
        existing: (dry run) what the run would do with the finished shards the output
            holds (kept, or removed and why), None where it holds none.
    """

    output_dir: Path | str
    settings: PrepareSettings
    corpus_files: list[str]
    vocab_size: int
    shards: list[str]
    written: bool
    corpus_bytes: int = 0
    existing: str | None = None

    @property
    def vocab_file(self) -> Path | str:
        return vocab_path(self.output_dir)

    def describe(self) -> str:
        """What the command prints: what was written and how to pretrain on it, or the
        dry run's plan."""
        s = self.settings
        quote = shlex.quote  # a path with a space or a quote, pasted into a shell
        pretrain = (
            f"keras-electra pretrain --corpus {quote(str(self.output_dir))} "
            f"--vocab {quote(str(self.vocab_file))} "
            f"--max-seq-length {s.max_seq_length}{'' if s.lowercase else ' --cased'} "
            "--output RUN_DIR"
        )
        count = len(self.shards)
        shards = f"{count} shard{'s' if count != 1 else ''}" + (
            f" (too few documents for --num-shards {s.num_shards})" if count < s.num_shards else ""
        )
        if self.written:
            return (
                f"Wrote {shards} and {RunDirectory.VOCAB} to "
                f"{self.output_dir}\nPretrain with: {pretrain}"
            )
        vocabulary = (
            f"{s.vocab} ({self.vocab_size:,} pieces)"
            if s.vocab
            else f"learned from the corpus (at most {self.vocab_size:,} pieces, "
            + ("lowercased" if s.lowercase else "cased")
            + ")"
        )
        rows = {
            "corpus": f"{len(self.corpus_files):,} text file"
            + ("s" if len(self.corpus_files) != 1 else "")
            + f", {self.corpus_bytes / 1e6:,.1f} MB",
            "vocabulary": f"{vocabulary}, written to {self.vocab_file}",
            "examples": f"{s.max_seq_length} tokens each, packed with seed {s.seed}",
            "pipeline": _pipeline_row(s, self.corpus_bytes),
            "shards": f"{shards} in {self.output_dir} ({Path(self.shards[0]).name}, ...) "
            "and metadata.json",
            **({"existing": self.existing} if self.existing else {}),
            "then": pretrain,
        }
        width = max(map(len, rows))
        lines = [f"  {k.ljust(width)}  {v}" for k, v in rows.items()]
        return "\n".join(["Dry run: every input checked; nothing was written.", *lines])


def _pipeline_row(s: PrepareSettings, size: int) -> str:
    if not uses_beam(s, size):
        return "in this process" + (
            "" if beam_available() else ' (one core; pip install "keras-electra[beam]" for all)'
        )
    _, described = pipeline_options(s.beam_options, s.workers)
    workers = described.get("direct_num_workers") or described.get("num_workers")
    return f"Apache Beam, {described.get('runner', 'DirectRunner')}" + (
        f" ({workers} workers)" if workers else ""
    )


def prepare(
    corpus: list[str] | str | Path,
    output_dir: str | Path,
    *,
    settings: PrepareSettings | None = None,
    **options,
) -> PrepareResult:
    """Pack a text corpus into sharded TFRecords with its vocabulary.

    Args:
        corpus: text files (one sentence per line, a blank line between documents) or
            directories of ``*.txt`` files.
        output_dir: where the shards, ``metadata.json`` and ``vocab.txt`` go.
        settings: the options as one object.
        **options: fields of :class:`~keras_electra.settings.PrepareSettings`
            (``max_seq_length``, ``vocab``, ``vocab_size``, ``num_shards``, ``seed``,
            ``lowercase``, ``dry_run``, ``workers``, ``beam_options``: see
            :func:`uses_beam` for when it runs on Apache Beam).

    Returns:
        A :class:`PrepareResult`; with ``dry_run=True`` nothing is written.

    Raises:
        InputDataError: a corpus file is missing or not text, or the vocabulary is unusable.
        ConfigError: a length or shard count no writing can use, Beam options the
            installed Beam does not know (or without Beam installed), or an output
            directory that holds a model or exports.
        StorageError: (dry run) the output directory cannot be written.
        TypeError: a keyword that is not an option.
    """
    corpus = [str(p) for p in ([corpus] if isinstance(corpus, str | Path) else corpus)]
    s = with_options("prepare", PrepareSettings, settings, corpus=corpus, **options)
    out_name = os.fspath(output_dir)
    remote = is_remote(out_name)  # gs://bucket/dir: written through tf.io.gfile
    out: Path | str = out_name.rstrip("/") if remote else Path(out_name)
    check_writing(s.max_seq_length, s.num_shards)
    check_seed(s.seed)  # a dry run too: past it, the packing's hash fails with a traceback
    check_output_outside_corpus(corpus, out_name, "prepare")
    if not remote:  # the records' vocab.txt would replace a model's own
        held = RunDirectory(out)
        if held.has_config():
            raise ConfigError(
                f"--output '{out}' holds a model (config.json), whose vocab.txt the records' "
                "vocabulary would replace; choose a new --output for the records."
            )
        held.refuse_exports("the records")
    tokens = load_vocab(s.vocab) if s.vocab else None
    if tokens is not None:
        check_cased_vocab(tokens, s.vocab, s.lowercase)
    if tokens is None:
        check_vocab_size(s.vocab_size)  # a dry run too
    files = resolve_corpus_files(corpus)
    if note := left_out_note(corpus):
        print(note, file=sys.stderr, flush=True)
    check_corpus_has_text(files)  # before a vocabulary is learned (a dry run too)
    total = sum(map(file_size, files))  # each file's size asked once (a URL's is a request)
    if not remote:  # before a vocabulary is learned, which can take minutes
        check_writable(out)
    beam = uses_beam(s, total, out_name)  # the Beam options checked, a dry run too
    if s.dry_run:
        shards = shard_paths(str(out), len(plan_shards(files, s.num_shards)))
        size = len(tokens) if tokens is not None else s.vocab_size
        known = tokens or _learned_before(out, _vocabulary_request(s, files))
        tokenizer = ElectraTokenizer(known, lowercase=s.lowercase) if known else None
        existing = finished_shards_note(
            files, tokenizer, out_name, s.max_seq_length, s.num_shards, s.seed
        )
        return PrepareResult(
            out, s, files, size, shards, written=False, corpus_bytes=total, existing=existing
        )
    if not beam and not beam_available():
        print(IN_PROCESS_HINT, file=sys.stderr)
    import tensorflow as tf

    if isinstance(out, Path):  # an OSError, which the command tells in one sentence
        out.mkdir(parents=True, exist_ok=True)
    else:
        tf.io.gfile.makedirs(out)
    with held_directory(out) if isinstance(out, Path) else contextlib.nullcontext():
        request = _vocabulary_request(s, files) if tokens is None else None
        if request is not None and (tokens := _learned_before(out, request)) is not None:
            print(f"Using the vocabulary an earlier run learned: {vocab_path(out)}", flush=True)
        beam_args = {"pipeline_args": s.beam_options, "num_workers": s.workers} if beam else {}
        if tokens is None:
            if beam:
                temp = os.path.join(str(out), ".word-counts")
                counts = count_words_beam(corpus, s.lowercase, temp_dir=temp, **beam_args)
                if tf.io.gfile.exists(temp):
                    tf.io.gfile.rmtree(temp)
                tokens = vocab_from_counts(counts, s.vocab_size, progress=True)
            else:
                tokens = learn_vocab(corpus, s.vocab_size, lowercase=s.lowercase, progress=True)
        result = PrepareResult(out, s, files, len(tokens), [], written=True, corpus_bytes=total)
        save_vocab(tokens, str(result.vocab_file))
        if request is not None:  # how it was learned: a rerun need not learn it again
            _write_request(out, {**request, "vocab_sha256": vocab_digest(tokens)})
        tokenizer = ElectraTokenizer(tokens, lowercase=s.lowercase)
        for warning in corpus_warnings(tokenizer, files, s.max_seq_length):
            print(warning, file=sys.stderr, flush=True)
        options = {"max_seq_length": s.max_seq_length, "num_shards": s.num_shards, "seed": s.seed}
        write = write_tfrecords_beam if beam else write_pretraining_tfrecords
        result.shards = write(corpus, tokenizer, str(out), **options, **beam_args)
        return result


LEARNED = "vocab_learned.json"
"""Beside ``vocab.txt``: what it was learned from (``--vocab-size``, casing, each corpus
file's size and modification time) and its SHA-256, so that a rerun of a stopped
``prepare`` uses it instead of reading the whole corpus again."""


def vocab_path(out: Path | str) -> Path | str:
    """``vocab.txt`` in the output: a path, or a URL such as ``gs://...``."""
    if isinstance(out, Path):
        return out / RunDirectory.VOCAB
    return f"{out}/{RunDirectory.VOCAB}"


def _vocabulary_request(s: PrepareSettings, files: list[str]) -> dict:
    """What a learned vocabulary depends on."""
    corpus = file_versions([real_path(p) for p in files])
    return {"vocab_size": s.vocab_size, "lowercase": s.lowercase, "corpus": corpus}


def _learned_before(out: Path | str, request: dict) -> list[str] | None:
    """The vocabulary an earlier run (stopped or done) learned into ``out``, if it was
    learned for the same ``request`` and is whole; else None."""
    import tensorflow as tf

    record, vocab = os.path.join(str(out), LEARNED), str(vocab_path(out))
    try:
        with tf.io.gfile.GFile(record, "r") as f:
            learned = json.load(f)
        tokens = load_vocab(vocab)
    except (OSError, ValueError, tf.errors.OpError, InputDataError):
        return None
    if not isinstance(learned, dict) or learned.pop("vocab_sha256", None) != vocab_digest(tokens):
        return None
    return tokens if learned == request else None


def _write_request(out: Path | str, value: dict) -> None:
    import tensorflow as tf

    with tf.io.gfile.GFile(os.path.join(str(out), LEARNED), "w") as f:
        f.write(json.dumps(value, indent=1))


IN_PROCESS_HINT = (
    "Packing in this process; for a large corpus, install the beam extra "
    '(pip install "keras-electra[beam]") to pack on every core of a larger machine or on a '
    "Beam runner such as Dataflow."
)


LOCAL_BEAM_MIN_BYTES = 256 * 10**6
"""The corpus size (bytes) from which :func:`uses_beam` packs on every core, on a machine of
:data:`LOCAL_BEAM_MIN_CORES` cores or more (measured: docs/pretraining.md)."""

LOCAL_BEAM_MIN_CORES = 4


def uses_beam(settings: PrepareSettings, size: int, output: str | None = None) -> bool:
    """Whether ``prepare`` runs as a Beam pipeline for a corpus of ``size`` bytes: with Beam
    options, with ``workers`` above 1, or (the beam extra installed, ``workers`` not given)
    for a corpus of :data:`LOCAL_BEAM_MIN_BYTES` or more; else it packs in this process.

    Raises:
        ConfigError: Beam options or ``workers`` above 1 without the beam extra, or
            ``workers`` below 1.
    """
    workers = settings.workers
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be a positive integer, not {workers}.")
    if settings.beam_options:
        paths = [*settings.corpus, *([output] if output is not None else [])]
        pipeline_options(settings.beam_options, workers, paths)  # checks them
        return True
    if workers == 1:
        return False
    if workers is not None:
        if not beam_available():
            raise ConfigError(
                f"--workers {workers} runs prepare on Apache Beam, which is not installed; "
                'install the beam extra (pip install "keras-electra[beam]") or pass '
                "--workers 1."
            )
        return True
    cores = os.cpu_count() or 1
    return size >= LOCAL_BEAM_MIN_BYTES and cores >= LOCAL_BEAM_MIN_CORES and beam_available()
