"""Which kernels run the training operations: one policy, decided here.

The training operations (dropout + add + LayerNorm, bias + GELU, the attention's softmax
+ dropout and product by the values, the query/key/value split, the 2-D matmuls, the
masked-LM loss with its sampling, AdamW) each have up to three backends: ``reference``
(TensorFlow's and Keras' own ops: the specification, the only path of inference and
export, and the oracle of ``tests/test_kernel_conformance.py``), ``xla``
(:mod:`keras_electra.layers.fused`) and ``native`` (:mod:`keras_electra.layers.compiled`).
``KERAS_ELECTRA_KERNELS`` chooses, else ``native`` where the compiled library loads and
``xla`` elsewhere (docs/pretraining.md). Within a run, an operation the chosen backend
cannot take runs on the next one down: ``native`` gives float16 tensors, and graphs XLA
compiles whole (``--xla``, ``jit_compile``), to the XLA kernels. A backend asked for
that cannot run here says why, once, and training takes the one below it.
:func:`choose` is what a run prints and records in ``run.json``.

Examples:
    >>> choose().backend in BACKENDS
    True
"""

from __future__ import annotations

import functools
import logging
import os
from typing import NamedTuple

from keras_electra.errors import ConfigError
from keras_electra.layers import compiled

ENV = "KERAS_ELECTRA_KERNELS"
BACKENDS = ("reference", "xla", "native")

log = logging.getLogger(__name__)


class Choice(NamedTuple):
    """The backend training uses, and why."""

    backend: str
    reason: str

    def describe(self) -> str:
        """One line for a run's output: ``Training kernels: native (...)``."""
        return f"Training kernels: {self.backend} ({self.reason})"


def requested() -> str | None:
    """``KERAS_ELECTRA_KERNELS``, checked: one of :data:`BACKENDS`, or None if unset."""
    asked = os.environ.get(ENV, "").strip().lower()
    if not asked:
        return None
    if asked not in BACKENDS:
        raise ConfigError(
            f"{ENV}={os.environ[ENV]!r} is not a kernel backend: set it to reference, xla "
            "or native, or unset it to let keras-electra choose."
        )
    return asked


def choose() -> Choice:
    """The backend for this process's training graphs, and the reason."""
    return _choose(requested(), os.environ.get(compiled.ENABLE))


@functools.cache
def _choose(asked: str | None, enable: str | None) -> Choice:
    if asked in ("reference", "xla"):
        return Choice(asked, f"{ENV}={asked}")
    ops, why = compiled.status()
    if ops is not None:
        return Choice("native", f"{ENV}=native" if asked else f"compiled C++: {why}")
    if asked == "native":
        log.warning(
            f"{ENV}=native, but the compiled kernels cannot run here ({why}): training uses "
            "the XLA kernels."
        )
    return Choice("xla", f"the compiled C++ kernels cannot run here: {why}")


def fast_training() -> bool:
    """Whether training takes the fused kernels (``xla`` or ``native``) rather than the
    reference ops."""
    return choose().backend != "reference"


def native_ops(*dtypes):
    """The compiled kernels' op module for tensors of these dtypes in the graph being
    traced, or None where the ``xla`` kernels run (the backend chosen is not
    ``native``; float16; a graph XLA compiles whole): see
    :func:`keras_electra.layers.compiled.ops_for`."""
    return compiled.ops_for(*dtypes) if choose().backend == "native" else None


def clear() -> None:
    """Choose again (after the environment or the kernel cache changed: tests)."""
    _choose.cache_clear()
    compiled.status.cache_clear()
