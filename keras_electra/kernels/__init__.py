"""The training operations' kernels: one interface, three backends, one table per process.

Each training operation (:class:`~keras_electra.kernels.interface.Kernels`) has three
implementations side by side:

- ``reference`` (:mod:`keras_electra.kernels.reference`): TensorFlow's and Keras' own
  ops, the specification, the only path of inference and export;
- ``xla`` (:mod:`keras_electra.kernels.xla`): custom-gradient kernels XLA fuses;
- ``native`` (:mod:`keras_electra.kernels.native`): compiled C++ ops, and the ``xla``
  kernels for what those cannot take (float16, graphs XLA compiles whole).

Which backend trains is decided once per process
(:func:`keras_electra.layers.backend.choose`: ``KERAS_ELECTRA_KERNELS``, else ``native``
where the compiled library loads, else ``xla``). Layers ask :func:`table` for it and
call its functions; no code outside this package asks which backend it is.

Examples:
    >>> table(training=False).name
    'reference'
    >>> table().name in ("reference", "xla", "native")
    True
"""

from __future__ import annotations

from keras_electra.kernels import native, reference, xla
from keras_electra.kernels.interface import Kernels
from keras_electra.layers import backend

_BACKENDS = {kernels.name: kernels for kernels in (reference.KERNELS, xla.KERNELS, native.KERNELS)}

__all__ = ["Kernels", "implementation", "table"]


def implementation(name: str) -> Kernels:
    """The backend ``name`` (``reference``, ``xla`` or ``native``), whatever this process
    chose (tests compare them)."""
    return _BACKENDS[name]


def table(training=True) -> Kernels:
    """The kernels a graph being traced calls: this process's backend in training, the
    ``reference`` one elsewhere (inference, export, scoring), so neither an XLA kernel
    nor a compiled op reaches a SavedModel."""
    return _BACKENDS[backend.choose().backend] if training else reference.KERNELS
