"""The training operations' kernels: one interface, three backends, one table per process.

Each training operation (:class:`~keras_electra.kernels.interface.Kernels`: dropout +
residual + LayerNorm, bias + GELU and its matmul form, the attention's query/key/value
split and its softmax + dropout + product by the values, dropout, the masked-LM loss with
its sampler, the inverse-CDF search, AdamW's update, the projections' 2-D matmuls) has
three implementations side by side:

- ``reference`` (:mod:`keras_electra.kernels.reference`): TensorFlow's and Keras' own
  ops, as Keras' layers call them: the specification, the only path of inference and
  export, and the oracle of ``tests/test_kernel_conformance.py``;
- ``xla`` (:mod:`keras_electra.kernels.xla`): custom-gradient kernels XLA fuses;
- ``native`` (:mod:`keras_electra.kernels.native`): compiled C++ ops
  (:mod:`keras_electra.kernels.compiled`), about twice as fast; an operation they cannot
  take (float16, mixed dtypes, a graph XLA compiles whole: ``--xla``, ``jit_compile``)
  runs on the ``xla`` kernels, decided inside the ``native`` functions, per call.

Which backend trains is decided once per process, here (:func:`choose`):
``KERAS_ELECTRA_KERNELS`` (``reference``, ``xla`` or ``native``), else ``native`` where
the compiled library loads and ``xla`` elsewhere (docs/pretraining.md). A backend asked
for that cannot run here says why, once, and training takes the one below it.
:func:`choose` is what a run prints and records in ``run.json``. Layers, the losses and
the optimizer ask :func:`table` for the kernels and call them; no code outside this
package asks which backend it is.

``KERAS_ELECTRA_COMPILED_KERNELS=0`` (the switch before ``KERAS_ELECTRA_KERNELS``) is
deprecated: it means ``KERAS_ELECTRA_KERNELS=xla`` where that is unset, and says so.

Examples:
    >>> table(training=False).name
    'reference'
    >>> choose().backend in BACKENDS
    True
"""

from __future__ import annotations

import functools
import logging
import os
from typing import NamedTuple

from keras_electra.errors import ConfigError
from keras_electra.kernels import compiled, native, reference, xla
from keras_electra.kernels.interface import Kernels

ENV = "KERAS_ELECTRA_KERNELS"
DEPRECATED_ENV = "KERAS_ELECTRA_COMPILED_KERNELS"  # "0": KERAS_ELECTRA_KERNELS=xla
BACKENDS = ("reference", "xla", "native")
_TABLES = {kernels.name: kernels for kernels in (reference.KERNELS, xla.KERNELS, native.KERNELS)}

__all__ = [
    "BACKENDS",
    "ENV",
    "Choice",
    "Kernels",
    "choose",
    "clear",
    "implementation",
    "requested",
    "table",
]

log = logging.getLogger(__name__)


class Choice(NamedTuple):
    """The backend training uses, and why."""

    backend: str
    reason: str

    def describe(self) -> str:
        """One line for a run's output: ``Training kernels: native (...)``."""
        return f"Training kernels: {self.backend} ({self.reason})"


def _asked() -> tuple[str | None, str]:
    """``(backend asked for, the setting that asked)``, or ``(None, "")``."""
    asked = os.environ.get(ENV, "").strip().lower()
    if asked and asked not in BACKENDS:
        raise ConfigError(
            f"{ENV}={os.environ[ENV]!r} is not a kernel backend: set it to reference, xla "
            "or native, or unset it to let keras-electra choose."
        )
    if asked:
        return asked, f"{ENV}={asked}"
    if os.environ.get(DEPRECATED_ENV, "").strip() == "0":
        return "xla", f"{DEPRECATED_ENV}=0, deprecated: {ENV}=xla"
    return None, ""


def requested() -> str | None:
    """The backend asked for, checked (one of :data:`BACKENDS`): ``KERAS_ELECTRA_KERNELS``,
    else ``xla`` for the deprecated ``KERAS_ELECTRA_COMPILED_KERNELS=0``, else None."""
    return _asked()[0]


def choose() -> Choice:
    """The backend for this process's training graphs, and the reason."""
    return _choose(*_asked(), os.environ.get(DEPRECATED_ENV))


@functools.cache
def _choose(asked: str | None, setting: str, deprecated: str | None) -> Choice:
    if deprecated is not None:
        log.warning(
            f"{DEPRECATED_ENV} is deprecated: {ENV} chooses the training kernels, and "
            f"{DEPRECATED_ENV}=0 is {ENV}=xla; unset {DEPRECATED_ENV}."
        )
    if asked in ("reference", "xla"):
        return Choice(asked, setting)
    ops, why = compiled.status()
    if ops is not None:
        return Choice("native", setting if asked else f"compiled C++: {why}")
    if asked == "native":
        log.warning(
            f"{ENV}=native, but the compiled kernels cannot run here ({why}): training uses "
            "the XLA kernels."
        )
    return Choice("xla", f"the compiled C++ kernels cannot run here: {why}")


def clear() -> None:
    """Choose again (after the environment or the kernel cache changed: tests)."""
    _choose.cache_clear()
    compiled.status.cache_clear()


def implementation(name: str) -> Kernels:
    """The backend ``name`` (one of :data:`BACKENDS`), whatever this process chose: tests
    and benchmarks compare them."""
    return _TABLES[name]


def table(training=True) -> Kernels:
    """The kernels a graph being traced calls: this process's backend (:func:`choose`)
    in training, the ``reference`` one elsewhere (inference, export, scoring), so neither
    an XLA kernel nor a compiled op reaches a SavedModel."""
    return _TABLES[choose().backend] if training else reference.KERNELS
