"""Pretraining data as ``tf.data``: :func:`pretraining_dataset`, the one entry (text or
TFRecords in, batches for ``fit`` out, carrying :func:`fit_options`), and the examples
streamed from raw text, packed like google-research/electra.

The corpus format: docs/pretraining.md, "The corpus" (invalid UTF-8 is replaced, lines cut
to :data:`MAX_LINE_CHARS`). Lines are tokenized in parallel batches
(:func:`~keras_electra.data.files.tokenize_batch`) and packed by a ``Dataset.scan`` whose
random choices are hashes (:mod:`keras_electra.data.packing`), so a seed fixes the output
and ``dataset.skip(n)`` reproduces a position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from keras_electra.config import FEATURES
from keras_electra.data import packing
from keras_electra.data.files import (
    MAX_LINE_CHARS,  # noqa: F401 (this module documents it)
    PathsLike,
    check_corpus_has_text,
    resolve_corpus_files,
    tokenize_batch,
)
from keras_electra.data.tfrecords import RECORD_FEATURES, check_records, is_tfrecord_input
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import ConfigError, InputDataError

# The functions handed to tf.data here are written with TensorFlow's ops (tf.cond, not
# Python ``if``): AutoGraph's conversion of them, and of tf-text's code under them, would
# only cost seconds at the start of every process.
no_autograph = tf.autograph.experimental.do_not_convert

_TOKENIZE_BATCH = 256

# Readers kept open at once when reading shuffled shards (in order: one at a time, so the
# shards give back the corpus's examples in its order).
_MAX_SHUFFLED_READERS = 16


def file_order(names: tf.Tensor, seed: int, epoch: int | tf.Tensor) -> tf.Tensor:
    """The files (a 1-D tensor of names) in pass ``epoch``'s seeded order.

    Text and TFRecord pipelines share it, so both permute their files alike.
    """
    if names.shape[0] <= 1:
        return names
    keys = tf.random.stateless_uniform(
        [names.shape[0]], seed=packing._stream_seed(seed, epoch, packing._FILE_ORDER)
    )
    return tf.gather(names, tf.argsort(keys))


def line_dataset(
    files: Sequence[str], *, seed: int = 0, epoch: int | tf.Tensor = 0, shuffle_files: bool = False
) -> tf.data.Dataset:
    """Reads the lines of resolved text files, with a blank line after each file.

    Args:
        files: existing text files (see :func:`resolve_corpus_files`).
        seed: seed for the file order.
        epoch: epoch number (an int or int64 tensor); each epoch has its own file order.
        shuffle_files: permute the files (deterministically for ``seed`` and ``epoch``).

    Returns:
        A dataset of scalar ``tf.string`` lines, without line endings.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("One.\\nTwo.\\n")
        >>> list(line_dataset([path]).as_numpy_iterator())
        [b'One.', b'Two.', b'']
    """
    names = tf.constant(list(files), dtype=tf.string)
    if shuffle_files:
        names = file_order(names, seed, epoch)
    end_of_file = tf.data.Dataset.from_tensors(tf.constant("", tf.string))
    return tf.data.Dataset.from_tensor_slices(names).flat_map(
        no_autograph(lambda name: tf.data.TextLineDataset(name).concatenate(end_of_file))
    )


def tokenize_lines(lines: tf.data.Dataset, tokenizer: ElectraTokenizer) -> tf.data.Dataset:
    """Tokenizes a dataset of lines in parallel batches.

    Lines are cut to :data:`MAX_LINE_CHARS` characters and invalid UTF-8 is replaced
    with U+FFFD.

    Args:
        lines: a dataset of scalar ``tf.string`` lines.
        tokenizer: the tokenizer.

    Returns:
        A dataset of ``(ids, blank)``: int32 ids of shape ``[None]`` and a bool that is
        true for blank (document-separating) lines. Order is preserved.

    Examples:
        >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi"])
        >>> lines = tf.data.Dataset.from_tensor_slices(["Hi hi", ""])
        >>> [(i.tolist(), bool(b)) for i, b in tokenize_lines(lines, t).as_numpy_iterator()]
        [([5, 5], False), ([], True)]
    """
    tokenize = no_autograph(lambda batch: tokenize_batch(tokenizer, batch))
    return (
        lines.batch(_TOKENIZE_BATCH)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .unbatch()
    )


def pack_examples(
    token_lines: tf.data.Dataset,
    *,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    seed: int | tf.Tensor = 0,
    single_segment_prob: float = packing.SINGLE_SEGMENT_PROB,
    random_length_prob: float = packing.RANDOM_LENGTH_PROB,
) -> tf.data.Dataset:
    """Packs tokenized sentences into ``[CLS] A [SEP] B [SEP]`` examples, as ELECTRA does.

    Rules (google-research/electra's ``ExampleBuilder``): sentences accumulate until
    their token count reaches the target length (``max_seq_length``) or a blank line
    ends the document. The first segment's target is unbounded with probability
    ``single_segment_prob``, else ``(target - 3) // 2``; each sentence goes to the first
    segment if it is empty, or stays under its target, or (with probability 0.5) if the
    second segment is empty and the first is under target; otherwise to the second.
    The first segment is cut to ``max_seq_length - 2`` tokens, the second to what is
    left. With probability ``random_length_prob`` an example's target length is
    ``randint(5, max_seq_length)``.

    This ``Dataset.scan`` assigns each sentence as it arrives (the rule looks only at
    earlier ones) and keeps only the tokens that survive trimming; each draw is a hash
    (:mod:`keras_electra.data.packing`), so a document packs the same wherever it is read.

    Args:
        token_lines: a dataset of ``(ids, blank)`` as made by :func:`tokenize_lines`.
        max_seq_length: tokens per example, ``[CLS]`` and ``[SEP]`` included.
        cls_id: id of ``[CLS]``.
        sep_id: id of ``[SEP]``.
        pad_id: id of ``[PAD]``, used to pad ``token_ids``.
        seed: an int64 scalar or a shape ``[2]`` stateless seed; fixes every random choice.
        single_segment_prob: see above (0 makes every example two-segment when possible).
        random_length_prob: see above (0 keeps every target at ``max_seq_length``).

    Returns:
        A dataset of dicts of int32 ``[max_seq_length]`` tensors: ``token_ids``,
        ``padding_mask`` (1 for tokens, 0 for padding) and ``segment_ids`` (0 for
        ``[CLS] A [SEP]``, 1 for ``B [SEP]``).

    Examples:
        >>> lines = tf.data.Dataset.from_tensor_slices(
        ...     (tf.ragged.constant([[5, 6], [7], []]), [False, False, True]))
        >>> ex = next(iter(pack_examples(lines, max_seq_length=8, cls_id=2, sep_id=3,
        ...     pad_id=0, single_segment_prob=0.0, random_length_prob=0.0)))
        >>> ex["token_ids"].numpy().tolist(), ex["segment_ids"].numpy().tolist()
        ([2, 5, 6, 3, 7, 3, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0])
    """
    packing.check_shapes(None, max_seq_length)
    seed = tf.convert_to_tensor(seed, dtype=tf.int64)
    if seed.shape.rank == 0:
        seed = tf.stack([seed, tf.constant(0, tf.int64)])
    packer = _Packer(
        int(max_seq_length),
        (cls_id, sep_id, pad_id),
        packing.seed_key_tf(seed),
        tf.constant(single_segment_prob, tf.float64),
        tf.constant(random_length_prob, tf.float64),
    )
    return (
        token_lines.scan(packer.initial_state(), no_autograph(packer.step))
        .filter(no_autograph(lambda emitted, example: emitted))
        .map(no_autograph(lambda emitted, example: example))
    )


class _PackState(NamedTuple):
    """:func:`pack_examples`' state between lines."""

    # Fixed-shape buffers (a variable-length state makes Dataset.scan trace its step twice);
    # past a segment's length they hold leftovers, never read.
    first: tf.Tensor  # the first segment's tokens, cut to length - 2, padded to it
    second: tf.Tensor  # the second segment's, cut to length - 3, padded to it
    first_len: tf.Tensor  # the first segment's length before cutting
    second_len: tf.Tensor  # the second's
    doc: tf.Tensor  # the document's key, set by its first line with tokens
    line_no: tf.Tensor  # the document's lines with tokens seen (packing's hash index)
    example: tf.Tensor  # the document's examples made (packing's hash index)
    target: tf.Tensor  # the example's target length, drawn at its first line
    first_target: tf.Tensor  # its first segment's


class _Packer:
    """:func:`pack_examples`' rules, as a ``Dataset.scan`` step over ``(ids, blank)`` lines."""

    def __init__(self, length: int, ids: tuple[int, int, int], key, single_prob, random_prob):
        self.length = length
        self.cls_id, self.sep_id, self.pad_id = ids
        self.key, self.single_prob, self.random_prob = key, single_prob, random_prob
        self.empty_example = {name: tf.zeros([length], tf.int32) for name in FEATURES}

    def initial_state(self) -> _PackState:
        zero = tf.constant(0)
        return _PackState(
            *self.buffers(), zero, zero, tf.constant(0, tf.uint64), zero, zero, zero, zero
        )

    def buffers(self, first=(), second=()) -> tuple[tf.Tensor, tf.Tensor]:
        """The state's two segment buffers holding ``first`` and ``second``, cut to fit."""
        return tuple(
            tf.reshape(tf.pad(tf.cast(kept, tf.int32), [[0, size]])[:size], [size])
            for kept, size in zip((first, second), (self.length - 2, self.length - 3), strict=True)
        )

    def make_example(self, first: tf.Tensor, second: tf.Tensor) -> dict[str, tf.Tensor]:
        """``[CLS] first [SEP] second [SEP]`` (the second cut to fit), padded."""
        length = self.length
        second = second[: tf.maximum(0, length - tf.size(first) - 3)]
        has_second = tf.cast(tf.size(second) > 0, tf.int32)
        sep = tf.constant([self.sep_id], tf.int32)
        ids = tf.concat([[self.cls_id], first, sep, second, sep[:has_second]], axis=0)
        segments = tf.cast(tf.range(tf.size(ids)) >= tf.size(first) + 2, tf.int32)
        padding = [[0, length - tf.size(ids)]]

        def pad(values, value=0):
            return tf.reshape(tf.pad(values, padding, constant_values=value), [length])

        return {
            "token_ids": pad(ids, self.pad_id),
            "padding_mask": pad(tf.ones_like(ids)),
            "segment_ids": pad(segments),
        }

    def _to_first(self, state: _PackState, num: tf.Tensor) -> tf.Tensor:
        """Whether a line of ``num`` tokens goes to the first segment. The coin decides
        only a line that would overflow a non-empty first segment while the second is
        empty; it is drawn only then (the same draw as the writers')."""
        first_len, first_target = state.first_len, state.first_target
        undecided = (
            (first_len > 0)
            & (first_len + num >= first_target)
            & tf.equal(state.second_len, 0)
            & (first_len < first_target)
        )
        return (tf.equal(first_len, 0) | (first_len + num < first_target)) | tf.cond(
            undecided,
            lambda: packing.uniform_tf(state.doc, packing.COIN, state.line_no) < 0.5,
            lambda: tf.constant(False),
        )

    def step(self, state: _PackState, line):
        ids, blank = line
        ids = tf.cast(ids, tf.int32)
        num = tf.size(ids)
        pending = state.first_len + state.second_len
        append = ~blank & (num > 0)
        # The document's first line with tokens sets its key, an example's first its targets.
        doc = tf.cond(
            append & tf.equal(state.line_no, 0),
            lambda: packing.document_key_tf(self.key, ids),
            lambda: state.doc,
        )
        target, first_target = tf.cond(
            append & tf.equal(pending, 0),
            lambda: packing.targets_tf(
                doc, state.example, self.length, self.single_prob, self.random_prob
            ),
            lambda: (state.target, state.first_target),
        )
        state = state._replace(doc=doc, target=target, first_target=first_target)
        to_first = self._to_first(state, num)
        add_first = tf.where(append & to_first, num, 0)
        add_second = tf.where(append & ~to_first, num, 0)
        first, second = self.buffers(
            tf.concat([state.first[: state.first_len], ids[:add_first]], 0),
            tf.concat([state.second[: state.second_len], ids[:add_second]], 0),
        )
        first_len = state.first_len + add_first
        second_len = state.second_len + add_second
        flush = (blank & (pending > 0)) | (append & (first_len + second_len >= target))
        example = tf.cond(
            flush,
            lambda: self.make_example(first[:first_len], second[:second_len]),
            lambda: self.empty_example,
        )
        # A flushed example empties the segments; a blank line ends the document (the next
        # one starts afresh).
        state = state._replace(
            first=first,
            second=second,
            first_len=tf.where(flush, 0, first_len),
            second_len=tf.where(flush, 0, second_len),
            line_no=tf.where(blank, 0, state.line_no + tf.cast(append, tf.int32)),
            example=tf.where(blank, 0, state.example + tf.cast(flush, tf.int32)),
        )
        return state, (flush, example)


def pretraining_examples(
    files: PathsLike,
    tokenizer: ElectraTokenizer,
    *,
    max_seq_length: int,
    seed: int = 0,
    epoch: int | tf.Tensor = 0,
    shuffle_files: bool = False,
) -> tf.data.Dataset:
    """One pass of packed, unbatched, unshuffled examples over a text corpus.

    Args:
        files: text files, directories of ``*.txt`` files, or glob patterns.
        tokenizer: the tokenizer.
        max_seq_length: tokens per example.
        seed: fixes the packing's random choices (and the file order).
        epoch: the pass number; each pass packs differently (deterministically).
        shuffle_files: read the files in a seeded random order.

    Returns:
        A dataset of dicts of int32 ``[max_seq_length]`` tensors (see :func:`pack_examples`).

    Raises:
        InputDataError: if a file is missing or the corpus has only blank lines.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("hi hi.\\n")
        >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi", "."])
        >>> ex = next(iter(pretraining_examples(path, t, max_seq_length=6)))
        >>> ex["token_ids"].numpy().tolist()
        [2, 5, 5, 6, 3, 0]
    """
    paths = resolve_corpus_files(files)
    check_corpus_has_text(paths)
    return _epoch_examples(paths, tokenizer, epoch, seed, max_seq_length, shuffle_files)


def _epoch_examples(
    paths: list[str],
    tokenizer: ElectraTokenizer,
    epoch: int | tf.Tensor,
    seed: int,
    max_seq_length: int,
    shuffle_files: bool,
) -> tf.data.Dataset:
    lines = line_dataset(paths, seed=seed, epoch=epoch, shuffle_files=shuffle_files)
    return pack_examples(
        tokenize_lines(lines, tokenizer),
        max_seq_length=max_seq_length,
        cls_id=tokenizer.cls_id,
        sep_id=tokenizer.sep_id,
        pad_id=tokenizer.pad_id,
        seed=packing._stream_seed(seed, epoch, packing._PACKING),
    )


def text_passes(
    files: PathsLike,
    tokenizer: ElectraTokenizer,
    *,
    seed: int,
    max_seq_length: int,
    shuffle_files: bool,
    batch_size: int,
    repeat: bool,
) -> Callable[[tf.Tensor], tf.data.Dataset]:
    """Checks a text corpus once and returns ``epoch -> that pass's packed examples``.

    The reader :func:`pretraining_dataset` uses for text.

    Raises:
        InputDataError: if a file is missing, the corpus has no text or no tokens, or
            (without ``repeat``) it gives fewer than ``batch_size`` examples.
    """
    paths = resolve_corpus_files(files)
    check_corpus_has_text(paths)

    def read_pass(epoch: tf.Tensor, shuffle_files: bool = shuffle_files) -> tf.data.Dataset:
        return _epoch_examples(paths, tokenizer, epoch, seed, max_seq_length, shuffle_files)

    # Without these checks a repeated corpus of, say, only control characters would make
    # the pipeline loop forever looking for an example. Any line with a token makes an
    # example, so a repeated corpus needs only one; a single pass is probed for a batch.
    if not _has_tokens(paths, tokenizer):
        raise InputDataError(
            f"The corpus ({paths[0]}{' ...' if len(paths) > 1 else ''}) gives no tokens; "
            "pass UTF-8 text whose words the vocabulary can tokenize."
        )
    if not repeat:
        found = sum(1 for _ in read_pass(0, shuffle_files=False).take(batch_size))
        if found < batch_size:
            raise InputDataError(
                f"The corpus gives only {found} examples, fewer than batch_size={batch_size}; "
                "use a smaller batch_size, more text, or repeat=True."
            )
    return read_pass


def _has_tokens(paths: list[str], tokenizer: ElectraTokenizer) -> bool:
    """Whether some line tokenizes, as the pipeline reads it, to at least one token (reads
    until one does)."""
    tokenized = tokenize_lines(line_dataset(paths), tokenizer)
    nonempty = no_autograph(lambda ids, blank: tf.size(ids) > 0)
    return any(True for _ in tokenized.filter(nonempty).take(1))


def corpus_stats(
    files: PathsLike,
    tokenizer: ElectraTokenizer,
    *,
    max_seq_length: int = 128,
    seed: int = 0,
) -> dict[str, float]:
    """Counts one pass of packed examples and their tokens.

    Args:
        files: text files, directories of ``*.txt`` files, or glob patterns.
        tokenizer: the tokenizer.
        max_seq_length: tokens per example.
        seed: the packing seed.

    Returns:
        A dict with ``examples``, ``tokens`` (real tokens, ``[CLS]``/``[SEP]`` included),
        ``unk_tokens``, ``unk_rate`` (``[UNK]`` share of word pieces) and
        ``fill_rate`` (share of positions that are not padding).

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("hi zz.\\n")
        >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi", "."])
        >>> corpus_stats(path, t, max_seq_length=8)["unk_tokens"]
        1
    """
    examples = pretraining_examples(files, tokenizer, max_seq_length=max_seq_length, seed=seed)
    specials = tf.constant([tokenizer.cls_id, tokenizer.sep_id], tf.int32)

    def add(totals, example):
        ids, real = example["token_ids"], tf.cast(example["padding_mask"], tf.bool)
        special = tf.reduce_any(tf.equal(ids[:, None], specials[None, :]), axis=1)
        counted = (real, tf.equal(ids, tokenizer.unk_id) & real, special & real)
        return totals + tf.stack([tf.constant(1, tf.int64), *map(tf.math.count_nonzero, counted)])

    n, tokens, unk, special = examples.reduce(tf.zeros([4], tf.int64), add).numpy().tolist()
    pieces = max(tokens - special, 1)
    return {
        "examples": n,
        "tokens": tokens,
        "unk_tokens": unk,
        "unk_rate": unk / pieces,
        "fill_rate": tokens / max(n * max_seq_length, 1),
    }


def record_passes(
    paths: PathsLike,
    tokenizer: ElectraTokenizer | None,
    *,
    seed: int,
    max_seq_length: int,
    shuffle_files: bool,
) -> tuple[Callable[[tf.Tensor], tf.data.Dataset], Callable[[Any], dict[str, tf.Tensor]]]:
    """Checks TFRecord files once and returns how to read a pass and parse its batches.

    The reader :func:`pretraining_dataset` uses for TFRecords: ``read_pass(epoch)``
    gives the pass's serialized records (the files one after another; with
    ``shuffle_files``, in a new seeded order, interleaved), and ``parse(batch)`` turns a
    batch of them into the pipeline's feature names. If a directory has a
    ``metadata.json``, its vocabulary size must match the tokenizer's.

    Raises:
        InputDataError: if no file matches, a file is not a TFRecord of pretraining
            examples, the files hold no example, their length is not
            ``max_seq_length``, or they were written with another vocabulary.
    """
    files = check_records(
        paths,
        max_seq_length=max_seq_length,
        vocab=None if tokenizer is None else tokenizer.vocab,
        lowercase=None if tokenizer is None else tokenizer.lowercase,
    )
    names = tf.constant(files, tf.string)
    cycle = min(len(files), _MAX_SHUFFLED_READERS) if shuffle_files else 1

    def read_pass(epoch: tf.Tensor) -> tf.data.Dataset:
        order = file_order(names, seed, epoch) if shuffle_files else names
        records = tf.data.Dataset.from_tensor_slices(order).interleave(
            tf.data.TFRecordDataset,
            cycle_length=cycle,
            block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return records.map(no_autograph(lambda record: {"record": record}))

    spec = {
        stored: tf.io.FixedLenFeature([max_seq_length], tf.int64)
        for stored in RECORD_FEATURES.values()
    }

    def parse(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_example(batch["record"], spec)
        return {name: parsed[stored] for name, stored in RECORD_FEATURES.items()}

    return read_pass, parse


def pretraining_dataset(
    paths: PathsLike,
    tokenizer: ElectraTokenizer | None = None,
    *,
    batch_size: int,
    max_seq_length: int,
    seed: int = 0,
    shuffle: bool = True,
    repeat: bool = True,
    shuffle_buffer: int = 10000,
) -> tf.data.Dataset:
    """Streams batches of ELECTRA pretraining examples from text or TFRecord files.

    Text (one sentence per line, blank lines between documents): each pass over the
    corpus (epoch ``e``) packs with seed ``(seed, e)``, and with ``shuffle`` reads the
    files in a new seeded order. TFRecords (``*.tfrecord`` files or a directory of
    them, written by :func:`~keras_electra.data.tfrecords.write_pretraining_tfrecords`):
    with ``shuffle`` each pass reads the files in a new seeded order, interleaved (without
    it, one after another: the examples of a corpus prepared once, in its order). Either
    way, with ``shuffle`` each pass's examples are shuffled within blocks of
    ``shuffle_buffer`` (the first batch waits for one block, or one pass if that is
    shorter). The sequence of batches depends only on the files, the tokenizer and
    these arguments, so ``dataset.skip(n)`` resumes at batch ``n``.

    Args:
        paths: text files, directories of ``*.txt`` files, TFRecord files, directories of
            ``*.tfrecord`` files, or glob patterns (one kind of data, not both).
        tokenizer: the tokenizer; text needs it, and TFRecords whose directory has a
            ``metadata.json`` are checked against its vocabulary size.
        batch_size: examples per batch (a last partial batch is dropped).
        max_seq_length: tokens per example; TFRecords must hold this length.
        seed: the seed for packing and shuffling.
        shuffle: shuffle files and examples.
        repeat: loop over the data forever (each pass shuffled, and text packed, anew).
        shuffle_buffer: examples shuffled together.

    Returns:
        A dataset of dicts ``{"token_ids", "padding_mask", "segment_ids"}`` of int32
        tensors of static shape ``[batch_size, max_seq_length]``, carrying
        :func:`fit_options`.

    Raises:
        InputDataError: if a file is missing, text and TFRecords are mixed, the corpus
            has no text or no tokens, (without ``repeat``) it gives fewer than
            ``batch_size`` examples, a file is not a TFRecord of pretraining examples,
            the records are of another length or were written with another vocabulary.
        ConfigError: if ``batch_size`` or ``max_seq_length`` is invalid, or text comes
            without a tokenizer.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("hi hi.\\n\\nhi.\\n")
        >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi", "."])
        >>> ds = pretraining_dataset(path, t, batch_size=2, max_seq_length=8)
        >>> next(iter(ds))["token_ids"].shape
        TensorShape([2, 8])
    """
    packing.check_shapes(batch_size, max_seq_length)
    parse = None
    if is_tfrecord_input(paths):
        read_pass, parse = record_passes(
            paths, tokenizer, seed=seed, max_seq_length=max_seq_length, shuffle_files=shuffle
        )
    elif not isinstance(tokenizer, ElectraTokenizer):
        given = "" if tokenizer is None else f", not a {type(tokenizer).__name__}"
        raise ConfigError(
            f"Text data needs a tokenizer; pass an ElectraTokenizer{given} (only TFRecords "
            "can do without one)."
        )
    else:
        read_pass = text_passes(
            paths,
            tokenizer,
            seed=seed,
            max_seq_length=max_seq_length,
            shuffle_files=shuffle,
            batch_size=batch_size,
            repeat=repeat,
        )

    @no_autograph
    def one_pass(epoch: tf.Tensor) -> tf.data.Dataset:
        examples = read_pass(epoch)
        return block_shuffle(examples, shuffle_buffer, seed, epoch) if shuffle else examples

    epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)
    return finish_batches(epochs.flat_map(one_pass), batch_size, max_seq_length, parse=parse)


def block_shuffle(
    dataset: tf.data.Dataset, block_size: int, seed: int, epoch: int | tf.Tensor = 0
) -> tf.data.Dataset:
    """Shuffles examples within consecutive blocks of ``block_size``, statelessly.

    Unlike ``Dataset.shuffle``, the order depends only on ``seed`` and ``epoch`` (not on
    TensorFlow's global seed), so a pipeline rebuilt in another process yields the same
    sequence. A last, shorter block is shuffled too.

    Args:
        dataset: a finite dataset (one pass) of dicts of tensors.
        block_size: examples per block (the shuffle buffer).
        seed: the seed.
        epoch: the pass number (an int or int64 tensor); each pass shuffles differently.

    Returns:
        The shuffled dataset.

    Examples:
        >>> ds = tf.data.Dataset.range(6).map(lambda i: {"x": i})
        >>> sorted(int(e["x"]) for e in block_shuffle(ds, 3, seed=0))
        [0, 1, 2, 3, 4, 5]
    """
    if block_size <= 1:
        return dataset
    pass_seed = packing._stream_seed(seed, epoch, packing._SHUFFLE)

    @no_autograph
    def shuffle_block(index, block):
        size = tf.shape(tf.nest.flatten(block)[0])[0]
        key = tf.random.experimental.stateless_fold_in(pass_seed, index)
        order = tf.argsort(tf.random.stateless_uniform([size], seed=key))
        return tf.nest.map_structure(lambda t: tf.gather(t, order), block)

    return dataset.batch(block_size).enumerate().map(shuffle_block).unbatch()


def finish_batches(
    examples: tf.data.Dataset,
    batch_size: int,
    max_seq_length: int,
    parse: Callable[[Any], dict[str, tf.Tensor]] | None = None,
) -> tf.data.Dataset:
    """Batches examples with static shapes ``[batch_size, max_seq_length]`` and prefetches.

    Args:
        examples: a dataset of dicts of int ``[max_seq_length]`` tensors (or of
            elements that ``parse`` turns into such dicts once batched).
        batch_size: examples per batch; a last partial batch is dropped.
        max_seq_length: tokens per example.
        parse: optional function applied to each batch before the shapes are fixed.

    Returns:
        The batched dataset of int32 dicts, options set for deterministic order.

    Examples:
        >>> ds = tf.data.Dataset.from_tensors({"token_ids": tf.zeros([4], tf.int32)}).repeat(3)
        >>> finish_batches(ds, 2, 4).element_spec["token_ids"].shape
        TensorShape([2, 4])
    """
    shape = [batch_size, max_seq_length]

    @no_autograph
    def fix(batch: Any) -> dict[str, tf.Tensor]:
        if parse is not None:
            batch = parse(batch)
        return {k: tf.ensure_shape(tf.cast(v, tf.int32), shape) for k, v in batch.items()}

    batches = examples.batch(batch_size, drop_remainder=True).map(
        fix, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return batches.with_options(fit_options()).prefetch(tf.data.AUTOTUNE)


def fit_options() -> tf.data.Options:
    """tf.data options for a dataset handed to ``model.fit``: deterministic order,
    tf.data's autotuning off (with it on, every ``fit`` ends late: docs/pretraining.md,
    "From Python"), and under a multi-worker strategy every worker reading the same batches
    and keeping its replicas' rows of each, so N workers train on the global batches one
    device would. Apply it to your own datasets too: ``dataset.with_options(fit_options())``.

    Examples:
        >>> fit_options().autotune.enabled
        False
    """
    options = tf.data.Options()
    options.deterministic = True
    options.autotune.enabled = False
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options
