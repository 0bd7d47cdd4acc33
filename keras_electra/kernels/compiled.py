"""Compiled training kernels: ``kernels.cc`` built once per machine, loaded as TF custom ops.

The same loops as XLA's fused kernels, vectorized by the C++ compiler, run about twice as
fast (benchmarks/measurements.md). :func:`kernels` compiles ``kernels.cc`` with ``$CXX`` (else
``g++``) against the installed TensorFlow on first use, into
``$KERAS_ELECTRA_CACHE/kernels`` (default ``~/.cache/keras_electra``) keyed by everything
the build reads (the source's content and its place in the package, flags, TensorFlow's
version and build flags, the compiler's path and ``--version``, this CPU for
``-march=native``), and loads it. Where that cannot happen
(no compiler, not Linux, a GPU or TPU, an unsafe cache, a refused library, a failed
build) it returns None, with one warning for the last three, and training takes the XLA
kernels (:mod:`keras_electra.kernels`), which compute the same values. A build writes a
temporary file and renames it into place, under a lock, so processes building at once
never load a partial library.

Loading a library runs its code, so what is loaded must be the library this user built:

- The cache is the user's alone: the directories :func:`kernels` creates are private
  (mode 0o700), and it builds into or loads from ``<root>/kernels/<hash>/kernels.so`` only
  if the root (symbolic links resolved), the ``kernels`` and ``<hash>`` directories are
  this user's (effective uid), not writable by group or others, and not symbolic links,
  and no folder above the root is another user's (root's is fine) or writable by group or
  others without the sticky bit (``/tmp`` is fine); else another local user could plant
  a library there.
- The library is opened once, without following a symbolic link (``O_NOFOLLOW``), and
  the open file is checked (``fstat``: a regular file, this user's, not writable by group
  or others) and read: its SHA-256 must be the one recorded when it was built
  (``kernels.so.sha256``), so a stale, truncated or foreign library is refused. That same
  open file is loaded (``/proc/self/fd/N``): a path swapped between the check and the load
  is never loaded, and is refused when the path no longer names the file loaded. A
  library that loads without one of the ops of ``kernels.cc`` is refused too.

A refusal warns once (naming the path, the reason and the fix) and training keeps the
XLA kernels. A library without a recorded digest (built by an older keras-electra) is
built again.

Examples:
    >>> ops = kernels()  # doctest: +SKIP
    >>> ops is None or hasattr(ops, "electra_add_layer_norm")  # doctest: +SKIP
    True
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import tensorflow as tf

from keras_electra import internals

SOURCE = Path(__file__).with_name("kernels.cc")
# -fno-math-errno: sqrt without errno's branch, so the loops that take one vectorize.
_FLAGS = "-shared -fPIC -O3 -march=native -mprefer-vector-width=512 -fopenmp-simd".split()
# -U__AVX512FP16__: on CPUs with AVX512-FP16 (Sapphire Rapids and later) -march=native turns
# on Eigen's half-precision packet code, whose header in TensorFlow 2.21 does not compile
# with g++ 12; the kernels use no float16, and the compiler may still emit the instructions.
_FLAGS += ["-fno-math-errno", "-w", "-U__AVX512FP16__"]

log = logging.getLogger(__name__)
# The op module loaded in this process: TensorFlow registers an op once, so a second
# library defining it (another cache directory) would load as an empty module.
_LOADED: list = []


def cache_root() -> Path:
    """Where built kernels are kept: ``kernels`` in ``$KERAS_ELECTRA_CACHE`` or
    ``~/.cache/keras_electra``, symbolic links resolved."""
    root = os.environ.get("KERAS_ELECTRA_CACHE") or os.path.join("~", ".cache", "keras_electra")
    return Path(root).expanduser().resolve() / "kernels"


def _cpu_signature() -> str:
    """This CPU's model and feature flags (``-march=native`` code runs only on its kind)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    wanted = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(wanted)))


def _compiler() -> str | None:  # the C++ compiler's path ($CXX, else g++), or None
    return shutil.which(os.environ.get("CXX") or "g++")


@functools.cache
def _compiler_version(compiler: str) -> str:
    """What ``compiler --version`` prints (empty where it cannot run)."""
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout + done.stderr


def _tf_flags() -> list[str]:  # the flags that build against the installed TensorFlow
    return tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()


def library_path(compiler: str) -> Path:
    """Where :func:`kernels` keeps the library ``compiler`` builds: ``<hash>/kernels.so``
    in :func:`cache_root`, the hash covering every input of the build. The source's
    folder and name (``kernels/kernels.cc``) count with its content: the library names
    the file it was built from in its error messages, and a library built from the
    source's former place (``layers/kernels.cc``) is never loaded for this one."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    parts = ["/".join(SOURCE.parts[-2:]), *_FLAGS, tf.__version__, *_tf_flags(), compiler]
    parts.append(_compiler_version(compiler))
    digest.update("\0".join([*parts, _cpu_signature()]).encode())
    return cache_root() / digest.hexdigest()[:16] / "kernels.so"


def digest_path(library: Path) -> Path:
    """Where the SHA-256 of ``library``, recorded when it was built, is kept."""
    return library.with_name(library.name + ".sha256")


@functools.cache
def expected_ops() -> tuple[str, ...]:
    """The Python names of the ops ``kernels.cc`` registers (``electra_add_layer_norm``,
    ...): what a loaded library must provide."""
    names = re.findall(r'REGISTER_OP\("(\w+)"\)', SOURCE.read_text(encoding="utf-8"))
    return tuple(re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() for name in names)


class _Refused(Exception):
    """Why the library must not be used (``reason``) and what to do (``fix``)."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


_PRIVATE_FIX = (
    "make the cache yours alone (chmod 700) or set KERAS_ELECTRA_CACHE to a private directory"
)


def _rebuild_fix(library: Path) -> str:
    return f"remove {library.parent} to build it again, or set KERAS_ELECTRA_CACHE elsewhere"


def _make_private(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each with mode 0o700."""
    for missing in reversed([d for d in (directory, *directory.parents) if not d.exists()]):
        missing.mkdir(mode=0o700, exist_ok=True)


def _unsafe_above(root: Path) -> str | None:
    """Why a folder above the cache root would let another user replace what is below
    it, or None: each must be this user's or root's, and writable by group or others only
    with the sticky bit (``/tmp``)."""
    for path in root.parents:
        info = os.lstat(path)
        if info.st_uid not in (0, os.geteuid()):
            return (
                f"{path} belongs to uid {info.st_uid}, neither this user ({os.geteuid()}) nor root"
            )
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if shared and not info.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(info.st_mode)
            return f"{path} is writable by group or others without the sticky bit (mode {mode:o})"
    return None


def _unsafe(library: Path) -> str | None:
    """Why ``library`` must be neither built nor loaded, or None: the folders above the
    cache root (:func:`_unsafe_above`), and the cache root, the ``kernels`` and ``<hash>``
    directories, each this user's, not writable by group or others, and not a symbolic
    link."""
    root = library.parents[2]
    for path in [root, library.parents[1], library.parent]:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            return f"{path} is a symbolic link"
        if info.st_uid != os.geteuid():
            return f"{path} belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return _unsafe_above(root)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` itself (builds and checks never interleave)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _sha256(fd: int) -> str:
    """The SHA-256 of the open file ``fd``'s content."""
    digest, offset = hashlib.sha256(), 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _open_checked(path: Path, fix: str) -> tuple[int, os.stat_result]:
    """``path`` opened read-only without following a symbolic link, and its open file's
    ``fstat``, which must show a regular file of this user's that group and others cannot
    write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _Refused(f"{path} is a symbolic link", fix) from None
        raise
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = f"{path} is not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"{path} belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    if problem:
        os.close(fd)
        raise _Refused(problem, fix)
    return fd, info


def _open_verified(library: Path) -> tuple[int, os.stat_result]:
    """The library opened and checked (:func:`_open_checked`), its content the one whose
    SHA-256 was recorded when it was built."""
    fix = _rebuild_fix(library)
    record, _ = _open_checked(digest_path(library), fix)
    try:
        recorded = os.pread(record, 256, 0).decode("ascii", "replace").strip()
    finally:
        os.close(record)
    fd, info = _open_checked(library, fix)
    if _sha256(fd) != recorded:
        os.close(fd)
        raise _Refused(
            f"{library} is not the library built there (its SHA-256 differs from the one "
            "recorded at build time: stale, truncated or replaced)",
            fix,
        )
    return fd, info


def _load(fd: int, info: os.stat_result, library: Path):
    """Loads the open, verified file ``fd`` (not the path, which may name another file by
    now) and checks that the path still names it and that every op is there."""
    module = tf.load_op_library(f"/proc/self/fd/{fd}")
    now = os.lstat(library) if os.path.lexists(library) else None
    if now is None or (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
        raise _Refused(f"{library} was replaced while it was being loaded", _rebuild_fix(library))
    missing = [name for name in expected_ops() if not hasattr(module, name)]
    if missing:
        raise _Refused(
            f"{library} loads without the op {missing[0]} ({len(missing)} of "
            f"{len(expected_ops())} missing)",
            _rebuild_fix(library),
        )
    return module


def _build(compiler: str, library: Path) -> None:
    """Compile ``kernels.cc`` into ``library`` (written under a temporary name, renamed)
    and record its SHA-256 next to it (:func:`digest_path`)."""
    handle, partial = tempfile.mkstemp(suffix=".so", dir=library.parent)
    os.close(handle)
    try:
        command = [compiler, *_FLAGS, str(SOURCE), "-o", partial, *_tf_flags()]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
        os.chmod(partial, 0o700)  # the linker recreates it under the umask
        fd = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            digest = _sha256(fd)
        finally:
            os.close(fd)
        with tempfile.NamedTemporaryFile("w", dir=library.parent, delete=False) as record:
            record.write(digest + "\n")  # created 0600
        os.replace(record.name, digest_path(library))
        os.replace(partial, library)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def kernels():
    """The compiled kernels' op module (``electra_add_layer_norm``, ``electra_bias_gelu``,
    ``electra_attention_probs``, ``electra_softmax_xent``, each with its ``_grad``,
    ``electra_split_heads`` and ``electra_merge_heads``, ``electra_dropout``,
    ``electra_inverse_cdf`` and ``electra_apply_adam_w``), built on first use; None where they
    cannot be built or should not be used (see the module docstring and :func:`status`)."""
    return status()[0]


def _warn_refused(library: Path, reason: str, fix: str) -> None:
    log.warning(
        "keras-electra's compiled training kernels are not loaded from %s, so training uses "
        "the XLA kernels (the same values, slower): %s; %s.",
        library,
        reason,
        fix,
    )


@functools.cache
def status() -> tuple:
    """``(op module, where it comes from)``, or ``(None, why it cannot be used)``; found
    once per process (``status.cache_clear()`` looks again)."""
    if not sys.platform.startswith("linux"):
        return None, "they are built on Linux only"
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        return None, "a GPU or TPU is present, whose kernels are XLA's"
    compiler = _compiler()
    if compiler is None:
        return None, f"there is no C++ compiler ({os.environ.get('CXX') or 'g++'})"
    library = None
    try:
        library = library_path(compiler)
        _make_private(library.parent)
        unsafe = _unsafe(library)
        if unsafe:
            _warn_refused(library, f"{unsafe}, so another user could have written it", _PRIVATE_FIX)
            return None, f"the kernel cache is not private ({unsafe})"
        with _locked(library.parent):
            if not (os.path.lexists(library) and os.path.lexists(digest_path(library))):
                log.info("Compiling keras-electra's training kernels once, into %s", library.parent)
                _build(compiler, library)
            fd, info = _open_verified(library)
        try:
            if not _LOADED:
                _LOADED.append(_load(fd, info, library))
        finally:
            os.close(fd)
        return _LOADED[0], f"{library}, built for this CPU"
    except _Refused as refused:
        _warn_refused(library, refused.reason, refused.fix)
        return None, f"the library was refused ({refused.reason})"
    except (OSError, RuntimeError, subprocess.SubprocessError, tf.errors.OpError) as error:
        detail = getattr(error, "stderr", None) or str(error)
        detail = detail.strip().splitlines()[-1][:300] if detail.strip() else type(error).__name__
        log.warning(
            "keras-electra's compiled training kernels could not be built or loaded, so "
            "training uses the XLA kernels (the same values, slower): %s",
            detail,
        )
        return None, f"their build or load failed ({detail})"


def _in_xla_function() -> bool:
    """Whether the graph being traced is compiled by XLA as a whole (``jit_compile``),
    which cannot take a custom op (tests/test_compiled_kernels.py checks it)."""
    return internals.in_xla_context()


def ops_for(*dtypes):
    """:func:`kernels` where they take these dtypes (bfloat16 or float32, all alike) and
    the graph being traced is not XLA-compiled as a whole (``--xla``, ``jit_compile``),
    else None: the ``native`` kernels (:mod:`keras_electra.kernels.native`) then take the
    ``xla`` or ``reference`` ones."""
    if len(set(dtypes)) != 1 or dtypes[0] not in (tf.bfloat16, tf.float32) or _in_xla_function():
        return None
    return kernels()
