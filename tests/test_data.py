"""Tests of keras_electra.data: vocabularies, tokenizer, packing, pipelines, TFRecords."""

import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from keras_electra.data import (
    SPECIAL_TOKENS,
    ElectraTokenizer,
    corpus_stats,
    fit_options,
    learn_vocab,
    load_vocab,
    pack_examples,
    pretraining_dataset,
    pretraining_examples,
    resolve_corpus_files,
    save_vocab,
    write_pretraining_tfrecords,
)
from keras_electra.errors import ConfigError, InputDataError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "sample", "shakespeare.txt")
SAMPLE_VALID = os.path.join(REPO, "data", "sample", "shakespeare_valid.txt")

WORDS = "the cat sat on mat dog ran far away and then came home a big red".split()
VOCAB = list(SPECIAL_TOKENS) + [".", ",", "!", "?"] + WORDS + ["##s", "##ed", "un", "##happy"]
ID = {token: i for i, token in enumerate(VOCAB)}
CLS, SEP, PAD = ID["[CLS]"], ID["[SEP]"], ID["[PAD]"]


@pytest.fixture(scope="module")
def tokenizer():
    return ElectraTokenizer(VOCAB)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small corpus: 30 documents of 3-6 sentences of known words."""
    rng = np.random.default_rng(0)
    docs = []
    for _ in range(30):
        sentences = []
        for _ in range(rng.integers(3, 7)):
            words = rng.choice(WORDS, size=rng.integers(3, 12))
            sentences.append(" ".join(words).capitalize() + ".")
        docs.append("\n".join(sentences))
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)


def lines_dataset(lines):
    """(ids, blank) lines from lists of ids; an empty list is a blank line."""
    return tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(lines, dtype=tf.int32, ragged_rank=1), [not ids for ids in lines])
    )


def pack(lines, max_seq_length, **kwargs):
    kwargs.setdefault("single_segment_prob", 0.0)
    kwargs.setdefault("random_length_prob", 0.0)
    examples = pack_examples(
        lines_dataset(lines),
        max_seq_length=max_seq_length,
        cls_id=CLS,
        sep_id=SEP,
        pad_id=PAD,
        **kwargs,
    )
    return [{k: v.tolist() for k, v in ex.items()} for ex in examples.as_numpy_iterator()]


def first_batches(dataset, n=3):
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset.take(n)]


def same_batches(a, b):
    return all(np.array_equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in x)


# --- vocabulary -------------------------------------------------------------------------------


def test_learn_vocab_puts_special_tokens_first_and_bounds_size(corpus):
    vocab = learn_vocab([corpus], vocab_size=60)
    assert tuple(vocab[:5]) == SPECIAL_TOKENS
    assert len(vocab) <= 60
    assert len(set(vocab)) == len(vocab)
    assert "the" in vocab and "." in vocab
    assert all(token == token.lower() for token in vocab[5:])


def test_a_learned_vocabulary_spells_every_word_of_its_corpus(tmp_path):
    # Rare letters inside rare words: their continuation pieces (##j, ##v, ##x) rank last
    # by count, and a vocabulary cut without them turns each such word into [UNK].
    # More distinct frequent words than the vocabulary holds, from the letters a to i.
    words = [a + b + c for a in "abcdefghi" for b in "abcdefghi" for c in "abcdefghi"][:300]
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(words * 5) + "\najax quiz ovum\n", encoding="utf-8")
    vocab = learn_vocab([str(path)], vocab_size=100)
    assert len(vocab) <= 100
    assert {"##j", "##v", "##x", "##z", "q"} <= set(vocab)
    ids = ElectraTokenizer(vocab).tokenize(["ajax quiz ovum"]).flat_values.numpy().tolist()
    assert vocab.index("[UNK]") not in ids, [vocab[i] for i in ids]


def _tensorflow_text_pieces(word_counts, threshold, **limits):
    """tensorflow-text's WordPiece learner at one threshold (its binary search reduced to
    a single run), the reference :func:`wordpiece_pieces` must equal."""
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as lib

    return lib.learn(
        word_counts,
        vocab_size=10**9,  # the threshold alone decides
        reserved_tokens=list(SPECIAL_TOKENS),
        upper_thresh=threshold,
        lower_thresh=threshold,
        **limits,
    )


@pytest.mark.parametrize("threshold", [1, 3, 20])
def test_the_wordpiece_learner_equals_tensorflow_texts_on_the_sample_corpus(threshold):
    from keras_electra.data.vocab import count_words, wordpiece_pieces

    counts = count_words([SAMPLE], max_lines=5000)
    words = [(w, n) for w, n in counts.items() if w not in SPECIAL_TOKENS]
    ours = wordpiece_pieces(words, threshold, SPECIAL_TOKENS)
    assert ours == _tensorflow_text_pieces(words, threshold)
    assert len(ours) > 500 and "##s" in ours


def test_the_wordpiece_learner_equals_tensorflow_texts_at_its_limits(monkeypatch):
    """Words over 50 characters, reserved words among the counts, an alphabet of more
    than 1,000 characters (words with the rarest left out), more words than the learner
    takes (the most frequent kept, ties in their order), ties in count between pieces."""
    import random

    from keras_electra.data import vocab as vocab_module

    rng = random.Random(0)
    letters = [chr(c) for c in range(0x4E00, 0x4E00 + 1100)]  # 1,100 CJK characters
    counts = {}
    for i in range(6000):
        word = "".join(
            rng.choice(letters[:40] if i % 3 else letters) for _ in range(rng.randint(1, 6))
        )
        counts[word] = rng.choice([1, 2, 2, 3, 5, 8])  # many ties
    counts["x" * 51] = 500  # longer than a piece may be
    counts["[MASK]"] = 500  # a reserved token among the words
    words = list(counts.items())
    monkeypatch.setattr(vocab_module, "_MAX_WORDS", 4000)
    ours = vocab_module.wordpiece_pieces(words, 2, SPECIAL_TOKENS)
    assert ours == _tensorflow_text_pieces(words, 2, max_input_tokens=4000)
    assert "x" * 51 not in ours and ours.count("[MASK]") == 1
    assert sum(len(t) == 1 for t in ours) < 1000  # the rarest characters were left out


def test_learn_vocab_rejects_too_small_size(corpus):
    with pytest.raises(ConfigError, match="--vocab-size 5 leaves no room for words"):
        learn_vocab([corpus], vocab_size=5)


def test_save_and_load_vocab_round_trip(tmp_path):
    path = str(tmp_path / "sub" / "vocab.txt")
    save_vocab(VOCAB, path)
    assert load_vocab(path) == VOCAB


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", "has no \\[MASK\\] token"),
        ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nthe\n", "lists 'the' twice"),
        (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n\xff\n", "not valid UTF-8"),
        ("", "is empty"),
    ],
)
def test_load_vocab_rejects_bad_files(tmp_path, content, message):
    path = tmp_path / "v.txt"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(InputDataError, match=message):
        load_vocab(str(path))


def test_load_vocab_missing_file_names_it(tmp_path):
    with pytest.raises(InputDataError, match="'.*nope.txt' does not exist"):
        load_vocab(str(tmp_path / "nope.txt"))


# --- tokenizer --------------------------------------------------------------------------------


def test_tokenizer_round_trip_and_lowercasing(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["The CAT sat, unhappy!", "Dogs ran."]))
    assert ids.dtype == tf.int32 and ids.shape.as_list() == [2, None]
    tokens = tokenizer.detokenize_ids(ids).to_list()
    assert tokens == [
        [b"the", b"cat", b"sat", b",", b"un", b"##happy", b"!"],
        [b"dog", b"##s", b"ran", b"."],
    ]
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 2, 3, 4)


def test_cased_tokenizer_keeps_case(tokenizer):
    cased = ElectraTokenizer(VOCAB, lowercase=False)
    assert cased.tokenize(tf.constant(["The the"])).to_list() == [[cased.unk_id, ID["the"]]]
    assert ElectraTokenizer.from_config(tokenizer.get_config()).vocab == VOCAB


def test_tokenizer_survives_invalid_utf8_control_chars_and_long_words(tokenizer):
    text = tf.constant([b"the \xff\xfe cat", "the\x00\x07cat\x1b", "a" * 500, "", "\u00e9"])
    tokens = tokenizer.detokenize_ids(tokenizer.tokenize(text)).to_list()
    assert tokens[0] == [b"the", b"[UNK]", b"cat"]
    assert tokens[1] == [b"the", b"cat"]
    assert tokens[2] == [b"[UNK]"]
    assert tokens[3] == []
    assert tokens[4] == [b"[UNK]"]


def test_tokenizer_uses_looked_up_ids_of_google_style_vocab():
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += ["hello"]
    tokenizer = ElectraTokenizer(vocab)
    assert (tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (
        100,
        101,
        102,
        103,
    )
    assert tokenizer.tokenize(tf.constant(["hello xyz"])).to_list() == [[104, 100]]


def test_tokenizer_works_in_saved_model(tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = tokenizer
    module.encode = tf.function(
        lambda text: tokenizer.tokenize(text).to_tensor(),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    out = loaded.encode(tf.constant(["The cat", "dog"])).numpy().tolist()
    assert out == [[ID["the"], ID["cat"]], [ID["dog"], 0]]


# --- packing ----------------------------------------------------------------------------------


def test_packing_segments_exact():
    # Target 16, so the first segment's target is (16 - 3) // 2 = 6. Document 1: the first
    # sentence fills it (6 tokens), so the rest go to segment B. Document 2: both sentences
    # fit under the target, so there is no segment B. Blank lines end documents.
    lines = [list(range(10, 16)), [16, 17], [18], [], [20, 21], [22, 23], []]
    examples = pack(lines, max_seq_length=16)
    assert examples == [
        {
            "token_ids": [CLS, 10, 11, 12, 13, 14, 15, SEP, 16, 17, 18, SEP, 0, 0, 0, 0],
            "padding_mask": [1] * 12 + [0] * 4,
            "segment_ids": [0] * 8 + [1] * 4 + [0] * 4,
        },
        {
            "token_ids": [CLS, 20, 21, 22, 23, SEP] + [0] * 10,
            "padding_mask": [1] * 6 + [0] * 10,
            "segment_ids": [0] * 16,
        },
    ]


def test_packing_traces_its_step_once(monkeypatch):
    # Dataset.scan traces its step again when the state's shapes change between the initial
    # state and the step's output; fixed-shape buffers keep it to one trace per pipeline.
    from keras_electra.data import pretraining

    traced = []
    step = pretraining._Packer.step
    monkeypatch.setattr(
        pretraining._Packer, "step", lambda self, *a: traced.append(1) or step(self, *a)
    )
    pack([[5, 6], [7], []], max_seq_length=8)
    assert len(traced) == 1


def test_packing_flushes_at_target_and_trims():
    # 10 + 4 tokens reach target 12: first segment gets the 10 (trimmed to 12 - 2 = 10),
    # second segment gets max(0, 12 - 10 - 3) = 0 tokens. Then [20, 21] waits for the blank.
    examples = pack([list(range(30, 40)), [40, 41, 42, 43], [20, 21], []], max_seq_length=12)
    assert [ex["token_ids"] for ex in examples] == [
        [CLS, *range(30, 40), SEP],
        [CLS, 20, 21, SEP] + [PAD] * 8,
    ]
    assert examples[0]["segment_ids"] == [0] * 12
    assert examples[1]["padding_mask"] == [1] * 4 + [0] * 8


def test_packing_long_sentence_and_empty_lines():
    # Blank lines with nothing pending do nothing; a 50-token sentence is cut to 6 tokens.
    examples = pack([[], [], list(range(100, 150)), [], []], max_seq_length=8)
    assert [ex["token_ids"] for ex in examples] == [[CLS, 100, 101, 102, 103, 104, 105, SEP]]


def test_packing_single_segment_probability_one():
    examples = pack(
        [[10, 11, 12], [13, 14], [15, 16], []], max_seq_length=16, single_segment_prob=1
    )
    assert examples[0]["token_ids"][:9] == [CLS, 10, 11, 12, 13, 14, 15, 16, SEP]
    assert set(examples[0]["segment_ids"]) == {0}


def test_packing_coin_flip_is_seeded_and_takes_both_branches():
    # A first segment of 5 < 6 tokens takes the next sentence half the time: over 20
    # documents both outcomes occur, and the same seed repeats them exactly. (Each draw
    # hashes the document's first line: identical documents pack identically.)
    lines = [line for doc in range(20) for line in ([10 + doc, 11, 12, 13, 14], [20] * 5, [])]
    outcomes = [tuple(ex["segment_ids"]) for ex in pack(lines, max_seq_length=16, seed=7)]
    assert len(outcomes) == 20 and len(set(outcomes)) == 2
    assert outcomes == [tuple(ex["segment_ids"]) for ex in pack(lines, max_seq_length=16, seed=7)]
    assert outcomes != [tuple(ex["segment_ids"]) for ex in pack(lines, max_seq_length=16, seed=8)]


def test_packing_random_lengths_stay_in_bounds():
    lines = [[7] * 9 for _ in range(200)]
    examples = pack(lines, max_seq_length=32, random_length_prob=1.0)
    lengths = [sum(ex["padding_mask"]) for ex in examples]
    assert max(lengths) <= 32 and min(lengths) >= 5
    assert len(set(lengths)) > 3


# --- streaming pipeline -----------------------------------------------------------------------


def test_pretraining_dataset_shapes_dtypes_and_structure(corpus, tokenizer):
    ds = pretraining_dataset(corpus, tokenizer, batch_size=4, max_seq_length=32)
    for name, spec in ds.element_spec.items():
        assert spec.shape.as_list() == [4, 32] and spec.dtype == tf.int32, name
    batch = next(iter(ds))
    ids, mask, seg = (batch[k].numpy() for k in ("token_ids", "padding_mask", "segment_ids"))
    assert (ids[:, 0] == CLS).all()
    assert ((ids == PAD) == (mask == 0)).all()
    assert (seg <= mask).all()
    for row_ids, row_mask in zip(ids, mask, strict=True):
        real = row_ids[: row_mask.sum()]
        assert real[-1] == SEP and 1 <= (real == SEP).sum() <= 2


def test_same_seed_same_batches_and_different_seed_differs(corpus, tokenizer):
    def make(seed):
        return pretraining_dataset(corpus, tokenizer, batch_size=4, max_seq_length=32, seed=seed)

    first = first_batches(make(1))
    assert same_batches(first, first_batches(make(1)))
    assert not same_batches(first, first_batches(make(2)))


def test_skip_reproduces_position(corpus, tokenizer):
    ds = pretraining_dataset(corpus, tokenizer, batch_size=4, max_seq_length=32, shuffle_buffer=64)
    batches = first_batches(ds, 60)  # several passes over the ~25-example corpus
    assert same_batches(batches[57:], first_batches(ds.skip(57), 3))


def test_each_pass_is_packed_and_shuffled_anew(corpus, tokenizer):
    n = sum(1 for _ in pretraining_examples(corpus, tokenizer, max_seq_length=32))
    ds = pretraining_dataset(corpus, tokenizer, batch_size=1, max_seq_length=32, shuffle=False)
    ids = [b["token_ids"][0].tolist() for b in first_batches(ds, 2 * n)]
    assert ids[:n] != ids[n:]  # packing randomness depends on the pass
    shuffled = pretraining_dataset(corpus, tokenizer, batch_size=1, max_seq_length=32)
    shuffled_ids = [b["token_ids"][0].tolist() for b in first_batches(shuffled, n)]
    assert shuffled_ids != ids[:n]


# --- input errors and hostile input -----------------------------------------------------------


def test_missing_file_and_empty_corpus_errors(tmp_path, tokenizer):
    with pytest.raises(InputDataError, match="'.*missing.txt' does not exist"):
        pretraining_dataset(
            str(tmp_path / "missing.txt"), tokenizer, batch_size=2, max_seq_length=16
        )
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n")
    with pytest.raises(InputDataError, match="has no text"):
        pretraining_dataset(str(empty), tokenizer, batch_size=2, max_seq_length=16)
    (tmp_path / "d").mkdir()
    with pytest.raises(InputDataError, match="has no \\*.txt files"):
        pretraining_dataset(str(tmp_path / "d"), tokenizer, batch_size=2, max_seq_length=16)
    controls = tmp_path / "controls.txt"
    controls.write_bytes(b"\x01\x02\n\x03\n")  # mostly control characters: not text
    with pytest.raises(InputDataError, match="is not text: 60% of its first 64 KiB"):
        pretraining_dataset(str(controls), tokenizer, batch_size=2, max_seq_length=16)
    spaced = tmp_path / "spaced.txt"
    spaced.write_bytes(b"\x01" + b" " * 30 + b"\n")  # text-like enough, but no word in it
    with pytest.raises(InputDataError, match="gives no tokens"):
        pretraining_dataset(str(spaced), tokenizer, batch_size=2, max_seq_length=16)


def test_a_compressed_corpus_file_says_how_to_decompress_it(tmp_path):
    # A .txt.gz file was "not text ... convert others with iconv", which cannot help.
    import bz2
    import gzip
    import lzma

    from keras_electra.data.files import check_text_files

    text = b"The cat sat on the mat.\n" * 200
    for name, pack, command in (
        ("a.txt.gz", gzip.compress, "gunzip -k"),
        ("b.txt.bz2", bz2.compress, "bunzip2 -k"),
        ("c.txt.xz", lzma.compress, "unxz -k"),
    ):
        path = tmp_path / name
        path.write_bytes(pack(text))
        with pytest.raises(InputDataError) as error:
            check_text_files([str(path)])
        kind = name.split(".")[-1].replace("gz", "gzip").replace("bz2", "bzip2")
        assert str(error.value) == (
            f"Corpus file '{path}' is {kind}-compressed, not text; decompress it first "
            f"({command} '{path}') and pass the text file."
        )
    plain = tmp_path / "bzh.txt"
    plain.write_bytes(b"BZh9 is not a bzip2 file.\n" * 50)
    check_text_files([str(plain)])


def test_a_corpus_that_is_mostly_not_text_is_one_sentence(tmp_path, capsys):
    """300 KB of random bytes (or UTF-16 text) as a corpus: learning a vocabulary and
    pretraining refuse it in one sentence instead of training on garbage. Text in a legacy
    8-bit encoding, whose accents would all train as U+FFFD, is refused too, naming the
    line and the byte; UTF-8 with a few stray bytes still passes (they become U+FFFD)."""
    from keras_electra.cli import main

    junk = tmp_path / "junk.txt"
    junk.write_bytes(np.random.default_rng(0).bytes(300_000))
    utf16 = tmp_path / "utf16.txt"
    utf16.write_text("The cat sat on the mat.\n" * 100, encoding="utf-16")
    for path in (junk, utf16):
        with pytest.raises(InputDataError, match=f"Corpus file '{path}' is not text") as error:
            learn_vocab([str(path)], vocab_size=100)
        assert "\n" not in str(error.value) and "iconv" in str(error.value)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(("The end.\n" + "Le café est près de la forêt.\n" * 100).encode("cp1252"))
    with pytest.raises(InputDataError, match="legacy 8-bit encoding") as error:
        learn_vocab([str(latin1)], vocab_size=100)
    assert "line 2 has the byte 0xE9 ('é' in Windows-1252)" in str(error.value)
    assert "\n" not in str(error.value) and "iconv -f WINDOWS-1252" in str(error.value)
    stray = tmp_path / "stray.txt"
    stray.write_bytes("Le café est près de la forêt.\n".encode() * 99 + b"caf\xe9\n")
    assert "caf" in " ".join(learn_vocab([str(stray)], vocab_size=100))  # no error
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["pretrain", "--corpus", str(junk), "--output", str(out), "--steps", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("keras-electra pretrain: error: Corpus file") and "is not text" in line


def test_directory_of_text_files_is_read_in_shuffled_file_order(corpus, tokenizer, tmp_path):
    lines = pathlib.Path(corpus).read_text(encoding="utf-8").split("\n\n")
    for i in range(3):
        (tmp_path / f"part{i}.txt").write_text("\n\n".join(lines[i::3]), encoding="utf-8")
    (tmp_path / "notes.md").write_text("not corpus text")
    assert resolve_corpus_files(str(tmp_path)) == [str(tmp_path / f"part{i}.txt") for i in range(3)]

    def first_ids(seed, shuffle):
        ds = pretraining_dataset(
            str(tmp_path), tokenizer, batch_size=2, max_seq_length=32, seed=seed, shuffle=shuffle
        )
        return [b["token_ids"].tolist() for b in first_batches(ds, 8)]

    assert first_ids(0, True) == first_ids(0, True)
    assert first_ids(0, True) != first_ids(1, True) != first_ids(0, False)


def test_too_few_examples_without_repeat_is_an_error(corpus, tokenizer):
    with pytest.raises(InputDataError, match="fewer than batch_size=1000"):
        pretraining_dataset(corpus, tokenizer, batch_size=1000, max_seq_length=32, repeat=False)
    with pytest.raises(ConfigError, match="--max-seq-length must be .*, not 2\\."):
        pretraining_dataset(corpus, tokenizer, batch_size=2, max_seq_length=2)


def test_learning_a_vocabulary_with_progress_says_what_it_does(tmp_path, capsys):
    """A progress bar over the corpus bytes while words are counted, then a line naming
    what the pieces are chosen from and one with the time; quiet without progress; the
    same vocabulary either way."""
    path = tmp_path / "a.txt"
    path.write_text("The cat sat on the mat.\nThe dog sat.\n" * 500 + "The end", encoding="utf-8")
    capsys.readouterr()
    quiet = learn_vocab([str(path)], vocab_size=100)
    assert capsys.readouterr().err == ""
    assert learn_vocab([str(path)], vocab_size=100, progress=True) == quiet
    said = capsys.readouterr().err
    assert "Counting words: 100%" in said and "18.5k/18.5k" in said, said  # 18,507 bytes
    assert "up to 100 tokens from 8 distinct words (5,502 in all) ... 00:0" in said, said
    assert f"\nLearned {len(quiet)} tokens in " in said, said
    # CRLF line ends: the count ended at 99% (TensorFlow's lines drop the "\r" too).
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert learn_vocab([str(path)], vocab_size=100, progress=True) == quiet
    said = capsys.readouterr().err
    assert "Counting words: 100%" in said and "19.5k/19.5k" in said, said  # 19,507 bytes


def test_the_vocabulary_learners_silent_minutes_show_the_time_elapsed(
    tmp_path, capsys, monkeypatch
):
    # The learner says nothing while it works (a minute or more for a million distinct
    # words): the line under way showed no sign of life until it was done.
    import time

    from keras_electra.data import vocab as vocab_module

    learn = vocab_module.wordpiece_pieces

    def slow(*args, **kwargs):
        time.sleep(2.5)
        return learn(*args, **kwargs)

    monkeypatch.setattr(vocab_module, "wordpiece_pieces", slow)
    path = tmp_path / "a.txt"
    path.write_text("The cat sat on the mat.\n" * 50, encoding="utf-8")
    capsys.readouterr()
    learn_vocab([str(path)], vocab_size=60, progress=True)
    said = capsys.readouterr().err
    assert "(350 in all) ... 00:01" in said and "(350 in all) ... 00:02" in said, said


def test_stray_bytes_that_are_not_utf8_give_batches(tmp_path, tokenizer):
    path = tmp_path / "stray.txt"
    path.write_bytes("The café sat on the mat.\n\nThe dog ran ".encode() + b"\xff\xfe far.\n")
    batch = next(iter(pretraining_dataset(str(path), tokenizer, batch_size=2, max_seq_length=16)))
    tokens = tokenizer.detokenize_ids(batch["token_ids"]).numpy()
    assert b"[UNK]" in tokens and b"dog" in tokens


def test_one_megabyte_line_gives_batches(tmp_path, tokenizer):
    path = tmp_path / "long.txt"
    path.write_text("the cat " * 131072 + "\n", encoding="utf-8")  # 1 MiB, one line
    ds = pretraining_dataset(str(path), tokenizer, batch_size=2, max_seq_length=16)
    batch = next(iter(ds))
    assert batch["padding_mask"].numpy().sum() == 32
    assert batch["token_ids"].numpy()[0, 1:4].tolist() == [ID["the"], ID["cat"], ID["the"]]


# --- TFRecords --------------------------------------------------------------------------------


def test_tfrecords_round_trip_equals_streamed_examples(corpus, tokenizer, tmp_path):
    out = str(tmp_path / "records")
    paths = write_pretraining_tfrecords(
        corpus, tokenizer, out, max_seq_length=32, num_shards=3, seed=5, progress=False
    )
    assert [os.path.basename(p) for p in paths][0] == "pretraining-00000-of-00003.tfrecord"
    streamed = list(pretraining_examples(corpus, tokenizer, max_seq_length=32, seed=5))
    with open(os.path.join(out, "metadata.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["num_examples"] == len(streamed) and metadata["vocab_size"] == len(VOCAB)
    read = pretraining_dataset(out, batch_size=1, max_seq_length=32, shuffle=False, repeat=False)
    read = list(read)
    assert len(read) == len(streamed)
    for got, want in zip(read, streamed, strict=True):
        for key in want:
            assert got[key].dtype == tf.int32
            assert got[key].numpy()[0].tolist() == want[key].numpy().tolist()
    shuffled = pretraining_dataset(out, batch_size=4, max_seq_length=32, seed=3)
    again = pretraining_dataset(paths, batch_size=4, max_seq_length=32, seed=3)
    assert same_batches(first_batches(shuffled), first_batches(again))
    assert shuffled.element_spec["token_ids"].shape.as_list() == [4, 32]
    # On disk the records keep the original ELECTRA's feature names.
    record = next(iter(tf.data.TFRecordDataset(paths[0]))).numpy()
    stored = tf.train.Example.FromString(record).features.feature
    assert sorted(stored) == ["input_ids", "input_mask", "segment_ids"]
    assert list(stored["input_ids"].int64_list.value) == streamed[0]["token_ids"].numpy().tolist()


def test_tfrecord_errors(corpus, tokenizer, tmp_path):
    out = str(tmp_path / "records")
    write_pretraining_tfrecords(
        corpus, tokenizer, out, max_seq_length=32, num_shards=1, progress=False
    )
    with pytest.raises(InputDataError, match="length 32, not max_seq_length=64"):
        pretraining_dataset(out, batch_size=2, max_seq_length=64)
    with pytest.raises(InputDataError, match="matches no file"):
        pretraining_dataset(str(tmp_path / "none" / "*.tfrecord"), batch_size=2, max_seq_length=32)
    bogus = tmp_path / "bogus.tfrecord"
    bogus.write_bytes(b"this is not a record file at all")
    with pytest.raises(InputDataError, match="not a readable TFRecord"):
        pretraining_dataset(str(bogus), batch_size=2, max_seq_length=32)
    # A damaged metadata.json is one sentence that names it and says what rewrites it.
    metadata = tmp_path / "records" / "metadata.json"
    metadata.write_text('{"vocab_size": 7', encoding="utf-8")
    with pytest.raises(InputDataError) as caught:
        pretraining_dataset(out, tokenizer, batch_size=2, max_seq_length=32)
    assert str(caught.value) == (
        f"'{metadata}' is not valid JSON; run keras-electra prepare again to rewrite the "
        "TFRecords and their metadata."
    )


def test_pretraining_dataset_dispatches(corpus, tokenizer, tmp_path):
    out = str(tmp_path / "records")
    write_pretraining_tfrecords(
        corpus, tokenizer, out, max_seq_length=32, num_shards=2, progress=False
    )
    kw = {"batch_size": 2, "max_seq_length": 32, "shuffle": False, "repeat": False}
    from_records = first_batches(pretraining_dataset(out, tokenizer, **kw), 2)
    from_text = first_batches(pretraining_dataset([corpus], tokenizer, **kw), 2)
    assert same_batches(from_records, from_text)
    other = ElectraTokenizer(VOCAB + ["extra"])
    with pytest.raises(InputDataError, match="vocabulary but the tokenizer has"):
        pretraining_dataset(out, other, **kw)
    # The same size with two pieces swapped: the records' ids would mean other words.
    swapped = [*VOCAB[:-2], VOCAB[-1], VOCAB[-2]]
    with pytest.raises(InputDataError, match="another vocabulary of the same size"):
        pretraining_dataset(out, ElectraTokenizer(swapped), **kw)
    # Records of lowercased text read by a tokenizer that keeps case.
    with pytest.raises(InputDataError) as caught:
        pretraining_dataset(out, ElectraTokenizer(VOCAB, lowercase=False), **kw)
    assert str(caught.value) == (
        f"The TFRecords in '{out}' were prepared lowercased but this run keeps case, so its "
        "tokenizer would not match their ids; leave out --cased."
    )
    # A prepare stopped before it wrote every shard.
    metadata = pathlib.Path(out) / "metadata.json"
    whole = metadata.read_text(encoding="utf-8")
    metadata.write_text(json.dumps({**json.loads(whole), "complete": False}), encoding="utf-8")
    with pytest.raises(InputDataError, match=f"The TFRecords in '{out}' are unfinished: "):
        pretraining_dataset(out, tokenizer, **kw)
    metadata.write_text(whole, encoding="utf-8")
    with pytest.raises(InputDataError, match="mix TFRecord and text"):
        pretraining_dataset([out, corpus], tokenizer, **kw)
    with pytest.raises(ConfigError, match="Text data needs a tokenizer"):
        pretraining_dataset(corpus, **kw)


# --- the sample corpus ------------------------------------------------------------------------


def test_sample_corpus_format():
    with open(SAMPLE, encoding="utf-8") as f:
        text = f.read()
    documents = text.strip("\n").split("\n\n")
    assert 2.5e6 < len(text.encode()) < 4.2e6
    assert len(documents) > 500
    assert "\n\n\n" not in text and "**" not in text and "_" not in text


def test_sample_corpus_vocab_has_few_unknowns_and_packs_densely():
    vocab = learn_vocab([SAMPLE], vocab_size=8000, max_lines=10000)
    assert len(vocab) == 8000 and tuple(vocab[:5]) == SPECIAL_TOKENS
    stats = corpus_stats(SAMPLE_VALID, ElectraTokenizer(vocab), max_seq_length=128)
    assert stats["unk_rate"] < 0.02
    assert stats["fill_rate"] > 0.85
    assert stats["examples"] > 300


def test_datasets_for_fit_keep_their_order_and_turn_tf_data_autotuning_off(
    corpus, tokenizer, tmp_path
):
    # With autotuning on, the end of every fit waits for the autotuner's next wake-up
    # (up to 60 s); the library's training pipelines turn it off (see fit_options).
    from keras_electra.finetuning.run import training_batches

    write_pretraining_tfrecords(
        corpus, tokenizer, str(tmp_path / "r"), max_seq_length=32, num_shards=1, progress=False
    )
    made = {
        "text": pretraining_dataset(corpus, tokenizer, batch_size=4, max_seq_length=32),
        "tfrecords": pretraining_dataset(
            [str(tmp_path / "r")], tokenizer, batch_size=4, max_seq_length=32
        ),
        "fine-tuning": training_batches(
            {"x": np.arange(10)}, np.arange(10), batch_size=4, epochs=2, seed=0
        ),
    }
    for name, dataset in made.items():
        options = dataset.options()
        assert options.autotune.enabled is False, name
        assert options.deterministic is True, name
    assert fit_options().autotune.enabled is False


def test_overlapping_corpus_paths_read_each_file_once(tmp_path):
    # "corpus corpus/*.txt corpus/a.txt" read a.txt three times, weighting its text triple.
    from keras_electra.data.files import resolve_corpus_files

    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.txt").write_text(f"{name} text.\n")
    os.symlink(folder / "a.txt", tmp_path / "link.txt")
    given = [str(folder / "b.txt"), str(folder), f"{folder}/*.txt", str(tmp_path / "link.txt")]
    files = resolve_corpus_files(given)
    assert [os.path.basename(f) for f in files] == ["b.txt", "a.txt"]
    assert files[0] == str(folder / "b.txt")  # each at its first place
