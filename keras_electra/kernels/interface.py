"""The interface each kernel backend implements: one function per training operation.

A backend is one :class:`Kernels` value, built once in its module
(:data:`keras_electra.kernels.reference.KERNELS`, ``xla.KERNELS``, ``native.KERNELS``);
a backend that lacks an operation fails at import, not in a training step. What each
function takes and returns is the same on every backend; what differs is how it is
computed and what it keeps for the backward pass. The values agree within the
tolerances of ``tests/test_kernel_conformance.py``, which holds each operation of each
backend against the math written with TensorFlow's plain ops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Kernels:
    """One backend's training operations.

    Attributes:
        name: ``reference``, ``xla`` or ``native``.
        bias_gelu: ``bias_gelu(h, bias)``: exact (erf) ``gelu(h + bias)``, ``h`` a
            matmul's output ``[..., width]``, ``bias`` ``[width]`` (float32, its
            gradient float32); ``h``'s shape and dtype.
        bias_gelu_matmul: ``bias_gelu_matmul(h, bias, kernel)``: ``gelu(h + bias) @
            kernel`` (the feed-forward block's middle), ``kernel`` ``[width, units]`` in
            ``h``'s dtype; ``[..., units]`` in ``h``'s dtype, no output bias.
        dropout: ``dropout(x, draw)``: ``x`` with the elements a
            :class:`~keras_electra.layers.dropout.DropoutDraw` drops zeroed and the
            others scaled by ``1 / (1 - rate)``; the same draws drop the gradient.
        add_layer_norm: ``add_layer_norm(x, residual, gamma, beta, epsilon, dropout=None,
            bias=None)``: ``LayerNorm(dropout(x + bias) + residual)`` over the last axis,
            ``x`` a sub-layer's output ``[..., width]``, ``residual`` its input,
            ``gamma`` and ``beta`` the LayerNorm's float32 ``[width]`` scale and offset,
            ``dropout`` a :class:`~keras_electra.layers.dropout.DropoutDraw` or None,
            ``bias`` the sub-layer's float32 output bias or None; ``x``'s shape and
            dtype.
    """

    name: str
    bias_gelu: Callable
    bias_gelu_matmul: Callable
    dropout: Callable
    add_layer_norm: Callable
