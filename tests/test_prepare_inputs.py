"""What ``keras-electra prepare`` makes of its corpus files: how long planning the shards
takes on a file without document breaks, which lines are blank (document breaks), and
when a rerun may keep the shards it finds."""

from __future__ import annotations

import json
import os
import tracemalloc

import numpy as np
import pytest
import tensorflow as tf
from conftest import as_rows, records

import keras_electra.data.tfrecords as tfrecords
from keras_electra.cli import main
from keras_electra.data import ElectraTokenizer, pretraining_examples, write_pretraining_tfrecords
from keras_electra.data.files import check_corpus_has_text, is_blank_line, tokenize_batch
from keras_electra.data.pretraining import line_dataset, tokenize_lines
from keras_electra.data.tfrecords import plan_shards
from keras_electra.data.vocab import SPECIAL_TOKENS
from keras_electra.errors import InputDataError

WORDS = "the king is dead long live queen my lord cat sat on mat".split()
VOCAB = [*SPECIAL_TOKENS, ".", ",", *WORDS]
LENGTH = 32


@pytest.fixture(scope="module")
def tokenizer():
    return ElectraTokenizer(VOCAB)


def sentences(count: int, seed: int = 0) -> bytes:
    """``count`` lines of words, none blank."""
    rng = np.random.default_rng(seed)
    lines = (" ".join(rng.choice(WORDS, size=rng.integers(3, 16))) + " .\n" for _ in range(count))
    return "".join(lines).encode("utf-8")


def streamed_rows(files: list[str], tokenizer, seed: int) -> list[tuple]:
    names = ("token_ids", "padding_mask", "segment_ids")
    examples = pretraining_examples(files, tokenizer, max_seq_length=LENGTH, seed=seed)
    return [tuple(tuple(ex[k].numpy().tolist()) for k in names) for ex in examples]


# --- Planning shards on a file without document breaks ------------------------------------


class _CountingReads:
    """Wraps ``tfrecords.open_binary``: counts the bytes its files read."""

    def __init__(self, monkeypatch):
        self.bytes = 0
        opened = tfrecords.open_binary
        counter = self

        class Counted:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def seek(self, *args):
                return self.f.seek(*args)

            def tell(self):
                return self.f.tell()

            def read(self, size=-1):
                data = self.f.read(size)
                counter.bytes += len(data)
                return data

        monkeypatch.setattr(tfrecords, "open_binary", lambda path: Counted(opened(path)))


def test_planning_shards_reads_a_file_without_blank_lines_once(tmp_path, monkeypatch):
    # With no blank line, each of the 63 boundaries scanned from its target to the file's
    # end, and the scan restarted from its beginning after each read: planning 64 shards of
    # 3.7 MB took 1.7 s, of 7.4 MB 5.1 s, the whole file in memory (twice, at its peak).
    shards = 64
    text = sentences(40_000)  # about 1.5 MB
    read = {}
    counted = _CountingReads(monkeypatch)
    for copies in (1, 2):
        path = tmp_path / f"x{copies}.txt"
        path.write_bytes(text * copies)
        size = len(text) * copies
        counted.bytes = 0
        tracemalloc.start()
        try:
            plans = plan_shards([str(path)], shards)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # No document break: one document, one shard (a shard starts at a document).
        assert [p.pieces for p in plans] == [((str(path), 0, size),)]
        read[copies] = counted.bytes
        # Each byte read about once (a window before each boundary looked at again).
        assert counted.bytes <= size + shards * 2 * tfrecords._BOUNDARY_WINDOW, (copies, read)
        assert peak < 1 << 20, (copies, peak)  # not the file in memory
    assert 1.5 < read[2] / read[1] < 3, read


def test_files_without_document_breaks_are_a_shard_each(tmp_path):
    # A file's end ends a document: the shards of files without blank lines are the files.
    paths = []
    for name, seed in (("a.txt", 1), ("b.txt", 2), ("c.txt", 3)):
        path = tmp_path / name
        path.write_bytes(sentences(3000, seed))
        paths.append(str(path))
    plans = plan_shards(paths, 16)
    assert [p.pieces for p in plans] == [((p, 0, os.path.getsize(p)),) for p in paths]
    assert all(p.num_shards == 3 for p in plans)


def _naive_plan(files: list[str], num_shards: int) -> list[tuple]:
    """The shards' pieces as plan_shards' docstring defines them, from every document
    start of the files at once (lines shorter than its window)."""
    datas = [open(path, "rb").read() for path in files]
    sizes = [len(d) for d in datas]
    starts = []
    for data in datas:
        lines = data.split(b"\n")
        at, found = 0, [0]
        for line in lines[:-1]:
            at += len(line) + 1
            if not line.decode("utf-8", "replace").strip():
                found.append(at)
        starts.append([*found, len(data)])
    total = sum(sizes)
    boundaries = [(0, 0)]
    for shard in range(1, num_shards):
        target, index, before = total * shard // num_shards, 0, 0
        while index < len(files) - 1 and before + sizes[index] <= target:
            before, index = before + sizes[index], index + 1
        offset = target - before
        start = 0 if offset <= 0 else min(s for s in starts[index] if s >= offset)
        boundaries.append(max(boundaries[-1], (index, start)))
    boundaries.append((len(files) - 1, sizes[-1]))
    plans = []
    for (first, start), (last, end) in zip(boundaries, boundaries[1:], strict=False):
        pieces = []
        for index in range(first, last + 1):
            begin = start if index == first else 0
            stop = end if index == last else sizes[index]
            chunk = datas[index][begin:stop]
            if stop > begin and chunk.decode("utf-8", "replace").strip():
                pieces.append((files[index], begin, stop))
        if pieces:
            plans.append(tuple(pieces))
    return plans


def test_shards_start_where_the_plan_always_started_them(tmp_path):
    # The faster scan keeps every boundary: documents of many sizes (a run of documents
    # longer than a read, many shorter than a shard), CRLF line ends, whitespace lines.
    rng = np.random.default_rng(5)
    docs = []
    for _ in range(400):
        lines = int(rng.choice([1, 3, 30, 3000], p=[0.3, 0.4, 0.28, 0.02]))
        docs.append(sentences(lines, int(rng.integers(1 << 30))))
    first = b"\n".join(docs)
    second = b" \t\r\n".join(d.replace(b"\n", b"\r\n") for d in docs[:50])
    paths = []
    for name, data in (("a.txt", first), ("b.txt", second), ("c.txt", sentences(10))):
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    for shards in (1, 2, 7, 64, 500):
        want = _naive_plan(paths, shards)
        assert [p.pieces for p in plan_shards(paths, shards)] == want, shards


# --- Lines of Unicode whitespace end documents ---------------------------------------------

THREE_DOCUMENTS = "the king is dead .\n\u00a0\nlong live the queen .\n\u3000\nmy lord .\n"


def test_a_line_of_unicode_whitespace_is_blank_as_python_strips_it(tokenizer):
    # tf.strings.strip strips ASCII whitespace only: a line of U+00A0 or U+3000 was text,
    # where google-research/electra's build_pretraining_dataset (line.strip()) sees none.
    spaces = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    others = ["\u200b", "\ufeff", "a", "\u00a0a", "\ufffd", "\x00"]
    lines = [c * n for c in spaces for n in (1, 3)] + others + ["\u00a0 \u2003\u3000\r"]
    _, blank = tokenize_batch(tokenizer, tf.constant([line.encode() for line in lines]))
    assert blank.numpy().tolist() == [not line.strip() for line in lines]
    for line in lines:
        assert is_blank_line(line.encode()) == (not line.strip()), repr(line)


def test_lines_of_unicode_whitespace_separate_documents(tokenizer, tmp_path):
    path = tmp_path / "three.txt"
    path.write_text(THREE_DOCUMENTS, encoding="utf-8")
    lines = list(tokenize_lines(line_dataset([str(path)]), tokenizer).as_numpy_iterator())
    assert [bool(blank) for _, blank in lines] == [False, True, False, True, False, True]
    plans = plan_shards([str(path)], 3)
    documents = THREE_DOCUMENTS.encode().split(b"\n", 1)[0] + b"\n"
    assert len(plans) == 3, [p.pieces for p in plans]
    assert plans[0].pieces == ((str(path), 0, len(documents) + len("\u00a0\n".encode())),)
    # Each example holds one document's tokens only.
    words = [
        [tokenizer.vocab.index(w) for w in line.split()] for line in THREE_DOCUMENTS.split("\n")
    ]
    owner = {i: d for d, ids in enumerate(words[::2]) for i in ids if VOCAB[i] not in ("the", ".")}
    want = streamed_rows([str(path)], tokenizer, seed=0)
    assert len(want) == 3
    for ids, _, _ in want:
        assert len({owner[i] for i in ids if i in owner}) == 1, ids
    # The shards hold what the on-the-fly pipeline packs.
    for shards in (1, 3):
        out = str(tmp_path / f"r{shards}")
        written = write_pretraining_tfrecords(
            [str(path)], tokenizer, out, max_seq_length=LENGTH, num_shards=shards, progress=False
        )
        assert len(written) == shards
        assert as_rows(records(written)) == want


def test_a_corpus_of_unicode_whitespace_lines_has_no_text(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("\u00a0\n\u3000\u2003\n \n", encoding="utf-8")
    with pytest.raises(InputDataError, match="has no text, only blank lines"):
        check_corpus_has_text([str(path)])


# --- A rerun after the corpus changed ------------------------------------------------------


def test_a_corpus_edited_in_place_is_prepared_again(tmp_path, capsys):
    # Only the files' paths and byte ranges were compared: the same sizes after an edit
    # kept the shards of the old text.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    texts = {
        "a.txt": b"the cat sat on the mat .\n\nthe king is dead .\nlong live the queen .\n",
        "b.txt": b"my lord .\n\nthe queen sat on the mat .\n",
    }
    for name, text in texts.items():
        (corpus / name).write_bytes(text)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    out = tmp_path / "records"
    argv = ["prepare", "--corpus", str(corpus), "--output", str(out), "--vocab", str(vocab)]
    argv += ["--max-seq-length", str(LENGTH), "--num-shards", "2", "--workers", "1"]
    assert main(argv) == 0
    shards = sorted(str(p) for p in out.glob("pretraining-*.tfrecord"))
    assert len(shards) == 2
    before = {p: open(p, "rb").read() for p in shards}

    def stamp():
        for p in shards:
            os.utime(p, (1, 1))

    # Unchanged: the rerun keeps every shard.
    stamp()
    capsys.readouterr()
    assert main(argv) == 0
    assert [os.path.getmtime(p) for p in shards] == [1, 1]
    assert "Discarding" not in capsys.readouterr().err
    # The same size, other words and another time: written again.
    edited = corpus / "a.txt"
    when = os.stat(edited).st_mtime_ns
    edited.write_bytes(texts["a.txt"].replace(b"cat sat", b"king is"))
    assert os.path.getsize(edited) == len(texts["a.txt"])
    os.utime(edited, ns=(when + 5 * 10**9, when + 5 * 10**9))
    stamp()
    assert main(argv) == 0
    said = capsys.readouterr().err
    assert "Discarding 2 finished shards" in said and "the corpus files or their contents" in said
    assert [os.path.getmtime(p) for p in shards] != [1, 1]
    after = {p: open(p, "rb").read() for p in shards}
    assert after[shards[0]] != before[shards[0]]
    metadata = json.loads((out / "metadata.json").read_text(encoding="utf-8"))
    assert metadata["complete"] and metadata["num_examples"] == len(records(shards))
    # And a rerun of the edited corpus keeps them again.
    stamp()
    assert main(argv) == 0
    assert [os.path.getmtime(p) for p in shards] == [1, 1]
    assert "Discarding" not in capsys.readouterr().err


def test_latin_1_text_past_the_files_beginning_is_one_sentence(tmp_path):
    # A corpus joined from sources, one in Latin-1 after 200 KB of ASCII: only the first
    # 64 KiB were checked, and "café" trained as "caf\ufffd" without a word.
    from keras_electra.data.files import check_text_files

    head = ("the king is dead . long live the king .\n" * 5000).encode()
    tail = ("le café de la bibliothèque est fermé .\n" * 3000).encode("latin-1")
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(head + tail)
    with pytest.raises(InputDataError) as caught:
        check_text_files([str(mixed)])
    at = len(head) + tail.index("é".encode("latin-1"))
    assert str(caught.value) == (
        f"Corpus file '{mixed}' is not all UTF-8: at byte {at:,} it has the byte 0xE9 ('é' in "
        "Windows-1252), in a part with no UTF-8 beyond ASCII (text in a legacy 8-bit "
        "encoding such as Latin-1, joined to the rest); convert that part (`iconv -f "
        "WINDOWS-1252 -t UTF-8`) before joining, and pass the result."
    )
    fine = tmp_path / "fine.txt"
    fine.write_bytes(head + tail.decode("latin-1").encode())  # the same text in UTF-8
    check_text_files([str(fine)])


def test_a_rerun_uses_the_vocabulary_it_learned_unless_its_inputs_changed(tmp_path, capsys):
    # A prepare stopped while writing shards learned its vocabulary again on the rerun: a
    # whole pass over the corpus, as long as the packing.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "".join(f"the king {i} is dead .\nlong live the queen .\n\n" for i in range(300)),
        encoding="utf-8",
    )
    out = tmp_path / "records"
    argv = ["prepare", "--corpus", str(corpus), "--output", str(out), "--vocab-size", "300"]
    argv += ["--num-shards", "2", "--workers", "1"]

    def run(*extra):
        assert main([*argv, *extra]) == 0
        return capsys.readouterr()

    first = run()
    assert "Counting words" in first.err and "earlier run" not in first.out
    vocab = (out / "vocab.txt").read_bytes()
    (out / "metadata.json").unlink()  # as a run stopped before its shards were written
    again = run()
    assert f"Using the vocabulary an earlier run learned: {out / 'vocab.txt'}" in again.out
    assert "Counting words" not in again.err and (out / "vocab.txt").read_bytes() == vocab
    # Another size, or an edited corpus, learns it again.
    assert "Counting words" in run("--vocab-size", "290").err
    stat = corpus.stat()
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert "Counting words" in run("--vocab-size", "290").err
    assert "Counting words" not in run("--vocab-size", "290").err


def test_a_dry_run_says_what_becomes_of_the_finished_shards(tmp_path, capsys):
    # The dry run planned as if the output were empty: a changed --seed would remove the
    # finished shards of hours of work without the plan saying so.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the king {i} is dead .\n\n" for i in range(200)), "utf-8")
    out = tmp_path / "records"
    argv = ["prepare", "--corpus", str(corpus), "--output", str(out), "--vocab-size", "300"]
    argv += ["--num-shards", "2", "--workers", "1"]

    def existing(*extra):
        assert main([*argv, *extra, "--dry-run"]) == 0
        rows = [x.split(None, 1) for x in capsys.readouterr().out.splitlines()[1:]]
        return dict(rows).get("existing")

    assert existing() is None  # nothing there yet
    assert main(argv) == 0
    capsys.readouterr()
    assert existing() == "2 finished shards kept (the same corpus and settings); the rest written"
    assert existing("--seed", "7") == (
        f"would discard 2 finished shards in '{out}': they were written with other settings "
        "(--seed 0, now 7)"
    )
    assert existing("--vocab-size", "290") == (
        "2 finished shards, kept only if the vocabulary learned first is the one they used"
    )
