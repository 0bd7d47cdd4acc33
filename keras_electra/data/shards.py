"""A corpus cut into shards at document boundaries, and one shard packed and written.

:func:`plan_shards` cuts the corpus into ``num_shards`` byte ranges, each moved to the next
document's start; :func:`write_shard` packs one with the one rule
(:class:`~keras_electra.data.packing.Packer`) and writes it atomically, so a shard is the
same whoever writes it and a rerun resumes (docs/pretraining.md, "Preparing a large
corpus"). Paths may be local or URLs such as ``gs://``.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from keras_electra.data.packing import Packer

_READ_BYTES = 1 << 20  # text read (and tokenized) at a time
_TOKENIZE_LINES = 4096
_BOUNDARY_WINDOW = 1 << 16


@dataclass(frozen=True)
class ShardPlan:
    """What one shard reads: ``pieces`` of files as ``(path, start, end)`` byte ranges,
    each starting at a document's start."""

    index: int
    num_shards: int
    pieces: tuple[tuple[str, int, int], ...]

    @property
    def num_bytes(self) -> int:
        return sum(end - start for _, start, end in self.pieces)


def _open(path: str):
    if "://" in path:
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def _size(path: str) -> int:
    if "://" in path:
        import tensorflow as tf

        return tf.io.gfile.stat(path).length
    return os.path.getsize(path)


def _is_blank(line: bytes) -> bool:
    # The pipeline's blank: whitespace only (tf.strings.strip's ASCII whitespace).
    return not line.strip(b" \t\n\r\x0b\x0c")


def document_start(path: str, offset: int, size: int) -> int:
    """The first document start at or after ``offset`` in a file of ``size`` bytes: the
    start of a line whose previous line is blank, or ``size``. A previous line longer than
    the window looked at counts as not blank (a boundary is then skipped, never invented).
    """
    if offset <= 0:
        return 0
    back = min(offset, _BOUNDARY_WINDOW)
    with _open(path) as f:
        f.seek(offset - back)
        data = f.read(back + _BOUNDARY_WINDOW)
        base = offset - back
        while True:
            # Line starts at or after offset: positions just after a newline.
            position = data.find(b"\n", back - 1)
            while position != -1:
                start = position + 1
                line_begin = data.rfind(b"\n", 0, position) + 1
                known = line_begin > 0 or base == 0
                if start >= back and known and _is_blank(data[line_begin:position]):
                    return base + start
                position = data.find(b"\n", start)
            if base + len(data) >= size:
                return size
            more = f.read(_BOUNDARY_WINDOW * 16)
            if not more:
                return size
            data += more


def plan_shards(files: Sequence[str], num_shards: int) -> list[ShardPlan]:
    """Cuts the corpus into ``num_shards`` document-aligned ranges of about equal bytes.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("One.\\nTwo.\\n\\nThree.\\n")
        >>> [[(s, e) for _, s, e in p.pieces] for p in plan_shards([path], 2)]
        [[(0, 11)], [(11, 18)]]
    """
    sizes = [_size(path) for path in files]
    total = sum(sizes)
    # Each boundary as (file index, offset), moved to the next document start.
    boundaries = [(0, 0)]
    for shard in range(1, num_shards):
        target = total * shard // num_shards
        index, before = 0, 0
        while index < len(files) - 1 and before + sizes[index] <= target:
            before += sizes[index]
            index += 1
        offset = document_start(files[index], target - before, sizes[index])
        boundaries.append(max(boundaries[-1], (index, offset)))
    boundaries.append((len(files) - 1, sizes[-1]) if files else (0, 0))
    plans = []
    for shard in range(num_shards):
        (first, start), (last, end) = boundaries[shard], boundaries[shard + 1]
        pieces = []
        for index in range(first, last + 1):
            begin = start if index == first else 0
            stop = end if index == last else sizes[index]
            if stop > begin:
                pieces.append((files[index], begin, stop))
        plans.append(ShardPlan(shard, num_shards, tuple(pieces)))
    return plans


def read_lines(path: str, start: int, end: int) -> Iterator[tuple[list[bytes], int]]:
    """The lines of ``path[start:end]`` in blocks, as ``tf.data.TextLineDataset`` reads
    them (``\\n`` ends a line, a ``\\r`` before it is dropped, the last line may lack it),
    each block with the number of bytes it took."""
    with _open(path) as f:
        f.seek(start)
        left = end - start
        rest = b""
        while left > 0:
            data = f.read(min(_READ_BYTES, left))
            if not data:
                break
            left -= len(data)
            data = rest + data
            cut = data.rfind(b"\n") + 1 if left > 0 else len(data)
            block, rest = data[:cut], data[cut:]
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            yield [line[:-1] if line.endswith(b"\r") else line for line in lines], len(block)
        if rest:
            yield [rest[:-1] if rest.endswith(b"\r") else rest], len(rest)


def serializer(max_seq_length: int) -> Callable[[dict[str, np.ndarray]], list[bytes]]:
    """A function from packed examples (int32 ``[n, max_seq_length]`` arrays) to serialized
    ``tf.train.Example`` records with ``input_ids``, ``input_mask`` and ``segment_ids``
    (:data:`~keras_electra.data.tfrecords.RECORD_FEATURES`), byte for byte what protobuf's
    deterministic serialization writes (map keys sorted), without building a proto: the
    ids' varints are encoded for the whole block at once, and the mask and segment
    features, which depend only on where the segments end, are looked up."""
    length = int(max_seq_length)
    masks: dict[int, bytes] = {}
    segments: dict[tuple[int, int], bytes] = {}

    def mask_feature(end: int) -> bytes:
        if end not in masks:
            masks[end] = _feature(b"input_mask", b"\x01" * end + b"\x00" * (length - end))
        return masks[end]

    def segment_feature(end_a: int, end: int) -> bytes:
        if (end_a, end) not in segments:
            values = b"\x00" * end_a + b"\x01" * (end - end_a) + b"\x00" * (length - end)
            segments[(end_a, end)] = _feature(b"segment_ids", values)
        return segments[(end_a, end)]

    def serialize(examples: dict[str, np.ndarray]) -> list[bytes]:
        ids = examples["token_ids"].astype(np.int64)
        if not len(ids):
            return []
        packed, offsets = _varints(ids)
        ends = examples["padding_mask"].sum(axis=1)
        # The first segment's end: [CLS] A [SEP] are segment 0, B [SEP] segment 1.
        ends_a = (ends - examples["segment_ids"].sum(axis=1)).tolist()
        ends = ends.tolist()
        bounds = offsets.tolist()
        records = []
        for row, (end, end_a) in enumerate(zip(ends, ends_a, strict=True)):
            features = (
                _feature(b"input_ids", packed[bounds[row] : bounds[row + 1]])
                + mask_feature(end)
                + segment_feature(end_a, end)
            )
            records.append(b"\x0a" + _varint(len(features)) + features)
        return records

    return serialize


def _feature(name: bytes, packed: bytes) -> bytes:
    """One entry of ``Features.feature``: ``name`` -> an ``Int64List`` of packed varints."""
    ints = b"\x0a" + _varint(len(packed)) + packed  # Int64List.value, packed
    value = b"\x1a" + _varint(len(ints)) + ints  # Feature.int64_list
    entry = b"\x0a" + _varint(len(name)) + name + b"\x12" + _varint(len(value)) + value
    return b"\x0a" + _varint(len(entry)) + entry


def _varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Token ids (int64 ``[n, m]``, below 2**28) as protobuf varints: all rows' bytes and
    each row's start offset (``n + 1`` of them)."""
    if values.size and (values.min() < 0 or values.max() >= 1 << 28):
        raise ValueError("token ids must lie in [0, 2**28)")
    groups = np.stack([(values >> (7 * k)) & 0x7F for k in range(4)], axis=-1)
    keep = np.ones(groups.shape, bool)
    for k in range(1, 4):
        keep[..., k] = values >= 1 << (7 * k)
    groups[..., :-1] |= np.where(keep[..., 1:], 0x80, 0)
    offsets = np.concatenate([[0], np.cumsum(keep.reshape(len(values), -1).sum(axis=1))])
    return groups[keep].astype(np.uint8).tobytes(), offsets


def _varint(value: int) -> bytes:
    if value < len(_SMALL_VARINTS):
        return _SMALL_VARINTS[value]
    return _encode_varint(value)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tokenized_blocks(plan: ShardPlan, tokenizer) -> Iterator[tuple[list, int] | None]:
    """The shard's lines tokenized, block by block: ``([(flat ids, row splits, blank),
    ...], bytes)`` per block, and ``None`` at each piece's end."""
    import tensorflow as tf

    from keras_electra.data.pretraining import tokenize_batch

    for path, start, end in plan.pieces:
        for lines, size in read_lines(path, start, end):
            batches = []
            for i in range(0, len(lines), _TOKENIZE_LINES):
                ids, blank = tokenize_batch(tokenizer, tf.constant(lines[i : i + _TOKENIZE_LINES]))
                batches.append((ids.flat_values.numpy(), ids.row_splits.numpy(), blank.numpy()))
            yield batches, size
        yield None


def shard_examples(
    plan: ShardPlan, tokenizer, packer_factory: Callable[[], Packer]
) -> Iterator[tuple[dict[str, np.ndarray], int]]:
    """The shard's packed examples in blocks (dicts of int32 ``[n, length]`` arrays), each
    with the bytes of text it took. A thread reads and tokenizes the next block (TensorFlow
    releases the GIL) while this one is packed and serialized."""
    packer = packer_factory()
    with ThreadPoolExecutor(1) as pool:
        blocks = _tokenized_blocks(plan, tokenizer)
        pending = pool.submit(next, blocks, StopIteration)
        while True:
            block = pending.result()
            if block is StopIteration:
                return
            pending = pool.submit(next, blocks, StopIteration)
            if block is None:
                packer.finish()  # a piece ends at a document's end, or at its file's end
                yield packer.take(), 0
                continue
            batches, size = block
            for flat, splits, blank in batches:
                packer.add(flat, splits, blank)
            yield packer.take(), size


def write_shard(
    plan: ShardPlan,
    path: str,
    tokenizer,
    packer_factory: Callable[[], Packer],
    on_bytes: Callable[[int], None] | None = None,
) -> int:
    """Writes one shard's TFRecord file, atomically (``path + ".tmp"``, then renamed); a
    shard whose ``path`` exists is kept as it is (its records are counted).

    Returns:
        The number of examples in the shard.
    """
    import tensorflow as tf

    if tf.io.gfile.exists(path):
        if on_bytes:
            on_bytes(plan.num_bytes)
        return sum(1 for _ in tf.data.TFRecordDataset(path))
    serialize = serializer(packer_factory().length)
    temp = f"{path}.tmp"
    count = 0
    collecting = gc.isenabled()
    gc.disable()  # the loop allocates many short-lived lists; nothing in it forms cycles
    try:
        with tf.io.TFRecordWriter(temp) as writer:
            for examples, size in shard_examples(plan, tokenizer, packer_factory):
                for record in serialize(examples):
                    writer.write(record)
                count += len(examples["token_ids"])
                if on_bytes:
                    on_bytes(size)
    except BaseException:
        if tf.io.gfile.exists(temp):
            tf.io.gfile.remove(temp)
        raise
    finally:
        if collecting:
            gc.enable()
    tf.io.gfile.rename(temp, path, overwrite=True)
    return count


_SMALL_VARINTS = [_encode_varint(n) for n in range(1 << 14)]
