"""The dense layers' training path (layers/dense.py) against Keras' own call."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import traced_step_ops

from keras_electra.kernels.shared import bias_add
from keras_electra.layers import dense as ours


def _dense(kind: str, dtype: str, module=keras.layers):
    """One of the model's kinds of projection, as Keras' layer or (``module=ours``) ours."""
    if kind == "dense":
        layer = module.Dense(24, activation="gelu", dtype=dtype)
        layer.build((None, None, 16))
        shape = (3, 5, 16)
    elif kind == "query":  # the attention's q/k/v projections
        layer = module.EinsumDense("abc,cde->abde", (None, 3, 8), bias_axes="de", dtype=dtype)
        layer.build((None, 5, 16))
        shape = (3, 5, 16)
    else:  # the attention's output projection
        layer = module.EinsumDense("abcd,cde->abe", (None, 16), bias_axes="e", dtype=dtype)
        layer.build((None, 5, 3, 8))
        shape = (3, 5, 3, 8)
    layer.bias.assign(np.random.default_rng(1).normal(0, 1, layer.bias.shape))
    return layer, shape


def _value_and_gradients(layer, x, upstream, training):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=training)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
    return (y, *tape.gradient(loss, [x, layer.kernel, layer.bias]))


@pytest.mark.parametrize("kind", ["dense", "query", "output"])
def test_fast_dense_takes_keras_values_and_gradients_in_float32(kind):
    layer, shape = _dense(kind, "float32")
    fast, _ = _dense(kind, "float32", ours)
    for a, b in zip(fast.weights, layer.weights, strict=True):
        a.assign(b.numpy())
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(0, 1, shape), tf.float32)
    keras_result = _value_and_gradients(layer, x, 1.0, training=True)
    upstream = tf.constant(rng.normal(0, 1, keras_result[0].shape), tf.float32)
    keras_result = _value_and_gradients(layer, x, upstream, training=True)
    fast_result = _value_and_gradients(fast, x, upstream, training=True)
    # The training path is taken: the traced call has no einsum and no BiasAdd.
    graph = tf.function(lambda x: fast(x, training=True)).get_concrete_function(x).graph
    assert not {op.type for op in graph.get_operations()} & {"Einsum", "BiasAdd"}
    for a, b in zip(fast_result, keras_result, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_bias_gradient_of_a_bfloat16_dense_is_summed_in_float32():
    """4,096 rows of bfloat16 gradient: the bias gradient is the exact sum up to its
    final rounding (Keras' BiasAddGrad accumulates in bfloat16: about 10% off here)."""
    layer = ours.Dense(64, dtype="mixed_bfloat16")
    layer.build((None, 32))
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(0, 1, (4096, 32)), tf.float32)
    upstream = tf.cast(tf.constant(rng.normal(0.01, 1, (4096, 64)), tf.float32), tf.bfloat16)
    with tf.GradientTape() as tape:
        y = layer(x, training=True)
        loss = tf.reduce_sum(tf.cast(y * upstream, tf.float32))
    assert y.dtype == tf.bfloat16
    bias_gradient = tape.gradient(loss, layer.bias).numpy().astype(np.float64)
    exact = tf.cast(upstream, tf.float64).numpy().sum(0)
    assert np.max(np.abs(bias_gradient - exact)) <= 2**-7 * np.max(np.abs(exact))


def test_bias_add_sums_a_constant_gradient_exactly_enough():
    x = tf.zeros([4096, 2], tf.bfloat16)
    bias = tf.zeros([2], tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(bias)
        loss = tf.reduce_sum(tf.cast(bias_add(x, bias), tf.float32) * 0.001)
    # 4,096 x bfloat16(0.001) = 4.098; accumulated in bfloat16 it stops at 0.5.
    np.testing.assert_allclose(tape.gradient(loss, bias).numpy().astype(float), 4.098, rtol=1e-2)


def test_pretraining_step_has_no_bfloat16_bias_add_grad_or_broadcast_projection():
    """Every bias gradient of the mixed_bfloat16 step is summed in float32, and the
    attention's projections are 2-D matmuls (no kernel gradient summed over the batch)."""
    ops = traced_step_ops("mixed_bfloat16")
    bias_grads = [op for op in ops if op.type == "BiasAddGrad"]
    assert not [op.name for op in bias_grads if op.get_attr("T") == tf.bfloat16]
    batch_matmuls = [op for op in ops if op.type == "BatchMatMulV2"]
    projections = [
        op.name
        for op in batch_matmuls
        if "_dense" in op.name or "query" in op.name or "key" in op.name
    ]
    assert not projections, projections[:5]
    # The fast paths ran: the projections as one matmul (the training path's attention),
    # or each its own 2-D one.
    assert any(op.type == "MatMul" and "query" in op.name for op in ops)


def test_no_float16_matmul_feeds_a_bias_directly():
    """Grappler fuses a matmul followed by a bias add into ``_FusedMatMul``, whose
    float16 kernel on CPU was about 500x slower than the two ops (a mixed_float16 step
    of the tiny preset went from 0.15 to 6.1 s): the dense layers' path keeps a reshape
    between them."""
    ops = traced_step_ops("mixed_float16")
    fused_later = [
        op.name
        for op in ops
        if op.type == "MatMul"
        and op.outputs[0].dtype == tf.float16
        and any(c.type in ("BiasAdd", "Add", "AddV2") for c in op.outputs[0].consumers())
    ]
    assert not fused_later, fused_later[:5]
    assert any(op.type == "MatMul" and op.outputs[0].dtype == tf.float16 for op in ops)


def test_the_backward_pass_waits_for_the_bias_gradient():
    """The gradient passed on below a bias comes after the bias's own sum, so the sum
    runs while its input is fresh instead of keeping it alive from a queue."""

    @tf.function
    def grads(x, b):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = tf.reduce_sum(tf.sin(bias_add(x, b)))
        return tape.gradient(y, [x, b])

    x, b = tf.ones([4, 3]), tf.zeros([3])
    graph = grads.get_concrete_function(x, b).graph
    waiting = [
        op
        for op in graph.get_operations()
        if op.type == "Identity" and [c.type for c in op.control_inputs] == ["Sum"]
    ]
    assert len(waiting) == 1
    dx, db = grads(x, b)
    np.testing.assert_allclose(dx.numpy(), np.cos(np.ones([4, 3])), rtol=1e-6)
    np.testing.assert_allclose(db.numpy(), 4 * np.cos(np.ones(3)), rtol=1e-6)
