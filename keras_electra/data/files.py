"""Resolving and checking the corpus files a user passes."""

from __future__ import annotations

import codecs
import glob
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from keras_electra.errors import ConfigError, InputDataError
from keras_electra.limits import MAX_TEXT_CHARS

PathsLike = str | os.PathLike | Sequence[str | os.PathLike]


MAX_LINE_CHARS = MAX_TEXT_CHARS
"""Longest line read from a corpus, in characters; longer lines are cut (any file trains).
The export cuts a text it scores at the same length (:mod:`keras_electra.limits`)."""

TEXT_SAMPLE_BYTES = 64 * 1024
"""How much of each corpus file :func:`not_text_share` looks at (its beginning)."""

MAX_NOT_TEXT_SHARE = 0.1
"""The share of undecodable bytes and control characters above which a corpus file is not
text: real text has almost none (an accented letter of a Latin-1 file is one, a few in a
hundred), random bytes about half, a UTF-16 file half (its NUL bytes)."""

WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
"""The characters a blank line (a document's end) may hold: Python's whitespace
(``str.isspace``, what ``str.strip()`` removes), as google-research/electra's
``build_pretraining_dataset`` tells a blank line (``line.strip()``): besides ASCII's, the
no-break space U+00A0, the ideographic space U+3000, the em space U+2003 and the like."""

# The pipeline's blank line (RE2, on valid UTF-8), and the ASCII part of WHITESPACE as bytes.
_BLANK_RE2 = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]*"
_ASCII_WHITESPACE = "".join(c for c in WHITESPACE if c < "\x80").encode("ascii")

# Control characters other than whitespace (tab, newline, vertical tab, form feed, return),
# C1 controls, and the replacement character a byte that is not UTF-8 decodes to.
_NOT_TEXT = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffd]")


def clean_lines(batch):
    """A batch of raw ``tf.string`` lines cut to :data:`MAX_LINE_CHARS` characters, with
    invalid UTF-8 replaced by U+FFFD: what the vocabulary learner, the pretraining
    pipeline and the export's encoder (:func:`keras_electra.encoding.encode_texts`) read.

    Examples:
        >>> import tensorflow as tf
        >>> clean_lines(tf.constant([b"caf\\xe9"])).numpy()[0].decode("utf-8")
        'caf\ufffd'
    """
    import tensorflow as tf

    batch = tf.strings.substr(batch, 0, 4 * MAX_LINE_CHARS)  # bytes first: cheap
    batch = tf.strings.unicode_transcode(batch, "UTF-8", "UTF-8", errors="replace")
    return tf.strings.substr(batch, 0, MAX_LINE_CHARS, unit="UTF8_CHAR")


def tokenize_batch(tokenizer, batch):
    """A batch of raw lines as the pipeline reads them: ``(ids, blank)``, the lines cut to
    :data:`MAX_LINE_CHARS` characters with invalid UTF-8 replaced, tokenized, and whether
    each is blank (:data:`WHITESPACE` only: a document's end, as :func:`is_blank_line`
    tells it): what the ``tf.data`` pipeline and the TFRecord writers tokenize
    (``tokenizer``: an :class:`~keras_electra.data.tokenizer.ElectraTokenizer`)."""
    import tensorflow as tf

    batch = clean_lines(batch)
    blank = tf.strings.regex_full_match(batch, _BLANK_RE2)
    return tokenizer.tokenize(batch), blank


def is_blank_line(line: bytes) -> bool:
    """Whether a raw line (bytes, its line end or not) is blank as :func:`tokenize_batch`
    tells it, a document's end: its first :data:`MAX_LINE_CHARS` characters (the line the
    pipeline keeps, :func:`clean_lines`) are all :data:`WHITESPACE`. The shard planner
    (:func:`~keras_electra.data.tfrecords.plan_shards`) cuts the corpus where this says, so
    shards begin where the pipeline's documents do.

    Examples:
        >>> is_blank_line(b" \\t\\r\\n"), is_blank_line(b" a")
        (True, False)
        >>> is_blank_line("\\u00a0\\u3000\\n".encode())  # no-break, ideographic spaces
        True
    """
    rest = line.lstrip(_ASCII_WHITESPACE)
    if not rest:
        return True
    if rest[0] < 0x80 and len(line) - len(rest) < MAX_LINE_CHARS:
        return False  # an ASCII character other than whitespace, within the kept line
    text = line[: 4 * MAX_LINE_CHARS].decode("utf-8", "replace")[:MAX_LINE_CHARS]
    return not text.strip(WHITESPACE)


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URL (``gs://bucket/...``) read through ``tf.io.gfile``.

    Examples:
        >>> is_remote("gs://bucket/data"), is_remote("data/sample")
        (True, False)
    """
    return "://" in path


def open_binary(path: str, mode: str = "rb"):
    """``path`` opened to read (or with ``mode="wb"``, write) bytes (a URL through
    ``tf.io.gfile``)."""
    if is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.GFile(path, mode)
    return open(path, mode)


def file_size(path: str) -> int:
    """``path``'s size in bytes (a URL's through ``tf.io.gfile``)."""
    return file_version(path)[0]


def file_version(path: str) -> tuple[int, int]:
    """``path``'s size in bytes and modification time in nanoseconds (``st_mtime_ns``; a
    URL's through ``tf.io.gfile``): what tells an edited file from the one read before."""
    if is_remote(path):
        import tensorflow as tf

        stat = tf.io.gfile.stat(path)
        return int(stat.length), int(stat.mtime_nsec)
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def file_versions(paths: Sequence[str]) -> list[list]:
    """``[path, size, mtime_ns]`` of each file (:func:`file_version`), asked together: each
    is a request on a bucket."""
    with ThreadPoolExecutor(16) as pool:
        return [[p, *v] for p, v in zip(paths, pool.map(file_version, paths), strict=True)]


def real_path(path: str) -> str:
    """A local path as its real absolute path (a URL as it is), so that a file named from
    another directory or through a link is known as the same."""
    return path if is_remote(path) else os.path.realpath(path)


def _listed(directory: str, extension: str, found: list[str]) -> list[str]:
    """``found`` (the ``*{extension}`` files of ``directory``) sorted; raises if empty."""
    if not found:
        raise InputDataError(
            f"Directory '{directory}' has no *{extension} files; "
            f"put the data in *{extension} files or pass the files themselves."
        )
    return sorted(found)


def _matched(pattern: str, found: list[str]) -> list[str]:
    """``found`` (the files ``pattern`` matches) sorted; raises if empty."""
    if not found:
        raise InputDataError(
            f"Pattern '{pattern}' matches no file; check the path and the wildcard."
        )
    return sorted(found)


def _resolve_remote(item: str, extension: str, what: str) -> list[str]:
    """:func:`resolve_files` for one URL: a file, a directory or a glob pattern."""
    from tensorflow.io import gfile

    if glob.has_magic(item):
        return _matched(item, [p for p in gfile.glob(item) if not gfile.isdir(p)])
    if gfile.isdir(item):
        names = gfile.listdir(item)
        found = [item.rstrip("/") + "/" + n for n in names if n.endswith(extension)]
        return _listed(item, extension, found)
    if gfile.exists(item):
        return [item]
    raise InputDataError(
        f"{what} '{item}' does not exist; pass paths to existing files or directories."
    )


def _as_list(paths: PathsLike) -> list[str]:
    if isinstance(paths, str | os.PathLike):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def resolve_files(paths: PathsLike, extension: str, what: str) -> list[str]:
    """Expands paths into a list of existing files.

    Each path may be a file, a directory (its ``*{extension}`` files, sorted, are used)
    or a glob pattern, local or a URL such as ``gs://bucket/dir`` (read through
    ``tf.io.gfile``).

    Args:
        paths: one path or a sequence of paths.
        extension: the extension to look for in directories, e.g. ``".txt"``.
        what: how to name the files in errors, e.g. ``"Corpus file"``.

    Returns:
        The files, in the order given (each directory's and pattern's files sorted), each
        once: a file that several paths or patterns match is read at its first place.

    Raises:
        InputDataError: if no path is given, a path does not exist, or a directory or
            pattern matches no file.

    Examples:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> _ = open(os.path.join(d, "a.txt"), "w").write("Hi.\\n")
        >>> [os.path.basename(p) for p in resolve_files(d, ".txt", "Corpus file")]
        ['a.txt']
    """
    items = _as_list(paths)
    if not items:
        raise InputDataError(f"No {what.lower()} was given; pass at least one path.")
    resolved: list[str] = []
    for item in items:
        if is_remote(item):
            resolved.extend(_resolve_remote(item, extension, what))
        elif os.path.isdir(item):
            found = [os.path.join(item, n) for n in os.listdir(item) if n.endswith(extension)]
            resolved.extend(_listed(item, extension, [p for p in found if os.path.isfile(p)]))
        elif os.path.isfile(item):
            resolved.append(item)
        elif glob.has_magic(item):
            resolved.extend(_matched(item, [p for p in glob.glob(item) if os.path.isfile(p)]))
        else:
            raise InputDataError(
                f"{what} '{item}' does not exist; pass paths to existing files or directories."
            )
    return _once(resolved)


def _once(files: list[str]) -> list[str]:
    """``files`` with each file once, at its first place: overlapping paths and patterns
    (``corpus/`` and ``corpus/*.txt``, or a link to a file given too) would read a file
    twice, weighting its text double.

    Examples:
        >>> _once(["a.txt", "b.txt", "./a.txt", "a.txt"])
        ['a.txt', 'b.txt']
    """
    seen: set[str] = set()
    kept = []
    for name in files:
        key = real_path(name)
        if key not in seen:
            seen.add(key)
            kept.append(name)
    return kept


def resolve_corpus_files(paths: PathsLike, what: str = "Corpus file") -> list[str]:
    """Expands corpus paths (files, directories of ``*.txt`` files, glob patterns).

    Args:
        paths: one path or a sequence of paths.
        what: how errors name a file (``"Validation file"`` for ``--validation``).

    Returns:
        The text files, in order.

    Raises:
        InputDataError: if a path is missing or a directory has no ``*.txt`` file.

    Examples:
        >>> resolve_corpus_files("missing.txt")
        Traceback (most recent call last):
        ...
        keras_electra.errors.InputDataError: Corpus file 'missing.txt' does not exist; \
pass paths to existing UTF-8 text files or directories.
    """
    check_corpus_paths_exist(paths, what)
    return resolve_files(_as_list(paths), ".txt", what)


def left_out_note(paths: PathsLike) -> str | None:
    """One line naming what the corpus's local directories hold besides the ``*.txt``
    files read from them (other files, sub-folders), or None: a directory is read one
    level deep, its ``*.txt`` files only.

    Examples:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> for name in ("a.txt", "b.txt.gz", "c.json"):
        ...     _ = open(os.path.join(d, name), "w").write("Hi.\\n")
        >>> os.mkdir(os.path.join(d, "more"))
        >>> print(left_out_note([d]).replace(d, "DIR")[:74])
        Read 1 *.txt file of 'DIR'; left out: b.txt.gz, c.json and the folder more
    """
    for item in _as_list(paths):
        if is_remote(item) or not os.path.isdir(item):
            continue
        names = sorted(os.listdir(item))
        read = [n for n in names if n.endswith(".txt") and os.path.isfile(os.path.join(item, n))]
        files = [n for n in names if n not in read and os.path.isfile(os.path.join(item, n))]
        folders = [f"the folder {n}" for n in names if os.path.isdir(os.path.join(item, n))]
        others = [*files, *folders]
        if not read or not others:
            continue
        shown = ", ".join(others[:-1]) + " and " + others[-1] if len(others) > 1 else others[0]
        if len(others) > 6:
            shown = ", ".join(others[:5]) + f" and {len(others) - 5} more"
        return (
            f"Read {len(read)} *.txt file{'s' * (len(read) != 1)} of '{item}'; left out: "
            f"{shown} (a directory is read one level deep, its *.txt files only: pass "
            "others by path or wildcard)."
        )
    return None


def check_corpus_paths_exist(paths: PathsLike, what: str = "Corpus file") -> None:
    """Raises :class:`InputDataError` for the first local path that does not exist (not a
    glob pattern or a URL), in the words of :func:`resolve_corpus_files`. Needs no
    TensorFlow: ``keras-electra`` checks its ``--corpus`` with it before loading
    TensorFlow, so a mistyped path is one sentence at once.

    Examples:
        >>> check_corpus_paths_exist(["data/*.txt", "gs://bucket/corpus"])  # not checked
    """
    for item in _as_list(paths):
        if not (os.path.exists(item) or glob.has_magic(item) or is_remote(item)):
            raise InputDataError(
                f"{what} '{item}' does not exist; "
                "pass paths to existing UTF-8 text files or directories."
            )


def check_output_outside_corpus(paths: PathsLike, output: str | os.PathLike, command: str) -> None:
    """Raises :class:`ConfigError` when ``output`` is a directory the corpus is read from
    (a ``--corpus`` directory, or a pattern's): the ``vocab.txt`` written there would be
    read as corpus text by the next run on that corpus, or on resume.

    Examples:
        >>> check_output_outside_corpus(["data/sample"], "runs/demo", "pretrain")
    """
    if is_remote(os.fspath(output)):
        return
    out = os.path.realpath(output)
    for item in _as_list(paths):
        if is_remote(item):
            continue
        folder = item if os.path.isdir(item) else None
        if folder is None and glob.has_magic(item):
            folder = os.path.dirname(item) or "."
        elif folder is None and os.path.realpath(os.path.dirname(item) or ".") == out:
            raise ConfigError(  # a shell's expansion of a pattern: the next one reads vocab.txt
                f"--output '{output}' holds the corpus file '{item}': the vocab.txt {command} "
                "writes there would be read as corpus text by the same pattern next time; "
                "choose another --output."
            )
        if folder is not None and os.path.realpath(folder) == out:
            raise ConfigError(
                f"--output '{output}' is where '{item}' reads its *.txt files: the vocab.txt "
                f"{command} writes there would be read as corpus text; choose another --output."
            )


def not_text_share(data: bytes) -> float:
    """The share of ``data``'s characters that are not text: bytes that do not decode as
    UTF-8, and control characters other than whitespace.

    Examples:
        >>> not_text_share("Ünïcödé text\\n".encode()), not_text_share(b"\\x00\\xff ab")
        (0.0, 0.4)
    """
    text = data.decode("utf-8", "replace")
    return len(_NOT_TEXT.findall(text)) / len(text) if text else 0.0


def legacy_byte(data: bytes) -> int | None:
    """The offset of the first byte of ``data`` (a file's beginning) that is not UTF-8, if
    ``data`` reads as text in an 8-bit legacy encoding (Latin-1, Windows-1252): such a
    byte, and no character beyond ASCII that is UTF-8. None for UTF-8 text, ASCII, and
    UTF-8 with a few stray bytes (those become U+FFFD). A character cut at the end of
    ``data`` does not count.

    Examples:
        >>> legacy_byte("Le café\\n".encode("latin-1")), legacy_byte("Le café\\n".encode())
        (6, None)
        >>> legacy_byte("café, \\xff".encode() + b"\\xe9")  # UTF-8 with a stray byte
    """
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
        return None
    except UnicodeDecodeError as error:
        first = error.start
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)
    return None if any("\x7f" < c != "\ufffd" for c in text) else first


def check_text_files(files: Sequence[str], what: str = "Corpus file") -> None:
    """Raises if a local file's beginning (:data:`TEXT_SAMPLE_BYTES`) is mostly not text
    (:data:`MAX_NOT_TEXT_SHARE`): a binary file, or text in another encoding, would train
    on a vocabulary of garbage without a word; or if it is text in a legacy 8-bit encoding
    (:func:`legacy_byte`), whose accented letters would all train as U+FFFD.

    Raises:
        InputDataError: one sentence naming the file, what is wrong and the fix.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.bin")
        >>> _ = open(path, "wb").write(bytes(range(256)) * 4)
        >>> check_text_files([path])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        keras_electra.errors.InputDataError: Corpus file '...a.bin' is not text: 61% of ...
    """
    for path in files:
        if is_remote(path):
            continue
        with open(path, "rb") as f:
            data = f.read(TEXT_SAMPLE_BYTES)
        for magic, compressed, command in _COMPRESSED:
            if magic.match(data):
                raise InputDataError(
                    f"{what} '{path}' is {compressed}-compressed, not text; decompress it "
                    f"first ({command} '{path}') and pass the text file."
                )
        share = not_text_share(data)
        if share > MAX_NOT_TEXT_SHARE:
            raise InputDataError(
                f"{what} '{path}' is not text: {share:.0%} of its first "
                f"{TEXT_SAMPLE_BYTES // 1024} KiB are bytes that are not UTF-8 or control "
                "characters (real text has almost none); pass UTF-8 text files (convert "
                "others with iconv), or TFRecords from `keras-electra prepare`."
            )
        at = legacy_byte(data)
        if at is not None:
            line = data[:at].count(b"\n") + 1
            raise InputDataError(
                f"{what} '{path}' is not UTF-8 but a legacy 8-bit encoding such as "
                f"Latin-1: line {line} has the byte {_byte(data, at)}, and none of its first "
                f"{TEXT_SAMPLE_BYTES // 1024} KiB is UTF-8 beyond ASCII; convert it (`iconv "
                f"-f WINDOWS-1252 -t UTF-8 '{path}' > converted.txt`) and pass the converted file."
            )
        _check_later_parts(path, what)


def _byte(data: bytes, at: int) -> str:
    """``data[at]`` as a message shows it: ``0xE9 ('é' in Windows-1252)``."""
    letter = data[at : at + 1].decode("cp1252", "replace")
    return f"0x{data[at]:02X}" + (f" ('{letter}' in Windows-1252)" if letter.isprintable() else "")


def _check_later_parts(path: str, what: str) -> None:
    """:func:`legacy_byte` on a file's middle and end too (a sample each, from a line's
    start): a corpus joined from sources, one of them in Latin-1 past the first
    :data:`TEXT_SAMPLE_BYTES`, trained its accented letters as U+FFFD without a word."""
    size = os.path.getsize(path)
    if size <= 2 * TEXT_SAMPLE_BYTES:
        return
    with open(path, "rb") as f:
        for start in (size // 2, size - TEXT_SAMPLE_BYTES):
            f.seek(start)
            data = f.read(TEXT_SAMPLE_BYTES)
            skip = data.find(b"\n") + 1  # 0 where there is none: a line's middle, kept
            at = legacy_byte(data[skip:])
            if at is None:
                continue
            raise InputDataError(
                f"{what} '{path}' is not all UTF-8: at byte {start + skip + at:,} it has the "
                f"byte {_byte(data, skip + at)}, in a part with no UTF-8 beyond ASCII (text in "
                "a legacy 8-bit encoding such as Latin-1, joined to the rest); convert that "
                "part (`iconv -f WINDOWS-1252 -t UTF-8`) before joining, and pass the result."
            )


# Compressed files' first bytes (bzip2's: "BZh", the block size, then pi's digits), and the
# command that gives back their text.
_COMPRESSED = (
    (re.compile(rb"\x1f\x8b"), "gzip", "gunzip -k"),
    (re.compile(rb"BZh[1-9]1AY&SY"), "bzip2", "bunzip2 -k"),
    (re.compile(rb"\xfd7zXZ\x00"), "xz", "unxz -k"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd", "unzstd"),
)


def check_corpus_has_text(files: Sequence[str], what: str = "Corpus file") -> None:
    """Raises if a file is mostly not text (:func:`check_text_files`), or no file has a
    non-blank line (reads only until the first one).

    Args:
        files: resolved text files.
        what: how errors name a file; the files together are "the corpus" for the
            default, else the text of ``what``'s first word (``--validation``'s).

    Raises:
        InputDataError: if a file is not text, or every line of every file is blank.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> _ = open(path, "w").write("Hi.\\n")
        >>> check_corpus_has_text([path])
    """
    check_text_files(files, what)
    whole = "The corpus" if what == "Corpus file" else f"The {what.split()[0].lower()} text"
    shown = ", ".join(f"'{p}'" for p in files[:3]) + (" ..." if len(files) > 3 else "")
    if all(not is_remote(p) and os.path.getsize(p) == 0 for p in files):
        raise InputDataError(
            f"{whole} ({shown}) is empty (0 bytes); pass UTF-8 text files with one "
            "sentence per line."
        )
    for path in files:
        if is_remote(path):
            return  # read when packed: a URL's text is not fetched twice
        with open(path, "rb") as f:
            for line in f:
                if not is_blank_line(line):
                    return
    raise InputDataError(
        f"{whole} ({shown}) has no text, only blank lines; "
        "pass UTF-8 text files with one sentence per line."
    )
