"""The WordPiece tokenizer used for pretraining and inside exported SavedModels."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from keras_electra.data.vocab import SPECIAL_TOKENS, load_vocab, validate_vocab
from keras_electra.errors import InputDataError

MAX_BYTES_PER_WORD = 100
"""Words longer than this many UTF-8 bytes become ``[UNK]``."""


def _special_id(token: str) -> property:
    """A read-only property: the id of the special ``token``."""
    return property(lambda self: self._special_ids[token], doc=f"The id of ``{token}``.")


class ElectraTokenizer(tf.Module):
    """BERT-style WordPiece tokenizer built on tensorflow-text's ``FastBertTokenizer``.

    Text is transcoded to valid UTF-8 (bad bytes become U+FFFD), control characters
    become spaces, text is optionally lower-cased with accents stripped, split on
    whitespace and punctuation, and each word is split into the longest vocabulary
    pieces (``##`` marks a continuation). Words that cannot be split, or are longer
    than :data:`MAX_BYTES_PER_WORD` bytes, become ``[UNK]``.

    The tokenizer is a ``tf.Module`` using only ops that TF Serving links
    (``FastBertNormalize``, ``FastWordpieceTokenizeWithOffsets``, ``UnicodeTranscode``,
    ``GatherV2``), so it can be saved with ``tf.saved_model.save`` and called inside
    ``tf.function`` and ``tf.data`` graphs.

    Args:
        vocab: the WordPiece vocabulary, one token per id (see :func:`load_vocab`).
        lowercase: lower-case and strip accents; must match how the vocabulary was made.

    Raises:
        InputDataError: if the vocabulary lacks a special token, has duplicates, or has
            no word pieces.

    Examples:
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "!"]
        >>> tokenizer = ElectraTokenizer(vocab)
        >>> tokenizer.tokenize(tf.constant(["Hello World!"])).to_list()
        [[5, 6, 7]]
    """

    def __init__(self, vocab: Sequence[str], lowercase: bool = True) -> None:
        super().__init__(name="electra_tokenizer")
        if isinstance(vocab, str | bytes | os.PathLike):  # else its characters as tokens
            raise InputDataError(
                f"ElectraTokenizer takes the vocabulary's tokens, not a file name ({vocab!s}); "
                "use ElectraTokenizer.from_vocab_file(path)."
            )
        tokens = [str(t) for t in vocab]
        validate_vocab(tokens)
        # Plain Python values are kept out of tf.Module's attribute tracking.
        self._config = {"vocab": tuple(tokens), "lowercase": bool(lowercase)}
        self._special_ids = {token: tokens.index(token) for token in SPECIAL_TOKENS}
        try:
            self._fast_bert = tf_text.FastBertTokenizer(
                vocab=tokens,
                suffix_indicator="##",
                max_bytes_per_word=MAX_BYTES_PER_WORD,
                token_out_type=tf.int32,
                unknown_token="[UNK]",
                lower_case_nfd_strip_accents=bool(lowercase),
            )
        except RuntimeError as e:
            raise InputDataError(
                f"The vocabulary cannot build a WordPiece tokenizer ({e}); "
                "use a vocabulary with word pieces besides the special tokens."
            ) from None
        self._id_to_token = tf.constant(tokens, dtype=tf.string)

    @classmethod
    def from_vocab_file(cls, path: str, lowercase: bool = True) -> ElectraTokenizer:
        """Builds a tokenizer from a BERT-format ``vocab.txt``.

        Args:
            path: the vocabulary file (see :func:`load_vocab`).
            lowercase: lower-case and strip accents (``True`` for uncased vocabularies).

        Returns:
            The tokenizer.

        Examples:
            >>> import tempfile
            >>> from keras_electra.data.vocab import save_vocab
            >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
            >>> save_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"], path)
            >>> ElectraTokenizer.from_vocab_file(path).vocab_size
            6
        """
        return cls(load_vocab(os.fspath(path)), lowercase=lowercase)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ElectraTokenizer:
        """Rebuilds a tokenizer from :meth:`get_config`'s output.

        Args:
            config: a dict with ``vocab`` and ``lowercase``.

        Returns:
            The tokenizer.

        Examples:
            >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
            >>> ElectraTokenizer.from_config(t.get_config()).vocab_size
            6
        """
        return cls(config["vocab"], lowercase=config.get("lowercase", True))

    def get_config(self) -> dict[str, Any]:
        """Returns ``{"vocab": [...], "lowercase": bool}``, JSON-serializable.

        Examples:
            >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
            >>> t.get_config()["lowercase"]
            True
        """
        return {"vocab": list(self._config["vocab"]), "lowercase": self._config["lowercase"]}

    @property
    def vocab(self) -> list[str]:
        """The vocabulary, one token per id."""
        return list(self._config["vocab"])

    @property
    def vocab_size(self) -> int:
        """The number of tokens in the vocabulary."""
        return len(self._config["vocab"])

    @property
    def lowercase(self) -> bool:
        """Whether text is lower-cased and stripped of accents."""
        return self._config["lowercase"]

    pad_id = _special_id("[PAD]")
    unk_id = _special_id("[UNK]")
    cls_id = _special_id("[CLS]")
    sep_id = _special_id("[SEP]")
    mask_id = _special_id("[MASK]")

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Splits strings into word-piece ids.

        Args:
            text: a string tensor of shape ``[N]`` (any UTF-8, invalid bytes are replaced).

        Returns:
            An int32 ``tf.RaggedTensor`` of shape ``[N, None]``.

        Examples:
            >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##able"]
            >>> ElectraTokenizer(vocab).tokenize(tf.constant(["Unable x"])).to_list()
            [[5, 6, 1]]
        """
        text = tf.convert_to_tensor(text, dtype=tf.string)
        text = tf.strings.unicode_transcode(
            text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        return self._fast_bert.tokenize(text)

    def detokenize_ids(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor | tf.RaggedTensor:
        """Maps ids to their token strings (ids outside the vocabulary give ``[UNK]``).

        Args:
            ids: an integer tensor or ragged tensor of any shape.

        Returns:
            A string tensor (ragged if ``ids`` is) of the same shape.

        Examples:
            >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
            >>> t.detokenize_ids(tf.constant([2, 4, 99])).numpy().tolist()
            [b'[CLS]', b'[MASK]', b'[UNK]']
        """

        def lookup(flat: tf.Tensor) -> tf.Tensor:
            flat = tf.cast(flat, tf.int32)
            valid = (flat >= 0) & (flat < self.vocab_size)
            flat = tf.where(valid, flat, tf.constant(self.unk_id, tf.int32))
            return tf.gather(self._id_to_token, flat)

        if isinstance(ids, tf.RaggedTensor):
            return tf.ragged.map_flat_values(lookup, ids)
        return lookup(tf.convert_to_tensor(ids))

    def __repr__(self) -> str:
        return f"ElectraTokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase})"


UNKNOWN_WARNING_SHARE = 0.05
"""The share of ``[UNK]`` word pieces from which :func:`unknown_warning` speaks: a
vocabulary learned from the corpus leaves well under 1%."""


def corpus_warnings(
    tokenizer: ElectraTokenizer,
    files: Sequence[str],
    max_seq_length: int,
    sample_bytes: int = 1 << 20,
) -> list[str]:
    """One-line warnings on the corpus's first ``sample_bytes`` (its first files, whole
    lines), tokenized: ``[UNK]`` is :data:`UNKNOWN_WARNING_SHARE` or more of its word
    pieces (the vocabulary does not cover the text, and pretraining learns little from
    it), or as large a share of them is past what packing keeps of a line (a line is a
    sentence, of which one example of ``max_seq_length`` keeps ``max_seq_length - 3``
    pieces: a corpus of a document per line loses most of its text).

    Examples:
        >>> import tempfile
        >>> path = tempfile.mkstemp(suffix=".txt")[1]
        >>> _ = open(path, "w").write("the cat sat\\nzebra quokka yak\\n")
        >>> t = ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"])
        >>> print(corpus_warnings(t, [path], 128)[0][:60])
        Warning: 66.7% of the corpus's word pieces are [UNK] (in its
    """
    lines: list[str] = []
    left = sample_bytes
    for path in files:
        if left <= 0:
            break
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read(left)
        left -= len(data)
        text = data.decode("utf-8", "replace").split("\n")
        lines += text[:-1] if left <= 0 and len(text) > 1 else text  # a cut last line dropped
    lines = [line for line in lines if line.strip()]
    if not lines:
        return []
    pieces = tokenizer.tokenize(tf.constant(lines))
    ids = pieces.flat_values.numpy()
    per_line = pieces.row_lengths().numpy()
    sample = f"in its first {sample_bytes / 2**20:g} MB"
    warnings = []
    share = float((ids == tokenizer.unk_id).mean()) if ids.size else 0.0
    if share >= UNKNOWN_WARNING_SHARE:
        warnings.append(
            f"Warning: {share:.1%} of the corpus's word pieces are [UNK] ({sample}), so the "
            "vocabulary does not cover its text: a --vocab-size too small, or a vocab.txt "
            "made for other text or casing; pretraining learns little from [UNK]."
        )
    kept = max_seq_length - 3
    dropped = float(np.maximum(per_line - kept, 0).sum() / max(per_line.sum(), 1))
    if dropped >= UNKNOWN_WARNING_SHARE:
        warnings.append(
            f"Warning: {dropped:.0%} of the corpus's word pieces ({sample}) are past the "
            f"{kept} that an example of --max-seq-length {max_seq_length} keeps of a line, "
            "and are dropped: packing reads each line as a sentence and a blank line as "
            "the end of a document; split the text into sentences, one per line."
        )
    return warnings
