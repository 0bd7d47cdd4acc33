"""The one entry to pretraining data: text or TFRecords in, batches for ``fit`` out
(:func:`pretraining_dataset`), and the tf.data options every training pipeline carries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from keras_electra.data.files import PathsLike
from keras_electra.data.pretraining import (
    _SHUFFLE,
    _stream_seed,
    check_shapes,
    no_autograph,
    text_passes,
)
from keras_electra.data.tfrecords import is_tfrecord_input, record_passes
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import ConfigError


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
    check_shapes(batch_size, max_seq_length)
    parse = None
    if is_tfrecord_input(paths):
        read_pass, parse = record_passes(
            paths, tokenizer, seed=seed, max_seq_length=max_seq_length, shuffle_files=shuffle
        )
    elif tokenizer is None:
        raise ConfigError(
            "Text data needs a tokenizer; pass an ElectraTokenizer (only TFRecords can do "
            "without one)."
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
    pass_seed = _stream_seed(seed, epoch, _SHUFFLE)

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
    """tf.data options for a dataset handed to ``model.fit``: deterministic order, and
    tf.data's autotuning off (with it on, every ``fit`` ends late: docs/pretraining.md,
    "From Python"). Apply it to your own datasets too: ``dataset.with_options(fit_options())``.

    Examples:
        >>> fit_options().autotune.enabled
        False
    """
    options = tf.data.Options()
    options.deterministic = True
    options.autotune.enabled = False
    return options
