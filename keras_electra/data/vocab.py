"""WordPiece vocabularies: learn one from a corpus, load and save BERT-format files.

A vocabulary is a list of tokens; a token's id is its index. Learned vocabularies
put :data:`SPECIAL_TOKENS` first (``[PAD]`` = 0 ... ``[MASK]`` = 4), but Google's
released vocabularies do not (``[UNK]`` = 100, ``[MASK]`` = 103), so code must look
ids up by token instead of assuming them.
"""

from __future__ import annotations

import collections
import contextlib
import numbers
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from keras_electra.data.files import (
    check_text_files,
    clean_lines,
    file_size,
    is_remote,
    open_binary,
    resolve_corpus_files,
)
from keras_electra.errors import ConfigError, InputDataError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The tokens ELECTRA needs, in the order learned vocabularies use (``[PAD]`` is id 0)."""


def validate_vocab(tokens: Sequence[str], source: str = "The vocabulary") -> None:
    """Checks that a vocabulary can be used by ELECTRA.

    Args:
        tokens: the vocabulary, one token per id.
        source: how to name the vocabulary in an error message, e.g. ``"Vocabulary 'v.txt'"``.

    Raises:
        InputDataError: if the vocabulary is empty, has a duplicate or empty token, or
            lacks one of :data:`SPECIAL_TOKENS`.

    Examples:
        >>> validate_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"])
    """
    if not tokens:
        raise InputDataError(f"{source} is empty; pass a vocabulary with one token per line.")
    seen: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if not token:
            raise InputDataError(
                f"{source} has an empty token at line {index + 1}; remove blank lines from it."
            )
        if token in seen:
            raise InputDataError(
                f"{source} lists {token!r} twice (lines {seen[token] + 1} and {index + 1}); "
                "remove the duplicate so every token has one id."
            )
        seen[token] = index
    for special in SPECIAL_TOKENS:
        if special not in seen:
            raise InputDataError(
                f"{source} has no {special} token; ELECTRA needs [PAD], [UNK], [CLS], [SEP] "
                "and [MASK]."
            )


def load_vocab(path: str) -> list[str]:
    """Loads a BERT-format vocabulary file (UTF-8, one token per line, id = line number).

    Args:
        path: path to a ``vocab.txt`` file.

    Returns:
        The tokens, in id order.

    Raises:
        InputDataError: if the file is missing, not UTF-8, or fails :func:`validate_vocab`.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
        >>> save_vocab(list(SPECIAL_TOKENS) + ["the"], path)
        >>> load_vocab(path)[-1]
        'the'
    """
    path = os.fspath(path)
    if is_remote(path):  # gs://bucket/vocab.txt, read through tf.io.gfile
        import tensorflow as tf

        exists = tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
    else:
        exists = os.path.isfile(path)
    if not exists:
        raise InputDataError(
            f"Vocabulary file '{path}' does not exist; pass the path to a vocab.txt file."
        )
    try:
        if is_remote(path):
            with tf.io.gfile.GFile(path, "rb") as f:
                text = f.read().decode("utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except UnicodeDecodeError as e:
        raise InputDataError(
            f"Vocabulary file '{path}' is not valid UTF-8 (byte {e.start}); save it as UTF-8 text."
        ) from None
    # One token per line, stripped of surrounding whitespace (as BERT's vocab readers do).
    tokens = [line.strip() for line in text.removesuffix("\n").split("\n")] if text else []
    validate_vocab(tokens, f"Vocabulary '{path}'")
    return tokens


def save_vocab(tokens: Sequence[str], path: str) -> None:
    """Writes a vocabulary as a BERT-format ``vocab.txt`` (UTF-8, one token per line).

    Args:
        tokens: the tokens, in id order.
        path: output file (or a URL such as ``gs://``); a local file's directory is
            created if needed.

    Raises:
        InputDataError: if the tokens fail :func:`validate_vocab`.

    Examples:
        >>> import tempfile, os
        >>> save_vocab(list(SPECIAL_TOKENS), os.path.join(tempfile.mkdtemp(), "vocab.txt"))
    """
    validate_vocab(tokens)
    path = os.fspath(path)
    if not is_remote(path):  # gs://bucket/vocab.txt is written through tf.io.gfile
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open_binary(path, "wb") as f:
        f.write("".join(f"{token}\n" for token in tokens).encode("utf-8"))


def count_words(
    files: Sequence[str],
    lowercase: bool = True,
    max_lines: int | None = None,
    progress: bool = False,
) -> collections.Counter:
    """Counts the words of text files, split as :class:`ElectraTokenizer` splits them.

    Text is normalized like the tokenizer (invalid UTF-8 replaced, control characters
    removed, optionally lower-cased with accents stripped) and split on whitespace and
    punctuation, each punctuation character being a word.

    Args:
        files: UTF-8 text files (or directories of ``*.txt`` files).
        lowercase: whether to lower-case and strip accents, as the tokenizer will.
        max_lines: read at most this many lines in total (``None`` reads everything).
        progress: show a progress bar on stderr (bytes of text counted).

    Returns:
        A ``Counter`` from word (``str``) to count.

    Raises:
        InputDataError: if a file is missing or mostly not text (``check_text_files``).

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("Hello, hello world.\\n")
        >>> count_words([path])["hello"]
        2
    """
    import tensorflow as tf
    from tqdm import tqdm

    paths = resolve_corpus_files(files)
    check_text_files(paths)
    lines = tf.data.TextLineDataset(paths)
    if max_lines is not None:
        lines = lines.take(max_lines)
    split = _word_splitter(lowercase)

    def counted(batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        # The batch's bytes, newlines included, for the progress bar.
        read = tf.reduce_sum(tf.strings.length(batch)) + tf.size(batch)
        return (*split(batch), read)

    words = lines.batch(_COUNT_BATCH).map(counted, num_parallel_calls=tf.data.AUTOTUNE)
    counts: dict[bytes, int] = {}
    total = sum(map(file_size, paths)) if max_lines is None else None
    with tqdm(
        total=total, unit="B", unit_scale=True, desc="Counting words", disable=not progress
    ) as bar:
        for unique, n, read in words.as_numpy_iterator():
            _add_counts(counts, unique, n)
            # Counted with a newline per line: a last line without one is a byte less.
            bar.update(int(read) if total is None else min(int(read), total - bar.n))
        if total is not None:  # every byte read (a CRLF line's "\r" is not counted above)
            bar.update(total - bar.n)
    return _decoded(counts)


_COUNT_BATCH = 4096


def _word_splitter(lowercase: bool):
    """A function from a batch of raw lines to its distinct words and their counts."""
    import tensorflow as tf
    from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

    splitter = BasicTokenizer(lower_case=lowercase)

    def split(batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        words = splitter.tokenize(clean_lines(batch)).flat_values
        unique, _, n = tf.unique_with_counts(words, out_idx=tf.int64)
        return unique, n

    return tf.autograph.experimental.do_not_convert(split)  # plain ops: no conversion


def _add_counts(counts: dict[bytes, int], unique, n) -> None:
    for word, k in zip(unique.tolist(), n.tolist(), strict=True):
        counts[word] = counts.get(word, 0) + k


def _decoded(counts: dict[bytes, int]) -> collections.Counter:
    counts.pop(b"", None)
    return collections.Counter({word.decode("utf-8"): n for word, n in counts.items()})


def count_lines(lines: Sequence[bytes], lowercase: bool, counts: dict[bytes, int]) -> None:
    """Adds the words of raw lines to ``counts`` (word bytes -> count), split as
    :func:`count_words` splits them; the Beam word count calls it on each piece."""
    import tensorflow as tf

    split = _word_splitter(lowercase)
    for i in range(0, len(lines), _COUNT_BATCH):
        unique, n = split(tf.constant(list(lines[i : i + _COUNT_BATCH])))
        _add_counts(counts, unique.numpy(), n.numpy())


def learn_vocab(
    files: Sequence[str],
    vocab_size: int,
    lowercase: bool = True,
    max_lines: int | None = None,
    progress: bool = False,
) -> list[str]:
    """Learns a WordPiece vocabulary from text files.

    Words are counted with the tokenizer's normalization and splitting
    (:func:`count_words`; :func:`keras_electra.data.beam.count_words_beam` counts on
    every core or a cluster), then :func:`vocab_from_counts` picks the sub-words. The
    result starts with :data:`SPECIAL_TOKENS` (``[PAD]`` = 0), then
    every character seen (so few words become ``[UNK]``), then the learned pieces by
    frequency. It has at most ``vocab_size`` tokens; a small corpus may give fewer.

    Args:
        files: UTF-8 text files (or directories of ``*.txt`` files), e.g. the pretraining corpus.
        vocab_size: the maximum number of tokens, special tokens included.
        lowercase: lower-case and strip accents; must match the tokenizer's ``lowercase``.
        max_lines: learn from at most this many lines (``None`` reads everything).
        progress: say on stderr what is being done: a progress bar while the words are
            counted, a line while the pieces are chosen.

    Returns:
        The vocabulary, in id order.

    Raises:
        InputDataError: if a file is missing or mostly not text, or the corpus has no words.
        ConfigError: if ``vocab_size`` is too small to hold the special tokens.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("The cat sat on the mat.\\nThe dog sat.\\n")
        >>> vocab = learn_vocab([path], vocab_size=100)
        >>> vocab[:5]
        ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
    """
    check_vocab_size(vocab_size)
    counts = count_words(files, lowercase=lowercase, max_lines=max_lines, progress=progress)
    return vocab_from_counts(counts, vocab_size, progress=progress)


@contextlib.contextmanager
def ticking(tick: Callable[[], object]) -> Iterator[None]:
    """While the body runs, ``tick()`` each second, on a thread of its own."""
    done = threading.Event()

    def run() -> None:
        while not done.wait(1.0):
            tick()

    ticker = threading.Thread(target=run, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


@contextlib.contextmanager
def _elapsed(said: str) -> Iterator[None]:
    """While the body runs, ``said`` and the time elapsed on stderr, redrawn each second:
    the learner reports nothing while it works (over a minute for a million distinct words
    on a 2-core machine)."""
    from tqdm.auto import tqdm

    with tqdm(desc=said, bar_format="{desc} {elapsed}", file=sys.stderr) as line:
        with ticking(line.refresh):
            yield


def check_cased_vocab(tokens: Sequence[str], path: str, lowercase: bool) -> None:
    """Refuse ``--cased`` with a vocabulary that holds no capital letter (an uncased one):
    every capitalized word would be split into odd pieces or become ``[UNK]``.

    Examples:
        >>> check_cased_vocab(["[PAD]", "the", "##s"], "vocab.txt", lowercase=False)
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: --vocab 'vocab.txt' holds no capital letter (an \
uncased vocabulary), so with --cased every capitalized word would become [UNK] or odd \
pieces; leave out --cased, or pass a cased vocabulary.
    """
    if lowercase:
        return
    words = (t for t in tokens if not (t.startswith("[") and t.endswith("]")))
    if not any(c.isupper() for t in words for c in t):
        raise ConfigError(
            f"--vocab '{path}' holds no capital letter (an uncased vocabulary), so with "
            "--cased every capitalized word would become [UNK] or odd pieces; leave out "
            "--cased, or pass a cased vocabulary."
        )


def check_vocab_size(vocab_size: int) -> None:
    """One sentence for a learned vocabulary's size that leaves no room for words (named
    as the commands' flag, ``--vocab-size``, which Python's ``vocab_size`` is).

    Examples:
        >>> check_vocab_size("800")
        Traceback (most recent call last):
        ...
        TypeError: vocab_size is a whole number of tokens, not a str ('800').
    """
    if not isinstance(vocab_size, numbers.Integral) or isinstance(vocab_size, bool):
        raise TypeError(
            f"vocab_size is a whole number of tokens, not a {type(vocab_size).__name__} "
            f"({vocab_size!r})."
        )
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ConfigError(
            f"--vocab-size {vocab_size} leaves no room for words; use one above "
            f"{len(SPECIAL_TOKENS)} (8000 to 30000 is typical)."
        )


def learning_threshold(word_counts: list[tuple[str, int]], vocab_size: int) -> int:
    """The count of the ``vocab_size``-th most frequent of ``word_counts`` (at least 1):
    the threshold :func:`vocab_from_counts` runs the learner at. Reserved words are the
    caller's to leave out first.

    Examples:
        >>> learning_threshold([("a", 9), ("b", 4), ("c", 4), ("d", 1)], 2)
        4
        >>> learning_threshold([("a", 9)], 30)
        9
    """
    frequencies = sorted((n for _, n in word_counts), reverse=True)
    return max(1, frequencies[min(vocab_size, len(frequencies)) - 1])


def vocab_from_counts(counts: dict[str, int], vocab_size: int, progress: bool = False) -> list[str]:
    """A WordPiece vocabulary of at most ``vocab_size`` tokens from word counts (with
    ``progress``, a line on stderr says what is chosen from what, with the time elapsed
    while it runs, and another how long it took: this step runs in one process, a minute
    or two for a million distinct words).

    The WordPiece learner (:func:`wordpiece_pieces`) runs once, at the count of the
    ``vocab_size``-th most frequent word (where its vocabulary is at least that large:
    every word that frequent is a token), and its pieces are kept by count. A binary
    search over thresholds (tensorflow-text's learner's own) would run it about six times
    for a vocabulary of the same kind.

    Raises:
        InputDataError: if there are no words.
        ConfigError: if ``vocab_size`` is too small to hold the special tokens.

    Examples:
        >>> vocab_from_counts({"low": 5, "lower": 2, "newest": 6}, 40)[:6]
        ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'e']
    """
    check_vocab_size(vocab_size)
    word_counts = [(w, n) for w, n in counts.items() if w not in SPECIAL_TOKENS]
    if not word_counts:
        raise InputDataError(
            "The corpus has no words to learn a vocabulary from; pass non-empty UTF-8 text files."
        )
    threshold = learning_threshold(word_counts, vocab_size)
    start = time.perf_counter()
    said = (
        f"Learning a WordPiece vocabulary of up to {vocab_size:,} tokens from "
        f"{len(word_counts):,} distinct words ({sum(n for _, n in word_counts):,} in all) ..."
    )
    with _elapsed(said) if progress else contextlib.nullcontext():
        vocab = wordpiece_pieces(word_counts, threshold, SPECIAL_TOKENS)
    # Reserved tokens, every character alone and as a word's continuation (``##c``, which
    # the learner ranks among the pieces: cutting a rare one would turn every word that
    # needs it into [UNK]), then the pieces by count: the rarest go.
    inner = {f"##{c}" for word, _ in word_counts for c in word[1:]}
    learned = vocab[len(SPECIAL_TOKENS) :]
    first = [t for t in learned if len(t) == 1]
    kept = list(dict.fromkeys([*SPECIAL_TOKENS, *first, *sorted(inner), *learned]))
    if progress:
        took = time.perf_counter() - start
        print(f"Learned {min(len(kept), vocab_size):,} tokens in {took:.1f} s.", file=sys.stderr)
    return kept[:vocab_size]


# WordPiece learning's limits (tensorflow-text's learner's defaults).
JOINER = "##"
"""The prefix of a piece that continues a word (``##s`` in ``place ##s``)."""
_ROUNDS = 4  # learning rounds: each re-splits the words with the last round's pieces
_MAX_WORD_CHARS = 50  # longer words are left out (a piece is at most this long)
_MAX_ALPHABET = 1000  # the most frequent characters; words with others are left out
_MAX_WORDS = 5_000_000  # the most frequent words learned from


def wordpiece_pieces(
    word_counts: Sequence[tuple[str, int]], threshold: int, reserved: Sequence[str] = ()
) -> list[str]:
    """WordPiece pieces learned from word counts at one count threshold: ``reserved``,
    then every character, then the pieces by count (ties in alphabetical order). The same
    vocabulary as tensorflow-text's learner (``wordpiece_tokenizer_learner_lib.learn``
    with ``upper_thresh = lower_thresh = threshold`` and its other defaults), in a
    fraction of its time.

    Words longer than 50 characters, reserved words, words with a character outside the
    1,000 most frequent ones and all but the 5,000,000 most frequent words are left out.
    Then four rounds, each splitting every word into pieces (the first at every
    character; later ones greedily, longest piece first, with the last round's pieces; a
    word that cannot be split sits the round out) and keeping every piece that counts at
    least ``threshold``, where a word counts for the pieces that start at one of its
    splits and run to its end (``##`` when they start inside it); every character, alone
    and as ``##c``, is kept too. That is what the learner keeps: it counts every
    substring that starts at a split, then takes from each the (already reduced) counts
    of the longer substrings it begins, which leaves each the count of the words it ends.
    Counting those alone takes a step per split of a word instead of one per substring.

    Examples:
        >>> wordpiece_pieces([("low", 5), ("lower", 2), ("newest", 6)], 5, ["[UNK]"])[:12]
        ['[UNK]', 'e', 'l', 'n', 'o', 'r', 's', 't', 'w', 'newest', 'low', '##e']
    """
    excluded = set(reserved)
    words = [(w, n) for w, n in word_counts if len(w) <= _MAX_WORD_CHARS and w not in excluded]
    by_char: collections.Counter = collections.Counter()
    for word, n in words:
        for char, k in collections.Counter(word).items():
            by_char[char] += k * n
    alphabet = set(sorted(by_char, key=lambda c: (-by_char[c], c))[:_MAX_ALPHABET])
    words.sort(key=lambda wn: wn[1], reverse=True)  # stable: the input order breaks ties
    if len(alphabet) < len(by_char):
        words = [(w, n) for w, n in words if alphabet.issuperset(w)]
    words = words[:_MAX_WORDS]
    chars = {c for word, _ in words for c in word}
    pieces: dict[str, int] = {}
    for first in [True] + [False] * (_ROUNDS - 1):
        longest = max(map(len, pieces), default=0)  # no piece is longer
        counts: collections.defaultdict = collections.defaultdict(int)
        for word, n in words:
            starts = range(len(word)) if first else _piece_starts(word, pieces, longest)
            for start in starts or ():
                counts[JOINER + word[start:] if start else word] += n
        pieces = {piece: n for piece, n in counts.items() if n >= threshold}
        for char in chars:
            pieces.setdefault(char, 1)
            pieces.setdefault(JOINER + char, 1)
    ranked = sorted(pieces, key=lambda piece: (-pieces[piece], piece))
    return list(dict.fromkeys([*reserved, *sorted(chars), *ranked]))


def _piece_starts(word: str, pieces: dict[str, int], longest: int) -> list[int] | None:
    """Where ``word``'s pieces start when split greedily, longest piece first (None if
    some part of it is no piece); ``longest`` bounds a piece's length."""
    starts, start = [], 0
    while start < len(word):
        end = min(len(word), start + longest)
        while end > start and ((JOINER if start else "") + word[start:end]) not in pieces:
            end -= 1
        if end == start:
            return None
        starts.append(start)
        start = end
    return starts
