"""Pretraining examples written once to sharded TFRecord files, and read back.

Writing (:func:`write_pretraining_tfrecords`; :mod:`keras_electra.data.beam` on every core
or a cluster) cuts the corpus at document starts (:func:`plan_shards`) and packs each shard
with the one rule (:class:`~keras_electra.data.packing.Packer`), atomically: docs/pretraining.md,
"Preparing a large corpus". Records keep the original ELECTRA's int64 feature names,
renamed when read (:data:`RECORD_FEATURES`). Paths may be local or URLs such as ``gs://``.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from keras_electra.atomic import write_json
from keras_electra.data.files import (
    _ASCII_WHITESPACE,
    MAX_LINE_CHARS,
    PathsLike,
    _as_list,
    check_corpus_has_text,
    file_size,
    file_versions,
    is_blank_line,
    is_remote,
    open_binary,
    real_path,
    resolve_corpus_files,
    resolve_files,
    tokenize_batch,
)
from keras_electra.data.packing import Packer, check_shapes, packing_seed
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import ConfigError, InputDataError

TFRECORD_SUFFIX = ".tfrecord"
SHARD_PREFIX = "pretraining"
METADATA_FILE = "metadata.json"

# The pipeline's feature names and the names records store them under.
RECORD_FEATURES = {
    "token_ids": "input_ids",
    "padding_mask": "input_mask",
    "segment_ids": "segment_ids",
}

_READ_BYTES = 1 << 20  # text read (and tokenized) at a time
_TOKENIZE_LINES = 4096
_BOUNDARY_WINDOW = 1 << 16  # bytes looked at before a boundary's target, and read at a time

# A line start that may begin a blank line: one after a newline whose first byte is
# whitespace, a line end or beyond ASCII (any other line holds text; see is_blank_line).
_MAYBE_BLANK = re.compile(
    b"\n(?=[" + b"".join(re.escape(bytes([c])) for c in _ASCII_WHITESPACE) + b"\x80-\xff])"
)


def shard_paths(output_dir: str, num_shards: int) -> list[str]:
    """The shards' files in ``output_dir``, ``pretraining-00003-of-00008.tfrecord`` and so on.

    Examples:
        >>> shard_paths("out", 8)[3]
        'out/pretraining-00003-of-00008.tfrecord'
    """
    name = f"{SHARD_PREFIX}-{{:05d}}-of-{num_shards:05d}{TFRECORD_SUFFIX}"
    return [os.path.join(output_dir, name.format(i)) for i in range(num_shards)]


def write_pretraining_tfrecords(
    files: PathsLike,
    tokenizer: ElectraTokenizer,
    output_dir: str,
    *,
    max_seq_length: int,
    num_shards: int = 8,
    seed: int = 0,
    progress: bool = True,
) -> list[str]:
    """Packs a text corpus once and writes the examples as sharded TFRecords, in this
    process (:mod:`keras_electra.data.beam` runs the same on all cores or a cluster).

    Read one after another, the shards hold one pass of
    :func:`~keras_electra.data.pretraining.pretraining_examples` (packed with ``seed``).
    A rerun with the same corpus and settings keeps the finished shards; other
    ``pretraining-*.tfrecord`` shards in ``output_dir`` are removed. The shards and
    ``metadata.json``: docs/pretraining.md, "Preparing a large corpus".

    Args:
        files: text files, directories of ``*.txt`` files, or glob patterns.
        tokenizer: the tokenizer.
        output_dir: the directory to write into (created if needed; local or ``gs://``).
        max_seq_length: tokens per example.
        num_shards: number of TFRecord files.
        seed: the packing seed.
        progress: show a tqdm progress bar (bytes of text packed).

    Returns:
        The shard paths, in order.

    Raises:
        InputDataError: if a corpus file is missing, not text, or the corpus has no text.
        ConfigError: if ``max_seq_length`` or ``num_shards`` is invalid.

    Examples:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> _ = open(os.path.join(d, "a.txt"), "w").write("hi hi.\\n\\nhi.\\n")
        >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi", "."])
        >>> paths = write_pretraining_tfrecords(os.path.join(d, "a.txt"), t,
        ...     os.path.join(d, "out"), max_seq_length=8, num_shards=2, progress=False)
        >>> [os.path.basename(p) for p in paths]
        ['pretraining-00000-of-00002.tfrecord', 'pretraining-00001-of-00002.tfrecord']
    """
    from tqdm import tqdm

    job = start_writing(files, tokenizer, output_dir, max_seq_length, num_shards, seed)
    with tqdm(
        total=job.corpus_bytes,
        unit="B",
        unit_scale=True,
        desc="Packing",
        disable=not progress,
    ) as bar:
        counts = [job.write(plan, tokenizer, on_bytes=bar.update) for plan in job.plans]
    job.finish(counts, {"runner": "in-process"})
    return job.paths


# The settings metadata.json states at its top level (all are under "settings" too).
_SUMMARY = ("max_seq_length", "vocab_size", "lowercase", "seed", "num_shards", "corpus_files")


@dataclass
class WritingJob:
    """A TFRecord writing prepared by :func:`start_writing`: the shards' plans and paths,
    the settings recorded in ``metadata.json``; :meth:`write` writes a shard (on whichever
    worker), :meth:`finish` the metadata."""

    output_dir: str
    plans: list[ShardPlan]
    paths: list[str]
    settings: dict[str, Any]
    # A finished earlier run's examples per shard: a kept shard holding fewer was cut short.
    expected: dict[str, int] = field(default_factory=dict)

    @property
    def corpus_bytes(self) -> int:
        return sum(plan.num_bytes for plan in self.plans)

    def write(
        self,
        plan: ShardPlan,
        tokenizer: ElectraTokenizer,
        on_bytes: Callable[[int], None] = lambda size: None,
    ) -> int:
        """Writes ``plan``'s shard with the job's packing (the one rule and seed),
        atomically (its path ``+ ".tmp"``, then renamed); a shard whose file exists is kept
        as it is (its records are counted).

        Returns:
            The number of examples in the shard.
        """
        path = self.paths[plan.index]
        if tf.io.gfile.exists(path):
            try:
                count = sum(1 for _ in tf.data.TFRecordDataset(path))
            except tf.errors.DataLossError:  # cut short or damaged: written again below
                count = None
            if count is not None and self.expected.get(os.path.basename(path), count) == count:
                on_bytes(plan.num_bytes)
                return count
            tf.io.gfile.remove(path)
        length = self.settings["max_seq_length"]
        seed = tuple(self.settings["packing_seed"])
        packer = Packer(length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, seed)
        serialize = serializer(length)
        temp = f"{path}.tmp"
        count = 0
        collecting = gc.isenabled()
        gc.disable()  # the loop allocates many short-lived lists; nothing in it forms cycles
        try:
            with tf.io.TFRecordWriter(temp) as writer:
                for examples, size in shard_examples(plan, tokenizer, packer):
                    for record in serialize(examples):
                        writer.write(record)
                    count += len(examples["token_ids"])
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

    def finish(self, counts: Sequence[int], pipeline: dict[str, Any]) -> None:
        """Writes ``metadata.json``: the examples counted, the settings and ``pipeline``
        (how the shards were written)."""
        metadata = {
            "num_examples": int(sum(counts)),
            **{k: self.settings[k] for k in _SUMMARY},
            "shards": [os.path.basename(p) for p in self.paths],
            "shard_examples": [int(c) for c in counts],
            "shard_bytes": [size for _, size, _ in file_versions(self.paths)],
            "corpus_bytes": self.corpus_bytes,
            "pipeline": pipeline,
            "complete": True,
            "settings": self.settings,
        }
        _write_metadata(self.output_dir, metadata)


def start_writing(
    files: PathsLike,
    tokenizer: ElectraTokenizer,
    output_dir: str,
    max_seq_length: int,
    num_shards: int,
    seed: int,
) -> WritingJob:
    """Checks the corpus and settings, plans the shards and readies ``output_dir``: its
    finished shards are kept when its ``metadata.json`` names the same corpus and
    settings (a rerun resumes), removed otherwise, with any partial (``.tmp``) file."""
    check_writing(max_seq_length, num_shards)
    paths = [real_path(p) for p in resolve_corpus_files(files)]  # one spelling from any cwd
    check_corpus_has_text(paths)
    plans = plan_shards(paths, num_shards)
    output_dir = os.fspath(output_dir)
    tf.io.gfile.makedirs(output_dir)
    settings = _settings(paths, plans, tokenizer, max_seq_length, seed)
    paths = shard_paths(output_dir, len(plans))
    metadata = _read_metadata(output_dir)
    previous = _previous_settings(metadata)
    same = previous == settings
    pattern = os.path.join(output_dir, f"{SHARD_PREFIX}-*-of-*{TFRECORD_SUFFIX}*")
    found = tf.io.gfile.glob(pattern)  # listed once (a request on a bucket)
    held = [p for p in found if not p.endswith(".tmp")]
    if held and not same:
        print(_discarding_note(output_dir, len(held), previous, settings), file=sys.stderr)
    for old in found:
        if old.endswith(".tmp") or not same or old not in paths:
            tf.io.gfile.remove(old)
    if not same:
        _write_metadata(output_dir, {"complete": False, "settings": settings})
    expected = {}
    if same and metadata.get("complete"):
        expected = dict(zip(metadata["shards"], metadata["shard_examples"], strict=True))
    return WritingJob(output_dir, plans, paths, settings, expected)


def finished_shards_note(
    files: PathsLike,
    tokenizer: ElectraTokenizer | None,
    output_dir: str,
    max_seq_length: int,
    num_shards: int,
    seed: int,
) -> str | None:
    """What writing with these settings would do with the finished shards ``output_dir``
    holds (a dry run's line; ``tokenizer`` None: a vocabulary still to be learned), or
    None where it holds none."""
    pattern = os.path.join(os.fspath(output_dir), f"{SHARD_PREFIX}-*-of-*{TFRECORD_SUFFIX}")
    held = len(tf.io.gfile.glob(pattern))
    if not held:
        return None
    shards = f"{held} finished shard{'s' if held != 1 else ''}"
    if tokenizer is None:
        return f"{shards}, kept only if the vocabulary learned first is the one they used"
    paths = [real_path(p) for p in resolve_corpus_files(files)]
    settings = _settings(paths, plan_shards(paths, num_shards), tokenizer, max_seq_length, seed)
    previous = _previous_settings(_read_metadata(os.fspath(output_dir)))
    if previous == settings:
        return f"{shards} kept (the same corpus and settings); the rest written"
    note = _discarding_note(os.fspath(output_dir), held, previous, settings)
    return note.replace("Discarding", "would discard", 1).rstrip(".")


def _settings(paths, plans, tokenizer: ElectraTokenizer, max_seq_length: int, seed: int) -> dict:
    """What ``metadata.json`` records of a writing: finished shards are kept only for the
    same."""
    return {
        "max_seq_length": int(max_seq_length),
        "vocab_size": tokenizer.vocab_size,
        "vocab_sha256": vocab_digest(tokenizer.vocab),
        "lowercase": tokenizer.lowercase,
        "seed": int(seed),
        "packing_seed": list(packing_seed(seed)),
        "num_shards": len(plans),
        "corpus_files": len(paths),
        "corpus_bytes": sum(plan.num_bytes for plan in plans),
        "corpus": [[p, s, e] for plan in plans for p, s, e in plan.pieces],
        # Each file's size and modification time: an edit that keeps the size is seen too.
        "corpus_versions": file_versions(paths),
    }


def _previous_settings(metadata: dict) -> Any:
    """The settings ``metadata`` records, its corpus paths as
    :func:`~keras_electra.data.files.real_path` spells them."""
    previous = metadata.get("settings")
    if isinstance(previous, dict):
        for key in ("corpus", "corpus_versions"):
            if isinstance(previous.get(key), list):
                previous = {**previous, key: [[real_path(p), *r] for p, *r in previous[key]]}
    return previous


# How a note names a setting that differs from the one the kept shards were written with.
_SETTING_NAMES = {
    "max_seq_length": "--max-seq-length",
    "vocab_size": "the vocabulary's size",
    "vocab_sha256": "the vocabulary",
    "lowercase": "--cased",
    "seed": "--seed",
    "packing_seed": "--seed",
    "num_shards": "--num-shards",
    "corpus_files": "the number of corpus files",
    "corpus_bytes": "the corpus's size",
    "corpus": "the corpus files or their contents",
    "corpus_versions": "the corpus files or their contents",
}


def _discarding_note(output_dir: str, count: int, previous: Any, settings: dict) -> str:
    """The line ``prepare`` prints before it removes ``count`` shards that were written
    with other settings than ``settings``.

    Examples:
        >>> _discarding_note("out", 2, {"max_seq_length": 128, "seed": 1},
        ...     {"max_seq_length": 64, "seed": 1})
        "Discarding 2 finished shards in 'out': they were written with other settings \
(--max-seq-length 128, now 64)."
        >>> _discarding_note("out", 1, None, {"seed": 1})
        "Discarding 1 finished shard in 'out': no metadata.json records the settings they \
were written with."
    """
    shards = f"{count} finished shard{'s' if count != 1 else ''} in '{output_dir}'"
    if not isinstance(previous, dict):
        return f"Discarding {shards}: no metadata.json records the settings they were written with."
    said = []
    for key, value in settings.items():
        old = previous.get(key)
        name = _SETTING_NAMES.get(key, key)
        if old == value or name in (n for n, _ in said):
            continue
        plain = all(isinstance(v, int | str) and not isinstance(v, bool) for v in (old, value))
        said.append((name, f"{name} {old}, now {value}" if plain else name))
    differ = ", ".join(text for _, text in said) or "their layout"
    return f"Discarding {shards}: they were written with other settings ({differ})."


def _read_metadata(directory: str, lenient: bool = True) -> dict:
    """``directory``'s ``metadata.json`` (local or a URL), {} when there is none; one that
    is not JSON raises :class:`InputDataError`, or with ``lenient`` gives {}."""
    path = os.path.join(directory, METADATA_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            return json.load(f)
        except ValueError:
            if not lenient:
                raise InputDataError(
                    f"'{path}' is not valid JSON; run keras-electra prepare again to rewrite "
                    "the TFRecords and their metadata."
                ) from None
            return {}


def _write_metadata(directory: str, metadata: dict) -> None:
    path = os.path.join(directory, METADATA_FILE)
    if is_remote(directory):
        if tf.io.gfile.exists(path):  # ram:// keeps an overwritten file's longer tail
            tf.io.gfile.remove(path)
        with tf.io.gfile.GFile(path, "w") as f:  # an object store's write is atomic
            f.write(json.dumps(metadata, indent=2))
    else:
        write_json(path, metadata)


def check_writing(max_seq_length: int, num_shards: int) -> None:
    """Raises :class:`ConfigError` for a length or shard count no writing can use
    (:func:`write_pretraining_tfrecords` checks this first; so does a dry run), naming
    them as ``keras-electra prepare``'s flags (the arguments of the same names).

    Examples:
        >>> check_writing(128, 0)
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: --num-shards must be a positive integer, not 0.
    """
    if isinstance(max_seq_length, int) and max_seq_length < 8:  # records pretrain can read
        raise ConfigError(
            f"--max-seq-length must be at least 8 (the least pretrain takes), not {max_seq_length}."
        )
    check_shapes(None, max_seq_length)
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ConfigError(f"--num-shards must be a positive integer, not {num_shards!r}.")


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


def _blank_range(path: str, start: int, end: int) -> bool:
    """Whether ``path[start:end]`` holds only blank lines (no document: its shard would be
    empty); a range of more than 64 KiB is taken to hold text, unread."""
    if end - start > 1 << 16:
        return False
    with open_binary(path) as f:
        f.seek(start)
        return all(is_blank_line(line) for line in f.read(end - start).split(b"\n"))


# The bytes of a line that tell whether it is blank (the pipeline keeps no more of it).
_LINE_BYTES = 4 * MAX_LINE_CHARS


def document_start(path: str, offset: int, size: int) -> int:
    """The first document start at or after ``offset`` in a file of ``size`` bytes: the
    start of a line whose previous line is blank (as the pipeline tells it:
    :func:`~keras_electra.data.files.is_blank_line`), or ``size``. A previous line that
    begins before the window looked at (64 KiB before ``offset``) counts as not blank (a
    boundary is then skipped, never invented).

    The file is read once from the window's start, 64 KiB at a time, keeping only the
    line not yet ended (its first bytes: all its blankness depends on), so the time is
    linear in the bytes read and the memory bounded, however far the next document is.
    """
    if offset <= 0:
        return 0
    position = offset - min(offset, _BOUNDARY_WINDOW)  # where the next read starts
    line = b""  # the line not yet ended (at most _LINE_BYTES of it)
    known = position == 0  # whether `line` is read from its start
    with open_binary(path) as f:
        f.seek(position)
        while position < size:
            chunk = f.read(min(_BOUNDARY_WINDOW, size - position))
            if not chunk:
                break
            data = line + chunk
            shift = position - len(line)  # a line end's offset in the file: its index + shift
            # The lines that may be blank and end in `data`: the held line's (when read
            # from its start), then those after each line end found.
            begins = (m.end() for m in _MAYBE_BLANK.finditer(data, len(line)))
            if known:
                begins = itertools.chain([0], begins)
            for begin in begins:
                end = data.find(b"\n", begin)
                if end == -1:
                    break
                if end + 1 + shift >= offset and is_blank_line(data[begin:end]):
                    return end + 1 + shift
            last = data.rfind(b"\n")  # the held line now: after it, or still the one held
            line, known = data[last + 1 :][:_LINE_BYTES], known or last != -1
            position += len(chunk)
    return size


def plan_shards(files: Sequence[str], num_shards: int) -> list[ShardPlan]:
    """Cuts the corpus into ``num_shards`` document-aligned ranges of about equal bytes.
    A range that would hold no document is left out, so a corpus of fewer documents than
    ``num_shards`` gets fewer shards (each plan's ``num_shards`` says how many). Each
    boundary is the first document start at or after its target (:func:`document_start`;
    a file's end ends a document), or the previous boundary when that is past the target
    already: a file without blank lines is read once, not once per boundary.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("One.\\nTwo.\\n\\nThree.\\n")
        >>> [[(s, e) for _, s, e in p.pieces] for p in plan_shards([path], 2)]
        [[(0, 11)], [(11, 18)]]
    """
    sizes = [file_size(path) for path in files]
    total = sum(sizes)
    # Each boundary as (file index, offset), moved to the next document start.
    boundaries = [(0, 0)]
    index, before = 0, 0  # the file holding the target, and the bytes of the files before it
    for shard in range(1, num_shards):
        target = total * shard // num_shards
        while index < len(files) - 1 and before + sizes[index] <= target:
            before += sizes[index]
            index += 1
        wanted = (index, target - before)
        if boundaries[-1] >= wanted:  # the next document start after the target, already
            boundaries.append(boundaries[-1])
        else:
            boundaries.append((index, document_start(files[index], wanted[1], sizes[index])))
    boundaries.append((len(files) - 1, sizes[-1]) if files else (0, 0))
    ranges = []
    for shard in range(num_shards):
        (first, start), (last, end) = boundaries[shard], boundaries[shard + 1]
        pieces = []
        for index in range(first, last + 1):
            begin = start if index == first else 0
            stop = end if index == last else sizes[index]
            if stop > begin and not _blank_range(files[index], begin, stop):
                pieces.append((files[index], begin, stop))
        if pieces:
            ranges.append(tuple(pieces))
    return [ShardPlan(shard, len(ranges), pieces) for shard, pieces in enumerate(ranges)]


def read_lines(path: str, start: int, end: int) -> Iterator[tuple[list[bytes], int]]:
    """The lines of ``path[start:end]`` in blocks, as ``tf.data.TextLineDataset`` reads
    them (``\\n`` ends a line, a ``\\r`` before it is dropped, the last line may lack it),
    each block with the number of bytes it took."""
    with open_binary(path) as f:
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
            if not cut:  # a line longer than a read: no line ends here (not a blank line)
                rest = data
                continue
            block, rest = data[:cut], data[cut:]
            lines = block.removesuffix(b"\n").split(b"\n")
            yield [line.removesuffix(b"\r") for line in lines], len(block)
        if rest:
            yield [rest.removesuffix(b"\r")], len(rest)


def serializer(max_seq_length: int) -> Callable[[dict[str, np.ndarray]], list[bytes]]:
    """A function from packed examples (int32 ``[n, max_seq_length]`` arrays) to serialized
    ``tf.train.Example`` records with ``input_ids``, ``input_mask`` and ``segment_ids``
    (:data:`~keras_electra.data.tfrecords.RECORD_FEATURES`), byte for byte what protobuf's
    deterministic serialization writes (map keys sorted), without building a proto: the
    ids' varints are encoded for the whole block at once, and the mask and segment
    features, which depend only on where the segments end, are looked up."""
    length = int(max_seq_length)

    @functools.cache
    def mask_feature(end: int) -> bytes:
        return _feature(b"input_mask", b"\x01" * end + b"\x00" * (length - end))

    @functools.cache
    def segment_feature(end_a: int, end: int) -> bytes:
        values = b"\x00" * end_a + b"\x01" * (end - end_a) + b"\x00" * (length - end)
        return _feature(b"segment_ids", values)

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


@functools.cache  # a record's few lengths, asked again and again
def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tokenized_blocks(plan: ShardPlan, tokenizer) -> Iterator[tuple[list, int] | None]:
    """The shard's lines tokenized, block by block: ``([(flat ids, row splits, blank),
    ...], bytes)`` per block, and ``None`` at each piece's end."""
    for path, start, end in plan.pieces:
        for lines, size in read_lines(path, start, end):
            batches = []
            for i in range(0, len(lines), _TOKENIZE_LINES):
                ids, blank = tokenize_batch(tokenizer, tf.constant(lines[i : i + _TOKENIZE_LINES]))
                batches.append((ids.flat_values.numpy(), ids.row_splits.numpy(), blank.numpy()))
            yield batches, size
        yield None


def shard_examples(
    plan: ShardPlan, tokenizer, packer: Packer
) -> Iterator[tuple[dict[str, np.ndarray], int]]:
    """The shard's packed examples in blocks (dicts of int32 ``[n, length]`` arrays), each
    with the bytes of text it took. A thread reads and tokenizes the next block (TensorFlow
    releases the GIL) while this one is packed and serialized."""
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


def resolve_tfrecord_files(paths: PathsLike) -> list[str]:
    """Expands TFRecord paths: files, directories of ``*.tfrecord`` files, glob patterns.

    Args:
        paths: one path or a sequence of paths.

    Returns:
        The files, in order.

    Raises:
        InputDataError: if a path does not exist or matches no file.

    Examples:
        >>> resolve_tfrecord_files("missing/*.tfrecord")
        Traceback (most recent call last):
        ...
        keras_electra.errors.InputDataError: Pattern 'missing/*.tfrecord' matches no file; \
check the path and the wildcard.
    """
    return resolve_files(paths, TFRECORD_SUFFIX, "TFRecord file")


def _first_record_length(files: Sequence[str]) -> tuple[str, int]:
    """The file and token-id length of the first record; raises if the files hold none."""
    for path in files:
        try:
            for record in tf.data.TFRecordDataset(path).take(1).as_numpy_iterator():
                feature = tf.train.Example.FromString(record).features.feature
                missing = [name for name in RECORD_FEATURES.values() if name not in feature]
                if missing:
                    raise InputDataError(
                        f"TFRecord file '{path}' has no {missing[0]} feature; write it with "
                        "write_pretraining_tfrecords (keras-electra prepare)."
                    )
                return path, len(feature[RECORD_FEATURES["token_ids"]].int64_list.value)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise InputDataError(
                f"'{path}' is not a readable TFRecord file ({e.message.splitlines()[0]}); "
                "pass files written by write_pretraining_tfrecords (keras-electra prepare)."
            ) from None
    raise InputDataError(
        f"The TFRecord files ({files[0]}{' ...' if len(files) > 1 else ''}) hold no "
        "examples; write them again from a corpus with text."
    )


def unreadable_tfrecord(paths: PathsLike) -> tuple[str, str] | None:
    """The first TFRecord file that cannot be read to its end, with the reader's complaint.

    Reads every record of every file (checking each record's CRCs), so it is meant
    for after a read failed: a training pipeline interleaves and shuffles its files,
    and TensorFlow's error does not say which one is truncated or corrupt.

    Returns:
        ``(path, detail)`` such as ``("pretraining-00001-of-00008.tfrecord",
        "truncated record at 8192")``, or None when every file reads.
    """
    for path in resolve_tfrecord_files(paths):
        try:
            for _ in tf.data.TFRecordDataset(path).batch(1024):
                pass
        except (tf.errors.DataLossError, tf.errors.OutOfRangeError) as e:
            return path, _reader_complaint(e)
    return None


def _reader_complaint(error: tf.errors.OpError) -> str:
    """The TFRecord reader's own words ("truncated record at 8192: Read less bytes than
    requested"), without the eager iterator's wrapping (``{{function_node ...}}``, ``[Op:
    IteratorGetNext]``) around them."""
    text = error.message.strip().splitlines()[0] if error.message else ""
    text = re.sub(r"\{\{[^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:[^\]]*\].*$", "", text)
    return text.replace("' failed with ", ": ").strip(" '") or type(error).__name__


def check_records(
    paths: PathsLike,
    *,
    max_seq_length: int,
    vocab: Sequence[str] | None = None,
    lowercase: bool | None = None,
) -> list[str]:
    """Checks TFRecord files against a run's settings before anything reads them: the
    files exist, the first record is a pretraining example of ``max_seq_length`` tokens,
    and a directory's ``metadata.json`` says its ``prepare`` finished and (given them)
    names that vocabulary and casing. :func:`~keras_electra.data.pretraining.record_passes`
    (so every pretraining pipeline) and a dry run call this.

    Returns:
        The files, in order.

    Raises:
        InputDataError: one sentence naming the file and the fix.
    """
    files = resolve_tfrecord_files(paths)
    named = {os.path.normpath(p) for p in _as_list(paths) if tf.io.gfile.isdir(p)}
    for directory, held in _by_directory(files).items():
        metadata = _check_metadata(directory, vocab, lowercase)
        _check_shards(directory, metadata, held, whole=os.path.normpath(directory) in named)
        path, length = _first_record_length(held)
        if length != max_seq_length:
            raise InputDataError(
                f"TFRecord file '{path}' holds examples of length {length}, not "
                f"max_seq_length={max_seq_length}; pass --max-seq-length {length} "
                f"(max_seq_length={length}) or write the records again with `keras-electra "
                f"prepare --max-seq-length {max_seq_length}`."
            )
    return files


def count_examples(paths: PathsLike) -> int | None:
    """The examples the TFRecord files hold, as their directories' ``metadata.json``
    counted them when ``prepare`` wrote them; None when a file is not counted there (records
    written elsewhere)."""
    total = 0
    for directory, held in _by_directory(resolve_tfrecord_files(paths)).items():
        metadata = _read_metadata(directory, lenient=False)
        listed = metadata.get("shards", []), metadata.get("shard_examples", [])
        counted = dict(zip(*listed, strict=False))
        for path in held:
            if os.path.basename(path) not in counted:
                return None
            total += int(counted[os.path.basename(path)])
    return total


def _by_directory(files: Sequence[str]) -> dict[str, list[str]]:
    """The files grouped by their directory, in the order of their first file."""
    groups: dict[str, list[str]] = {}
    for path in files:
        groups.setdefault(os.path.dirname(path), []).append(path)
    return groups


def _check_shards(directory: str, metadata: dict, held: list[str], whole: bool) -> None:
    """Raises if a shard that ``metadata.json`` lists is missing from ``directory`` (when
    the run reads the ``whole`` directory), or is not the size ``prepare`` wrote (cut
    short, emptied or changed since)."""
    listed = metadata.get("shards")
    if not isinstance(listed, list):
        return
    again = (
        "run the same `keras-electra prepare` command again to write it again (it keeps "
        "the shards that are whole)."
    )
    names = {os.path.basename(p): p for p in held}
    missing = [name for name in listed if name not in names]
    if whole and missing:
        raise InputDataError(
            f"The TFRecords in '{directory}' lack {missing[0]}"
            f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''} of the "
            f"{len(listed)} shards their metadata.json lists; {again}"
        )
    sizes = metadata.get("shard_bytes")
    if isinstance(sizes, list) and len(sizes) == len(listed):
        wrote = dict(zip(listed, sizes, strict=True))
    else:  # written before sizes were recorded: an emptied shard can still be told
        counts = metadata.get("shard_examples", [])
        wrote = {n: None for n, c in zip(listed, counts, strict=False) if c}
    mine = [names[n] for n in listed if n in names and n in wrote]
    for path, size, _ in file_versions(mine):
        want = wrote[os.path.basename(path)]
        if size != want and (want is not None or size == 0):
            was = f"{want:,}" if want is not None else "more than 0"
            raise InputDataError(
                f"TFRecord file '{path}' holds {size:,} bytes but its prepare wrote {was}: "
                f"it was cut short or changed since; {again}"
            )


def vocab_digest(tokens: Sequence[str]) -> str:
    """The SHA-256 of a vocabulary, as ``metadata.json`` records it (``vocab_sha256``)."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()


def _check_metadata(directory: str, vocab: Sequence[str] | None, lowercase: bool | None) -> dict:
    """``directory``'s ``metadata.json`` ({} when there is none: records written
    elsewhere are taken as they are); raises if it says its ``prepare`` did not finish, or
    names another vocabulary or casing than the run's."""
    metadata = _read_metadata(directory, lenient=False)
    written = metadata.get("settings", metadata)
    if metadata.get("complete") is False:
        raise InputDataError(
            f"The TFRecords in '{directory}' are unfinished: their `keras-electra prepare` "
            "stopped before it wrote every shard; run the same prepare command again to "
            "finish them (it keeps the shards already written)."
        )
    fix = (
        "pass the --vocab they were prepared with (their directory's vocab.txt) or write "
        "them again with this vocabulary."
    )
    if vocab is not None and written.get("vocab_size") not in (None, len(vocab)):
        raise InputDataError(
            f"The TFRecords in '{directory}' were written with a {written['vocab_size']}-token "
            f"vocabulary but the tokenizer has {len(vocab)} tokens; {fix}"
        )
    if vocab is not None and written.get("vocab_sha256") not in (None, vocab_digest(vocab)):
        raise InputDataError(
            f"The TFRecords in '{directory}' were written with another vocabulary of the "
            f"same size ({len(vocab)} tokens, other pieces or another order), so their "
            f"ids would mean other words; {fix}"
        )
    if lowercase is not None and written.get("lowercase") not in (None, lowercase):
        prepared, flag = (
            ("cased", "pass --cased") if lowercase else ("lowercased", "leave out --cased")
        )
        raise InputDataError(
            f"The TFRecords in '{directory}' were prepared {prepared} but this run "
            f"{'lowercases' if lowercase else 'keeps case'}, so its tokenizer would not "
            f"match their ids; {flag}."
        )
    return metadata


def is_tfrecord_input(paths: PathsLike) -> bool:
    """Tells whether paths name TFRecord data (``*.tfrecord`` files or a directory of them).

    Args:
        paths: one path or a sequence of paths.

    Returns:
        True for TFRecord data, False for text.

    Raises:
        InputDataError: if TFRecord and text paths are mixed.

    Examples:
        >>> is_tfrecord_input(["corpus.txt"])
        False
    """
    kinds = {  # tf.io.gfile reads local directories and URLs such as gs:// alike
        any(name.endswith(TFRECORD_SUFFIX) for name in tf.io.gfile.listdir(path))
        if tf.io.gfile.isdir(path)
        else path.endswith(TFRECORD_SUFFIX)
        for path in _as_list(paths)
    }
    if len(kinds) > 1:
        raise InputDataError(
            "The data paths mix TFRecord and text files; pass only one kind of data."
        )
    return kinds == {True}
