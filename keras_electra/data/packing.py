"""The packing rule, written once: tokenized sentences into ``[CLS] A [SEP] B [SEP]``.

The rule is :func:`keras_electra.data.pretraining.pack_examples`'; each of its random
choices is a hash of the seed, the document (its key: the seed hashed with its first line's
ids) and an index in it, so a document packs the same wherever it is read
(docs/pretraining.md, "Preparing a large corpus"). The hash, SplitMix64's finalizer, is
computed in plain Python (the writers) and TensorFlow (``*_tf``, the ``tf.data`` scan) with
the same unsigned 64-bit arithmetic, a draw the top 53 bits: the two agree bit for bit.
The seeds of a pass's streams (file order, packing, shuffle) and the rule's probabilities
are here too, for both.
"""

from __future__ import annotations

import numpy as np

from keras_electra.errors import ConfigError

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB

# What a draw is for (its stream), hashed with the document's key and an index.
TARGET, RANDOM_LENGTH, FIRST_TARGET, COIN = 1, 2, 3, 4

UNBOUNDED = 1 << 30
"""A first segment's target when it may take every sentence of the example."""

SINGLE_SEGMENT_PROB = 0.1
"""Chance that an example's first segment may take all its sentences (no second segment)."""

RANDOM_LENGTH_PROB = 0.05
"""Chance that the next example's target length is drawn from ``randint(5, max_seq_length)``."""

# Sub-streams of randomness derived from (seed, epoch).
_FILE_ORDER, _PACKING, _SHUFFLE = 1, 2, 3


def _stream_seed(seed, epoch, stream: int):
    """A stateless-RNG seed (shape [2], int64 tensor) for one stream of one epoch (``seed``
    and ``epoch``: ints or int64 tensors)."""
    import tensorflow as tf

    base = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_fold_in(base, tf.constant(stream, tf.int64))


def check_shapes(batch_size: int | None, max_seq_length: int) -> None:
    """Validates ``batch_size`` and ``max_seq_length`` arguments (a message names them as
    the commands' flags, ``--batch-size`` and ``--max-seq-length``, which they are).

    Args:
        batch_size: examples per batch (``None`` skips the check).
        max_seq_length: tokens per example, ``[CLS]`` and ``[SEP]`` included.

    Raises:
        ConfigError: if either is not a positive integer or ``max_seq_length`` < 5.

    Examples:
        >>> check_shapes(32, 128)
    """
    if batch_size is not None and (not isinstance(batch_size, int | np.integer) or batch_size < 1):
        raise ConfigError(f"--batch-size must be a positive integer, not {batch_size!r}.")
    if not isinstance(max_seq_length, int | np.integer) or max_seq_length < 5:
        raise ConfigError(
            "--max-seq-length must be an integer of at least 5 (128 is typical), not "
            f"{max_seq_length!r}."
        )


def packing_seed(seed: int) -> tuple[int, int]:
    """The stateless seed pair that a first pass packs with (what the writers give
    :class:`Packer`)."""
    pair = _stream_seed(seed, 0, _PACKING).numpy().tolist()
    return int(pair[0]), int(pair[1])


def mix64(x: int) -> int:
    """SplitMix64's finalizer on a Python int (taken modulo 2**64).

    Examples:
        >>> mix64(0), mix64(1) != mix64(2)
        (0, True)
    """
    x &= _MASK
    x = ((x ^ (x >> 30)) * _M1) & _MASK
    x = ((x ^ (x >> 27)) * _M2) & _MASK
    return x ^ (x >> 31)


def _mix64_np(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(_M1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(_M2)
    return x ^ (x >> np.uint64(31))


def seed_key(seed: tuple[int, int]) -> int:
    """The packing's key from a stateless seed pair (two int64s, as ``tf.random`` takes)."""
    return mix64((seed[0] & _MASK) ^ mix64((seed[1] & _MASK) + _GOLDEN))


def document_key(key: int, ids: np.ndarray) -> int:
    """A document's key: ``key`` (the seed's) hashed with its first line's token ids."""
    ids = np.asarray(ids, np.uint64)
    positions = np.arange(1, ids.size + 1, dtype=np.uint64) * np.uint64(_GOLDEN)
    with np.errstate(over="ignore"):
        line = int(_mix64_np(ids + positions).sum(dtype=np.uint64))
    return mix64(key ^ mix64(line))


def uniform(key: int, stream: int, index: int) -> float:
    """A draw in [0, 1) for ``(document key, stream, index)``.

    Examples:
        >>> 0.0 <= uniform(7, COIN, 3) < 1.0, uniform(7, COIN, 3) == uniform(7, COIN, 3)
        (True, True)
    """
    x = mix64(key ^ mix64((stream << 32) | index))
    return (x >> 11) * 2.0**-53


def targets(
    key: int,
    example: int,
    max_seq_length: int,
    single_segment_prob: float,
    random_length_prob: float,
) -> tuple[int, int]:
    """Example ``example`` of a document: its target length and its first segment's."""
    target = max_seq_length
    if uniform(key, TARGET, example) < random_length_prob:
        target = 5 + int(uniform(key, RANDOM_LENGTH, example) * (max_seq_length - 4))
    first = (
        UNBOUNDED
        if uniform(key, FIRST_TARGET, example) < single_segment_prob
        else (target - 3) // 2
    )
    return target, first


class Packer:
    """The rule in plain Python over tokenized lines, for the writers.

    Feed batches of lines (:meth:`add`), then :meth:`finish`; examples come out as rows
    of int32 arrays. The state between batches is the example being filled, so a
    document may span batches.

    Args:
        max_seq_length: tokens per example, ``[CLS]`` and ``[SEP]`` included.
        cls_id: the id of ``[CLS]``.
        sep_id: the id of ``[SEP]``.
        pad_id: the id of ``[PAD]``.
        seed: the stateless seed pair (:func:`packing_seed`).
        single_segment_prob: as in :func:`~keras_electra.data.pretraining.pack_examples`.
        random_length_prob: as in :func:`~keras_electra.data.pretraining.pack_examples`.
    """

    def __init__(
        self,
        max_seq_length: int,
        cls_id: int,
        sep_id: int,
        pad_id: int,
        seed: tuple[int, int],
        single_segment_prob: float = SINGLE_SEGMENT_PROB,
        random_length_prob: float = RANDOM_LENGTH_PROB,
    ) -> None:
        self.length = int(max_seq_length)
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.key = seed_key(seed)
        self.probs = (float(single_segment_prob), float(random_length_prob))
        self._reset_document()
        self._rows: list[tuple[list[np.ndarray], list[np.ndarray]]] = []

    def _reset_document(self) -> None:
        self.doc: int | None = None
        self.example = 0
        self.line = 0
        self._new_example()

    def _new_example(self) -> None:
        self.first: list[np.ndarray] = []
        self.second: list[np.ndarray] = []
        self.first_len = self.second_len = 0
        self._targets: tuple[int, int] | None = None

    def _emit(self) -> None:
        self._rows.append((self.first, self.second))
        self.example += 1
        self._new_example()

    def add(self, flat: np.ndarray, splits: np.ndarray, blank: np.ndarray) -> None:
        """Adds a batch of lines: line ``i`` is ``flat[splits[i]:splits[i + 1]]``, and
        ``blank[i]`` marks a blank (document-ending) line."""
        bounds = splits.tolist()
        for i, is_blank in enumerate(blank.tolist()):
            if is_blank:
                if self.first_len + self.second_len > 0:
                    self._emit()
                self._reset_document()
                continue
            start, end = bounds[i], bounds[i + 1]
            num = end - start
            if num == 0:
                continue
            ids = flat[start:end]
            if self.doc is None:
                self.doc = document_key(self.key, ids)
            if self._targets is None:
                self._targets = targets(self.doc, self.example, self.length, *self.probs)
            target, first_target = self._targets
            to_first = (
                self.first_len == 0
                or self.first_len + num < first_target
                or (
                    self.second_len == 0
                    and self.first_len < first_target
                    and uniform(self.doc, COIN, self.line) < 0.5
                )
            )
            if to_first:
                self.first.append(ids)
                self.first_len += num
            else:
                self.second.append(ids)
                self.second_len += num
            self.line += 1
            if self.first_len + self.second_len >= target:
                self._emit()

    def finish(self) -> None:
        """Ends the current document (as a blank line does)."""
        self.add(np.zeros([0], np.int32), np.zeros([2], np.int64), np.array([True]))

    def take(self) -> dict[str, np.ndarray]:
        """The examples completed so far (and forgets them): int32 ``[n, max_seq_length]``
        arrays ``token_ids``, ``segment_ids`` and ``padding_mask``."""
        n, length = len(self._rows), self.length
        token_ids = np.full([n, length], self.pad_id, np.int32)
        segment_ids = np.zeros([n, length], np.int32)
        padding_mask = np.zeros([n, length], np.int32)
        for row, (first, second) in enumerate(self._rows):
            a = np.concatenate(first)[: length - 2]
            b = np.concatenate(second)[: max(0, length - a.size - 3)] if second else a[:0]
            end_a = a.size + 2
            token_ids[row, 0] = self.cls_id
            token_ids[row, 1 : end_a - 1] = a
            token_ids[row, end_a - 1] = self.sep_id
            end = end_a
            if b.size:
                end = end_a + b.size + 1
                token_ids[row, end_a : end - 1] = b
                token_ids[row, end - 1] = self.sep_id
                segment_ids[row, end_a:end] = 1
            padding_mask[row, :end] = 1
        self._rows = []
        return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


# --- the same functions in TensorFlow, for the tf.data scan -------------------------------


def _mix64_tf(x):
    import tensorflow as tf

    def xor_shift(x, bits: int):
        return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(bits, tf.uint64)))

    x = xor_shift(x, 30) * tf.constant(_M1, tf.uint64)
    x = xor_shift(x, 27) * tf.constant(_M2, tf.uint64)
    return xor_shift(x, 31)


def seed_key_tf(seed):
    """:func:`seed_key` of a ``[2]`` int64 tensor, as a uint64 scalar."""
    import tensorflow as tf

    seed = tf.bitcast(tf.cast(seed, tf.int64), tf.uint64)
    return _mix64_tf(
        tf.bitwise.bitwise_xor(seed[0], _mix64_tf(seed[1] + tf.constant(_GOLDEN, tf.uint64)))
    )


def document_key_tf(key, ids):
    """:func:`document_key` of a uint64 key and a 1-D integer tensor of ids."""
    import tensorflow as tf

    ids = tf.cast(tf.cast(ids, tf.int64), tf.uint64)
    positions = tf.cast(tf.range(1, tf.size(ids) + 1), tf.uint64) * tf.constant(_GOLDEN, tf.uint64)
    line = tf.reduce_sum(_mix64_tf(ids + positions))
    return _mix64_tf(tf.bitwise.bitwise_xor(key, _mix64_tf(line)))


def uniform_tf(key, stream: int, index):
    """:func:`uniform` of a uint64 key and an integer index tensor, as a float64 scalar."""
    import tensorflow as tf

    code = tf.constant(stream << 32, tf.uint64) + tf.cast(tf.cast(index, tf.int64), tf.uint64)
    x = _mix64_tf(tf.bitwise.bitwise_xor(key, _mix64_tf(code)))
    return tf.cast(tf.bitwise.right_shift(x, tf.constant(11, tf.uint64)), tf.float64) * 2.0**-53


def targets_tf(key, example, max_seq_length: int, single_segment_prob, random_length_prob):
    """:func:`targets` in TensorFlow: int32 scalars ``(target, first_target)``."""
    import tensorflow as tf

    random_length = 5 + tf.cast(
        uniform_tf(key, RANDOM_LENGTH, example) * float(max_seq_length - 4), tf.int32
    )
    target = tf.where(
        uniform_tf(key, TARGET, example) < random_length_prob, random_length, max_seq_length
    )
    first = tf.where(
        uniform_tf(key, FIRST_TARGET, example) < single_segment_prob, UNBOUNDED, (target - 3) // 2
    )
    return target, first
