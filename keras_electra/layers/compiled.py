"""Compiled training kernels: ``kernels.cc`` built once per machine, loaded as
TensorFlow custom ops.

XLA's CPU code for the fused kernels moves their bytes at 3-7 GB/s on a 2-core Xeon, where
a NumPy add moves 25 GB/s (``benchmarks/kernel_times.py``); the same loops written in C++
and vectorized by the compiler run 1.5-2.3x as fast. :func:`kernels` compiles
``kernels.cc`` with the C++ compiler (``$CXX``, else ``g++``) against the installed
TensorFlow on first use, into a cache directory keyed by the source, TensorFlow's version
and this CPU (``-march=native``), and loads it. Where that cannot happen (no compiler,
not Linux, a GPU or TPU present, ``KERAS_ELECTRA_COMPILED_KERNELS=0``, or the build
fails) it returns None, with one warning if the build failed, and
:mod:`keras_electra.layers.fused` keeps its XLA kernels, which compute the same values.

The cache is ``$KERAS_ELECTRA_CACHE/kernels`` (default ``~/.cache/keras_electra``). A
build writes a temporary file and renames it into place, so processes building at once
(several workers on one machine) never load a partial library.

Examples:
    >>> ops = kernels()  # doctest: +SKIP
    >>> ops is None or hasattr(ops, "electra_add_layer_norm")  # doctest: +SKIP
    True
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tensorflow as tf

SOURCE = Path(__file__).with_name("kernels.cc")
ENABLE = "KERAS_ELECTRA_COMPILED_KERNELS"  # "0" keeps the XLA kernels
_FLAGS = [
    "-shared",
    "-fPIC",
    "-O3",
    "-march=native",
    "-mprefer-vector-width=512",
    "-fopenmp-simd",
    "-fno-math-errno",  # sqrt without errno's branch: the loops that take one vectorize
    "-w",
]

log = logging.getLogger(__name__)
# The op module loaded in this process: TensorFlow registers an op once, so a second
# library defining it (another cache directory) would load as an empty module.
_LOADED: list = []


def cache_root() -> Path:
    """Where built kernels are kept: ``$KERAS_ELECTRA_CACHE`` or ``~/.cache/keras_electra``."""
    root = os.environ.get("KERAS_ELECTRA_CACHE") or os.path.join("~", ".cache", "keras_electra")
    return Path(root).expanduser() / "kernels"


def _cpu_signature() -> str:
    """This CPU's model and feature flags (``-march=native`` code runs only on its kind)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    wanted = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(wanted)))


def _build(compiler: str, library: Path) -> None:
    """Compile ``kernels.cc`` into ``library`` (written under a temporary name, renamed)."""
    library.parent.mkdir(parents=True, exist_ok=True)
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
    handle, partial = tempfile.mkstemp(suffix=".so", dir=library.parent)
    os.close(handle)
    try:
        command = [compiler, *_FLAGS, str(SOURCE), "-o", partial, *flags]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
        os.replace(partial, library)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


@functools.cache
def kernels():
    """The compiled kernels' op module (``electra_add_layer_norm``, ``electra_bias_gelu``,
    ``electra_attention_probs``, ``electra_softmax_xent``, each with its ``_grad``,
    ``electra_split_heads`` and ``electra_merge_heads``, ``electra_dropout``,
    ``electra_inverse_cdf`` and ``electra_apply_adam_w``), built on first use; None where they
    cannot be built or should not be used (see the module docstring)."""
    if os.environ.get(ENABLE, "1") == "0" or not sys.platform.startswith("linux"):
        return None
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        return None  # the accelerators' kernels are XLA's
    compiler = shutil.which(os.environ.get("CXX") or "g++")
    if compiler is None:
        return None
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), tf.__version__.encode(), " ".join(_FLAGS).encode()):
        digest.update(part)
    digest.update(_cpu_signature().encode())
    library = cache_root() / digest.hexdigest()[:16] / "kernels.so"
    try:
        if not library.exists():
            log.info("Compiling keras-electra's training kernels once, into %s", library.parent)
            _build(compiler, library)
        if not _LOADED:
            _LOADED.append(tf.load_op_library(str(library)))
        return _LOADED[0]
    except (OSError, subprocess.SubprocessError, tf.errors.OpError) as error:
        detail = getattr(error, "stderr", None) or str(error)
        log.warning(
            "keras-electra's compiled training kernels could not be built or loaded, so "
            "training uses the XLA kernels (the same values, slower): %s",
            detail.strip().splitlines()[-1][:300] if detail.strip() else type(error).__name__,
        )
        return None


def _in_xla_function() -> bool:
    """Whether the graph being traced is compiled by XLA as a whole (``jit_compile``),
    which cannot take a custom op."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # a TensorFlow without it: assume it may be
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def ops_for(*dtypes):
    """:func:`kernels` where they take these dtypes (bfloat16 or float32, all alike) and
    the graph being traced is not XLA-compiled as a whole (``--xla``, ``jit_compile``),
    else None: the caller uses the XLA kernels (layers/fused.py) or TensorFlow's ops
    (the optimizer's ``ResourceApplyAdam``)."""
    if len(set(dtypes)) != 1 or dtypes[0] not in (tf.bfloat16, tf.float32):
        return None
    if _in_xla_function():
        return None
    return kernels()
