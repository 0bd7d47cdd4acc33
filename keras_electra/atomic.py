"""Whole-file writes that a kill cannot leave half done.

Run, fine-tuning and export directories are read back by resumed runs, by
``keras-electra report`` while a run is going, and by TF Serving: a file there is
either the old one or the new one, never a prefix. :func:`write_atomic` writes a
sibling temporary file and renames it over the target (atomic on POSIX file
systems); a failed write removes the temporary file and re-raises.
:func:`staged_directory` does the same for a directory written as a whole (a converted
model). :func:`check_writable` says, before anything is written, whether a directory can be.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from keras_electra.errors import ConfigError, StorageError

_KERNEL_FILE_SYSTEMS = {"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "securityfs"}


def _kernel_file_system(path: Path) -> str | None:
    """The type of the kernel's virtual file system ``path`` is on (``/proc``, ``/sys``),
    per ``/proc/self/mounts``; None elsewhere or where that file is missing."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            mounts = [line.split()[1:3] for line in f if len(line.split()) > 2]
    except OSError:
        return None
    text = str(path.resolve())
    under = [
        (point, kind) for point, kind in mounts if (text + "/").startswith(point.rstrip("/") + "/")
    ]
    kind = max(under, key=lambda mount: len(mount[0]), default=("", None))[1]
    return kind if kind in _KERNEL_FILE_SYSTEMS else None


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Replace ``path``'s contents with ``text`` (UTF-8 if a str) in one rename; return the path.

    Examples:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "state.json"
        >>> write_atomic(target, "{}\\n").read_text()
        '{}\\n'
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(text) if isinstance(text, bytes) else tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, value, indent: int | None = 2) -> Path:
    """:func:`write_atomic` of ``value`` as JSON and a final newline."""
    return write_atomic(path, json.dumps(value, indent=indent) + "\n")


@contextlib.contextmanager
def staged_directory(output: str | Path) -> Iterator[Path]:
    """A new directory to fill that becomes ``output`` only if the block ends without an
    error: it is a hidden sibling (``.NAME.partial-*``), renamed to ``output`` at the end
    (an empty ``output`` is replaced). An error, a full disk or Ctrl-C leaves ``output`` as
    it was, so the same command can run again; a kill leaves only the sibling.

    Examples:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp()) / "model"
        >>> with staged_directory(out) as partial:
        ...     _ = (partial / "a.txt").write_text("a")
        ...     out.exists()
        False
        >>> sorted(p.name for p in out.iterdir())
        ['a.txt']
    """
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    try:
        yield partial
        if output.is_dir():
            output.rmdir()  # empty, as the caller checked (else OSError: nothing is lost)
        os.replace(partial, output)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def check_writable(directory: str | Path, flag: str = "--output") -> None:
    """Raise :class:`~keras_electra.errors.StorageError` (one sentence naming ``flag``)
    unless ``directory`` can be written: it is a directory this user can write, or the
    nearest folder above it that exists is one (so it can be created). Writes nothing;
    a URL (``gs://...``) is left to the write itself.

    Examples:
        >>> import tempfile
        >>> a_file = tempfile.mkstemp()[1]
        >>> check_writable(a_file + "/run")
        Traceback (most recent call last):
        ...
        keras_electra.errors.StorageError: Cannot write --output '.../run': '...' is a file, \
not a folder; pass a path whose every part is a folder.
        >>> check_writable("")  # it would be the current folder
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: --output is empty; pass the directory to write.
    """
    if not str(directory).strip():
        raise ConfigError(f"{flag} is empty; pass the directory to write.")
    if "://" in str(directory):
        return
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise StorageError(f"{flag} '{path}' is a file; pass a directory.")
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    shown = existing if path.is_absolute() else os.path.relpath(existing)
    if kind := _kernel_file_system(existing):
        raise StorageError(  # root passes os.access there, but no folder can be made
            f"Cannot write {flag} '{path}': '{shown}' is on the kernel's {kind} file system, "
            "where files cannot be made; pass a directory on a disk."
        )
    if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
        return
    if not existing.is_dir():
        raise StorageError(
            f"Cannot write {flag} '{path}': '{shown}' is a file, not a folder; pass a path "
            "whose every part is a folder."
        )
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        raise StorageError(
            f"Cannot write {flag} '{path}': '{shown}' is on a read-only file system; remount "
            "it writable or pass a directory on another."
        )
    raise StorageError(
        f"Cannot write {flag} '{path}': '{shown}' is not a folder you can write to; pass a "
        "directory you can write, or fix its permissions."
    )


@contextlib.contextmanager
def held_directory(directory: str | Path) -> Iterator[None]:
    """Hold the existing local ``directory`` while this process writes into it: another
    keras-electra process that asks for it (a ``pretrain``, ``finetune`` or ``prepare``
    given the same ``--output``) stops in one sentence instead of writing the same files.
    An advisory ``flock`` on the directory itself, released when the process ends however
    it ends (nothing to clean up after a kill). Where there is no ``fcntl``, or the file
    system cannot lock a directory (NFS emulates ``flock`` with locks that need a file
    open for writing: ``EBADF``), nothing is held.

    Raises:
        ConfigError: another process holds it.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock
        yield
        return
    import fcntl

    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"Another keras-electra process is writing into '{directory}'; wait for it "
                "to end or stop it, or choose another --output."
            ) from None
        except OSError:  # no locks on this file system: the run goes on unguarded
            pass
        yield
    finally:
        os.close(fd)
