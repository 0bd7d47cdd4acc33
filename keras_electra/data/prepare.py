"""``keras-electra prepare``: a text corpus packed once into sharded TFRecords.

:func:`prepare` learns a WordPiece vocabulary (or takes ``vocab``), writes it as
``vocab.txt`` (named as in a run directory) and the packed examples as TFRecord
shards next to it (:func:`~keras_electra.data.tfrecords.write_pretraining_tfrecords`).
Pretraining on them needs the same ``--max-seq-length``: the records hold examples of
exactly that many tokens. With ``dry_run=True`` it checks the corpus, the vocabulary,
the length and the output directory and writes nothing.

Examples:
    >>> result = prepare(["my_corpus/"], "tfrecords-128/", max_seq_length=128)  # doctest: +SKIP
    >>> print(result.describe())  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from keras_electra.atomic import check_writable
from keras_electra.data.files import check_corpus_has_text, is_remote, resolve_corpus_files
from keras_electra.data.tfrecords import check_writing, shard_name, write_pretraining_tfrecords
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.data.vocab import learn_vocab, load_vocab, save_vocab
from keras_electra.run_directory import RunDirectory
from keras_electra.settings import PrepareSettings, unknown_fields


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
    """

    output_dir: Path
    settings: PrepareSettings
    corpus_files: list[str]
    vocab_size: int
    shards: list[str]
    written: bool

    @property
    def vocab_file(self) -> Path:
        return self.output_dir / RunDirectory.VOCAB

    def describe(self) -> str:
        """What the command prints: what was written and how to pretrain on it, or the
        dry run's plan."""
        s = self.settings
        pretrain = (
            f"keras-electra pretrain --corpus {self.output_dir} --vocab {self.vocab_file} "
            f"--max-seq-length {s.max_seq_length} --output RUN_DIR"
        )
        if self.written:
            return (
                f"Wrote {len(self.shards)} shards and {self.vocab_file.name} to "
                f"{self.output_dir}\nPretrain with: {pretrain}"
            )
        local = [f for f in self.corpus_files if not is_remote(f)]
        size = sum(os.path.getsize(f) for f in local) / 1e6
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
            + f", {size:,.1f} MB",
            "vocabulary": f"{vocabulary}, written to {self.vocab_file}",
            "examples": f"{s.max_seq_length} tokens each, packed with seed {s.seed}",
            "shards": f"{len(self.shards)} in {self.output_dir} ({Path(self.shards[0]).name}, "
            "...) and metadata.json",
            "then": pretrain,
        }
        width = max(map(len, rows))
        lines = [f"  {k.ljust(width)}  {v}" for k, v in rows.items()]
        return "\n".join(["Dry run: every input checked; nothing was written.", *lines])


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
            ``lowercase``, ``dry_run``).

    Returns:
        A :class:`PrepareResult`; with ``dry_run=True`` nothing is written.

    Raises:
        InputDataError: a corpus file is missing or not text, or the vocabulary is unusable.
        ConfigError: a length or shard count no writing can use.
        StorageError: (dry run) the output directory cannot be written.
        TypeError: a keyword that is not an option.
    """
    unknown = unknown_fields(PrepareSettings, options)
    if unknown:
        raise TypeError(
            f"prepare() has no option {unknown[0]!r}; the options are the fields of "
            "keras_electra.settings.PrepareSettings."
        )
    corpus = [str(p) for p in ([corpus] if isinstance(corpus, str | Path) else corpus)]
    s = dataclasses.replace(settings or PrepareSettings(), corpus=corpus, **options)
    out = Path(output_dir)
    check_writing(s.max_seq_length, s.num_shards)
    tokens = load_vocab(s.vocab) if s.vocab else None
    if s.dry_run:
        files = resolve_corpus_files(corpus)
        check_corpus_has_text(files)  # what learning a vocabulary or packing checks first
        check_writable(out)
        shards = [str(out / shard_name(i, s.num_shards)) for i in range(s.num_shards)]
        size = len(tokens) if tokens is not None else s.vocab_size
        return PrepareResult(out, s, files, size, shards, written=False)
    if tokens is None:
        tokens = learn_vocab(corpus, s.vocab_size, lowercase=s.lowercase)
    out.mkdir(parents=True, exist_ok=True)
    result = PrepareResult(out, s, resolve_corpus_files(corpus), len(tokens), [], written=True)
    save_vocab(tokens, str(result.vocab_file))
    result.shards = write_pretraining_tfrecords(
        corpus,
        ElectraTokenizer(tokens, lowercase=s.lowercase),
        str(out),
        max_seq_length=s.max_seq_length,
        num_shards=s.num_shards,
        seed=s.seed,
    )
    return result
