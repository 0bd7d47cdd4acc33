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
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Kernels:
    """One backend's training operations.

    Attributes:
        name: ``reference``, ``xla`` or ``native``.
        bias_add: ``bias_add(x, bias)``: ``x + bias``, ``bias`` over ``x``'s trailing
            axes, in ``x``'s dtype (a projection's bias outside a kernel).
        dense: ``dense(layer, inputs, contracted, keras_call)``: a ``Dense`` or
            ``EinsumDense`` layer's training call, ``contracted`` the number of the
            input's trailing axes its kernel contracts (None: an equation that is no
            2-D matmul), ``keras_call`` Keras' own call of the layer.
        bias_gelu: ``bias_gelu(h, bias)``: exact (erf) ``gelu(h + bias)``, ``h`` a
            matmul's output ``[..., width]``, ``bias`` ``[width]`` (float32, its
            gradient float32); ``h``'s shape and dtype.
        bias_gelu_matmul: ``bias_gelu_matmul(h, bias, kernel)``: ``gelu(h + bias) @
            kernel`` (the feed-forward block's middle), ``kernel`` ``[width, units]`` in
            ``h``'s dtype; ``[..., units]`` in ``h``'s dtype, no output bias.
        dropout: ``dropout(x, draw)``: ``x`` with the elements a
            :class:`~keras_electra.layers.dropout.DropoutDraw` drops zeroed and the
            others scaled by ``1 / (1 - rate)``; the same draws drop the gradient.
        add_layer_norm: ``add_layer_norm(x, residual, norm, dropout=None, bias=None)``:
            ``norm(dropout(x + bias) + residual)``, ``x`` a sub-layer's output ``[...,
            width]``, ``residual`` its input, ``norm`` a ``keras.layers.LayerNormalization``
            over the last axis (its float32 scale and offset, its epsilon), ``dropout`` a
            :class:`~keras_electra.layers.dropout.DropoutDraw` or None, ``bias`` the
            sub-layer's float32 output bias or None; ``x``'s shape and dtype.
        fuses_attention: ``fuses_attention(dtype)``: whether the attention takes its
            fused way for scores of ``dtype`` (one query/key/value matmul,
            ``split_heads``, ``attention_values``), where that is faster than its
            reference way.
        split_heads: ``split_heads(qkv, bias, heads)``: the query, key and value
            ``[batch, heads, length, dim]`` from one projection ``qkv`` ``[batch,
            length, 3 * heads * dim]`` (the three side by side) plus its ``bias``
            ``[3, heads, dim]``.
        attention_values: ``attention_values(scores, mask, values, dropout=None,
            scale=1.0)``: Keras' masked softmax of ``scale * scores`` over the last
            axis in float32 (masked positions get probability 0, a row masked entirely
            gives zeros), rounded to the scores' dtype, a dropout on it, then the
            product by ``values``; ``scores`` ``[..., T, S]``, ``mask`` boolean
            broadcastable to them (True: attend) or None, ``values`` ``[..., S, D]``;
            ``[..., T, D]`` in the scores' dtype.
        sparse_cross_entropy: ``sparse_cross_entropy(logits, labels, *,
            probabilities=False, uniform=None)``: the masked-LM loss and the
            temperature-1 sampler. Softmax cross-entropy of ``logits`` ``[..., V]``
            (float32 or 16-bit) against int32 ``labels`` ``[...]`` in ``[0, V)``, as
            ``tf.nn.sparse_softmax_cross_entropy_with_logits`` computes it in float32
            (its gradient in the logits' dtype), and the largest logit's class: ``(loss,
            argmax)``, float32 and int32 ``[...]``; then, with ``probabilities``, the
            float32 softmax ``[..., V]`` (no gradient); then, with ``uniform`` (float32
            ``[...]`` draws in [0, 1)), an int32 ``inverse_cdf`` sample per position from
            the same softmax (no gradient), searched in blocks of 128.
        inverse_cdf: ``inverse_cdf(probs, uniform, *, block=128)``: per row of ``probs``
            ``[..., V]`` (non-negative weights, not necessarily summing to 1), the first
            index whose cumulative weight exceeds ``uniform`` ``[...]`` times the row's
            total, up to float32 rounding; ``block`` entries per search block; int32
            ``[...]`` in ``[0, V)``.
        adam_w: ``adam_w(variable, m, v, gradient, scalars, scale=None, decay=None)``:
            Keras' AdamW's dense update of ``variable`` and its moments ``m`` and ``v``
            (variables) from a dense ``gradient`` times ``scale`` (clipping's factor, or
            None), the variable first decayed by ``decay`` (``lr * weight_decay``, or
            None); ``scalars`` are ``ResourceApplyAdam``'s (``lr``, ``beta1``, ``beta2``,
            ``beta1_power``, ``beta2_power``, ``epsilon``) in the variable's dtype.
    """

    name: str
    bias_add: Callable
    dense: Callable
    bias_gelu: Callable
    bias_gelu_matmul: Callable
    dropout: Callable
    add_layer_norm: Callable
    fuses_attention: Callable
    split_heads: Callable
    attention_values: Callable
    sparse_cross_entropy: Callable
    inverse_cdf: Callable
    adam_w: Callable

    @classmethod
    def of(cls, name: str, namespace: dict, **borrowed: Callable) -> Kernels:
        """Backend ``name``'s table: each operation is the function of that name in
        ``namespace`` (the backend module's ``globals()``) unless ``borrowed`` names
        another (one it takes from another backend)."""
        ops = [f.name for f in fields(cls) if f.name != "name"]
        missing = [op for op in ops if op not in borrowed and not callable(namespace.get(op))]
        if missing:
            raise TypeError(f"The {name} kernels lack {', '.join(missing)}.")
        return cls(name=name, **{op: borrowed.get(op) or namespace[op] for op in ops})
