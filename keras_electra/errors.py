"""User-facing errors.

Every error a user can cause (a bad path, bad text, a wrong config) is raised as
an :class:`ElectraError` whose message is one sentence naming the problem and the
fix. The command line prints that sentence and exits with status 2 instead of a
traceback.

A run stopped by SIGTERM or SIGINT is not an error: it raises
:class:`TrainingInterrupted` after saving a checkpoint, and the command line
exits with :data:`INTERRUPTED_EXIT_CODE`.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

# Exit status of a run stopped by SIGTERM/SIGINT after saving a checkpoint (EX_TEMPFAIL:
# "try again later"); running the same command again resumes at the saved step.
INTERRUPTED_EXIT_CODE = 75


class ElectraError(Exception):
    """An error caused by user input, with a one-sentence message."""


class InputDataError(ElectraError):
    """A corpus, vocabulary or data file cannot be used."""


class ConfigError(ElectraError):
    """A configuration is invalid or does not match a checkpoint."""


class BackendError(ElectraError, ImportError):
    """Keras runs another backend than TensorFlow in this process (raised on import)."""


class StorageError(ElectraError):
    """A file of a run could not be written or read (no space, permissions, removed)."""


class TrainingDiverged(ElectraError):
    """A training step's loss or gradient norm was not finite."""


class TrainingInterrupted(Exception):  # noqa: N818 - a stop, not a failure
    """A run stopped on SIGTERM or SIGINT after saving a checkpoint at ``step``.

    Not an :class:`ElectraError`: nothing is wrong, and the same call resumes.
    """

    def __init__(self, message: str, step: int, signal_name: str):
        super().__init__(message)
        self.step = step
        self.signal_name = signal_name


def parse_json(text: str, what: str, fix: str, error: type[ElectraError] | None = None) -> Any:
    """``text``'s JSON value, or ``error`` (:class:`ConfigError` by default) in one
    sentence: "{what} is not valid JSON ({why}[, line N]); {fix}."

    Examples:
        >>> parse_json('{"a": 1}', "The file", "fix it")
        {'a': 1}
        >>> parse_json('{"a": ', "Line 3", "write one object per line")
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: Line 3 is not valid JSON (Expecting value); write \
one object per line.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        line = f", line {e.lineno}" if "\n" in text.strip() else ""
        raise (error or ConfigError)(f"{what} is not valid JSON ({e.msg}{line}); {fix}.") from None


def read_json(path: str | Path, fix: str, missing: Any = ..., error=None) -> dict:
    """The JSON object in the file ``path`` (``missing`` where there is no such file, if
    given), or one sentence naming the file and ``fix`` (:func:`parse_json`)."""
    path = Path(path)
    if missing is not ... and not path.is_file():
        return missing
    error = error or ConfigError
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error(f"'{path}' is not UTF-8 text; {fix}.") from None
    value = parse_json(text, f"'{path}'", fix, error)
    if not isinstance(value, dict):
        raise error(f"'{path}' holds JSON but not an object of names to values; {fix}.")
    return value


_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.ENOENT: "the directory was removed",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "a file is there, not a folder",
}
# TensorFlow's file errors carry no errno: these words of their messages stand for one.
_MARKERS = (
    ("no space left", errno.ENOSPC),
    ("quota", errno.EDQUOT),
    ("read-only", errno.EROFS),
    ("permission denied", errno.EACCES),
    ("not a directory", errno.ENOTDIR),
    ("not found", errno.ENOENT),
    ("no such file", errno.ENOENT),
)


def _storage_errno(error: BaseException) -> int | None:
    if isinstance(error, OSError) and error.errno in _REASONS:
        return error.errno
    text = str(error).lower()
    return next((code for marker, code in _MARKERS if marker in text), None)


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of ``error``'s message (its type's name for an empty one), cut to
    ``limit`` characters: a library's error inside one of ours."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:limit]


def storage_reason(error: BaseException) -> str:
    """A short reason for an ``OSError`` or a TensorFlow file error ("no space left ...")."""
    if (code := _storage_errno(error)) is not None:
        return _REASONS[code]
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[:1].lower() + error.strerror[1:]
    return str(error).strip().splitlines()[-1][:200] if str(error).strip() else type(error).__name__


def storage_remedy(error: BaseException, where: str | os.PathLike) -> str:
    """What to do about a failed write at ``where``, for the reason :func:`storage_reason`
    gives: free space for a full disk, permissions for a refused one, a writable mount
    for a read-only file system, another path for one through a file, the directory back
    for a removed one.

    Examples:
        >>> storage_remedy(OSError(errno.ENOSPC, "No space left on device"), "runs/a")
        "free space on the disk that holds 'runs/a'"
        >>> storage_remedy(OSError(errno.ENOTDIR, "Not a directory"), "notes.txt/run")
        "pass another path than 'notes.txt/run', whose every part is a folder"
    """
    code = _storage_errno(error)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on the disk that holds '{where}'"
    if code in (errno.EACCES, errno.EPERM):
        return f"fix the permissions of '{where}'"
    if code == errno.EROFS:
        return f"remount the file system that holds '{where}' writable"
    if code in (errno.ENOTDIR, errno.EEXIST):
        return f"pass another path than '{where}', whose every part is a folder"
    if code == errno.ENOENT:
        return f"put '{where}' back (a dropped network mount looks the same)"
    return f"free space or fix the permissions of '{where}'"


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes on the file system holding ``path`` (or its nearest existing parent)."""
    path = os.path.abspath(os.fspath(path))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def format_bytes(size: float) -> str:
    """``1536`` -> ``'1.5 KB'``: sizes in messages."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"
