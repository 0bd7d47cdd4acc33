"""The ``native`` backend: the compiled C++ kernels (``kernels.cc``, built and loaded by
:mod:`keras_electra.layers.compiled`), and the ``xla`` ones where those cannot run.

The same loops as the XLA kernels, vectorized by the C++ compiler, about twice as fast
(benchmarks/measurements.md); the same math and hashed dropout draws, outputs within one
rounding step of XLA's. A compiled op takes bfloat16 or float32 tensors, all of one
dtype, in a graph TensorFlow runs op by op: float16 tensors, mixed dtypes and graphs XLA
compiles whole (``--xla``, ``jit_compile``, which cannot hold a custom op) take the
``xla`` kernels instead. That is decided here, per call (and per direction: a backward
pass asks again), by :func:`_ops`; callers never see it.
"""

from __future__ import annotations

import tensorflow as tf

from keras_electra.kernels import xla
from keras_electra.kernels.interface import Kernels
from keras_electra.layers import compiled


def _ops(*dtypes):
    """The compiled op module where it takes tensors of these dtypes in the graph being
    traced, else None: the call is the ``xla`` backend's."""
    return compiled.ops_for(*dtypes)


# === bias + GELU ===


def _gelu_forward(h, bias):
    ops = _ops(h.dtype)
    if ops is None:
        return xla.gelu_forward(h, bias)
    return ops.electra_bias_gelu(h, tf.cast(bias, tf.float32))


def _gelu_backward(h, bias, upstream, with_output=False):
    """``(dh, dbias)``, with ``with_output`` also ``gelu(h + bias)``, which the compiled
    kernel takes from the gradient's erf in the same pass."""
    ops = _ops(h.dtype, upstream.dtype)
    if ops is None:
        return xla.gelu_backward(h, bias, upstream, with_output)
    dh, dbias, y = ops.electra_bias_gelu_grad(
        h, tf.cast(bias, tf.float32), upstream, with_output=with_output
    )
    dbias = tf.cast(dbias, bias.dtype)
    return (dh, dbias, y) if with_output else (dh, dbias)


def bias_gelu(h: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """Exact (erf) ``gelu(h + bias)``: one compiled kernel per direction."""
    return xla.bias_gelu_with(_gelu_forward, _gelu_backward, h, bias)


def bias_gelu_matmul(h: tf.Tensor, bias: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """``gelu(h + bias) @ kernel``; the gradient kernel recomputes GELU's output from
    ``h`` (kept anyway) in the pass that computes its gradient."""
    return xla.bias_gelu_matmul_with(_gelu_forward, _gelu_backward, h, bias, kernel)


KERNELS = Kernels(name="native", bias_gelu=bias_gelu, bias_gelu_matmul=bias_gelu_matmul)
