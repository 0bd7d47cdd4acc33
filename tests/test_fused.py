"""The training kernels (keras_electra/kernels/) against Keras' own ops, values and gradients."""

import dataclasses
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import OnFirstUse

from keras_electra import kernels as kernel_tables
from keras_electra.kernels import implementation, table
from keras_electra.layers import encoder as encoder_module
from keras_electra.layers.dropout import DropoutDraw, dropout_key
from keras_electra.layers.encoder import ElectraEncoder

keras_hub = OnFirstUse("keras_hub")


def bias_gelu(h, bias):
    return table().bias_gelu(h, bias)


def bias_gelu_matmul(h, bias, kernel):
    return table().bias_gelu_matmul(h, bias, kernel)


def add_layer_norm(*args):
    return table().add_layer_norm(*args)


def attention_values(*args):
    return table().attention_values(*args)


def sparse_cross_entropy(*args, **options):
    return table().sparse_cross_entropy(*args, **options)


def count_calls(monkeypatch, op: str) -> list:
    """The arguments of each call of ``op`` a training graph makes: the kernels'
    ``table(training=True)``, which the layers ask for, counts them."""
    calls, real = [], kernel_tables.table

    def counting(training=True):
        chosen = real(training)
        if not training:
            return chosen
        run = getattr(chosen, op)
        return dataclasses.replace(chosen, **{op: lambda *a: calls.append(a) or run(*a)})

    monkeypatch.setattr(kernel_tables, "table", counting)
    return calls


def _float64_bias_gelu(h, b):
    z = h.astype(np.float64) + b.astype(np.float64)
    erf = tf.math.erf(z / np.sqrt(2)).numpy()  # in float64
    y = 0.5 * z * (1 + erf)
    dz = 0.5 * (1 + erf) + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    return y, dz


@pytest.mark.parametrize("shape", [(6, 40), (2, 3, 40)])
def test_bias_gelu_matches_keras_dense_gelu_forward_and_backward(shape):
    rng = np.random.default_rng(0)
    h = tf.constant(rng.normal(0, 2, shape), tf.float32)
    b = tf.Variable(rng.normal(0, 1, shape[-1:]), dtype=tf.float32)
    upstream = tf.constant(rng.normal(0, 1, shape), tf.float32)
    results = []
    for fn in (bias_gelu, lambda x, bias: keras.activations.gelu(x + bias)):
        with tf.GradientTape() as tape:
            tape.watch(h)
            y = fn(h, b)
            loss = tf.reduce_sum(y * upstream)
        results.append((y, *tape.gradient(loss, [h, b])))
    for fused, reference in zip(*results, strict=True):
        np.testing.assert_allclose(fused.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)
    assert results[0][0].shape == shape


def test_bias_gelu_in_bfloat16_is_no_worse_than_keras():
    rng = np.random.default_rng(1)
    h32 = rng.normal(0, 2, (512, 64)).astype(np.float32)
    b = tf.constant(rng.normal(0, 1, 64), tf.float32)
    up32 = rng.normal(0, 1, (512, 64)).astype(np.float32)
    h = tf.constant(h32, tf.bfloat16)
    exact_y, exact_dz = _float64_bias_gelu(h.numpy().astype(np.float32), b.numpy())
    exact_db = (tf.cast(tf.constant(up32, tf.bfloat16), tf.float64).numpy() * exact_dz).sum(0)
    errors = []
    for fn in (bias_gelu, lambda x, bias: keras.activations.gelu(x + tf.cast(bias, x.dtype))):
        with tf.GradientTape() as tape:
            tape.watch([h, b])
            y = fn(h, b)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cast(up32, tf.bfloat16).numpy())
        _, db = tape.gradient(loss, [h, b])
        assert y.dtype == tf.bfloat16
        y_err = np.abs(tf.cast(y, tf.float64).numpy() - exact_y).max()
        db_err = np.abs(tf.cast(db, tf.float64).numpy() - exact_db).max()
        errors.append((y_err, db_err))
    (fused_y, fused_db), (keras_y, keras_db) = errors
    assert fused_y <= keras_y * 1.01 and fused_db <= keras_db
    assert fused_y < 0.05


@pytest.mark.parametrize("shape", [(5, 16), (2, 7, 16)])
def test_add_layer_norm_matches_keras_layer_norm_forward_and_backward(shape):
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(3, 2, shape), tf.float32)
    r = tf.constant(rng.normal(0, 1, shape), tf.float32)
    upstream = tf.constant(rng.normal(0, 1, shape), tf.float32)
    norm = keras.layers.LayerNormalization(epsilon=1e-12)
    norm.build(shape)
    norm.gamma.assign(rng.normal(1, 0.1, shape[-1:]))
    norm.beta.assign(rng.normal(0, 0.1, shape[-1:]))
    for fused, reference in zip(*_against_keras_layer_norm(norm, x, r, upstream), strict=True):
        np.testing.assert_allclose(fused, reference, rtol=1e-4, atol=1e-5)


def _against_keras_layer_norm(norm, x, r, upstream) -> list[list[np.ndarray]]:
    """The gradients for x, r, gamma and beta and the output, of the fused add +
    LayerNorm and of Keras' ``norm(x + r)`` (the same weights)."""
    results = []
    for fn in (
        lambda a, b: add_layer_norm(a, b, norm),
        lambda a, b: norm(a + b),
    ):
        with tf.GradientTape() as tape:
            tape.watch([x, r])
            y = fn(x, r)
            loss = tf.reduce_sum(y * upstream)
        grads = tape.gradient(loss, [x, r, norm.gamma, norm.beta])
        results.append([t.numpy() for t in (*grads, y)])
    return results


@pytest.mark.parametrize(
    "normalize_first,dtype",
    [(False, "float32"), (True, "float32"), (False, "mixed_bfloat16")],
)
def test_the_encoder_trains_through_the_fused_path_with_keras_values(
    normalize_first, dtype, monkeypatch
):
    # Dropout 1e-9 keeps every element (its 16-bit threshold rounds to 0, its scale to
    # 1.0) but, being > 0, keeps Keras' attention on its explicit softmax: training
    # (fused kernels) and inference (Keras' ops) compute the same function, and the
    # outputs and every weight's gradient agree.
    encoder = ElectraEncoder(
        16,
        32,
        num_layers=2,
        num_heads=2,
        intermediate_dim=64,
        dropout=1e-9,
        normalize_first=normalize_first,
        dtype=dtype,
    )
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(0, 1, (3, 9, 16)), tf.float32)
    mask = tf.constant(np.arange(9)[None, :] < np.array([[9], [5], [1]]))
    encoder.build(x.shape)
    upstream = tf.constant(rng.normal(0, 1, (3, 9, 32)), tf.float32)
    calls = count_calls(monkeypatch, "add_layer_norm")
    softmax_calls = count_calls(monkeypatch, "attention_values")
    results = []
    for training in (True, False):
        with tf.GradientTape() as tape:
            y = tf.cast(encoder(x, mask, training=training), tf.float32)
            loss = tf.reduce_sum(y * upstream)
        grads = tape.gradient(loss, encoder.trainable_variables)
        results.append([y, *grads])
    assert len(results[0]) == 1 + len(encoder.trainable_variables) > 20
    # Post-LayerNorm training took the fused kernels (two per layer), inference did not;
    # pre-LayerNorm layers keep keras-hub's path.
    assert len(calls) == (0 if normalize_first else 4)
    # The softmax is fused for bfloat16 scores; float32 ones keep TensorFlow's kernel.
    assert len(softmax_calls) == (2 if dtype == "mixed_bfloat16" else 0)
    _assert_same_training(*results, dtype)


def _assert_same_training(fused: list, reference: list, dtype: str) -> None:
    """Outputs and gradients of two training paths agree: closely in float32 (up to
    rounding at each tensor's scale); in bfloat16, where the paths round differently
    (the fused ones add and normalize in float32), each tensor at its own scale, with a
    floor for those that are zero but for rounding (the key bias's gradient: softmax
    ignores a shift)."""
    for a, b in zip(fused, reference, strict=True):
        a, b = a.numpy(), b.numpy()
        if dtype == "float32":
            # Rounding is relative to the tensor's scale: an element 1,000x smaller
            # than its tensor's largest carries the same absolute rounding.
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5 + 1e-6 * np.abs(b).max())
        else:
            scale = np.abs(b).max() + 1e-6
            assert np.abs(a - b).max() <= 0.05 * scale + 1e-4


def _layer_norm(rng, width: int) -> keras.layers.LayerNormalization:
    """A float32 LayerNorm (epsilon 1e-12) with a random scale near 1 and offset near 0."""
    norm = keras.layers.LayerNormalization(epsilon=1e-12)
    norm.build((None, width))
    norm.gamma.assign(rng.normal(1, 0.1, width))
    norm.beta.assign(rng.normal(0, 0.1, width))
    return norm


def _draw(shape, rate, seed):
    return DropoutDraw(dropout_key(tf.constant(seed, tf.int64)), shape, rate)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dropout_inside_add_layer_norm_is_the_mask_of_its_bits(dtype):
    # The fused dropout keeps the elements the same bits keep in Dropout's own mask and
    # scales them by 1 / (1 - rate) (in float32: the bfloat16 mask rounds the scale).
    rng = np.random.default_rng(5)
    shape = (3, 7, 32)
    x = tf.constant(rng.normal(0, 2, shape), dtype)
    r = tf.constant(rng.normal(0, 1, shape), dtype)
    norm = _layer_norm(rng, 32)
    upstream = tf.constant(rng.normal(0, 1, shape), tf.float32)
    draw = _draw(shape, 0.25, [5, 6])
    mask = draw.mask(tf.float32)
    results = []
    for fn in (
        lambda a, b: add_layer_norm(a, b, norm, draw),
        lambda a, b: add_layer_norm(
            tf.cast(tf.cast(a, tf.float32) * mask, tf.float32), tf.cast(b, tf.float32), norm
        ),
    ):
        with tf.GradientTape() as tape:
            tape.watch([x, r])
            y = fn(x, r)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        results.append([tf.cast(t, tf.float32).numpy() for t in (y, *tape.gradient(loss, [x, r]))])
    assert results[0][0].dtype == np.float32 and y.dtype == tf.float32
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for fused, reference in zip(*results, strict=True):
        np.testing.assert_allclose(fused, reference, rtol=tolerance, atol=tolerance)
    # Dropped elements pass no gradient to x; the residual's gradient is everyone's.
    dx = results[0][1]
    dropped = mask.numpy() == 0
    assert 0.15 < dropped.mean() < 0.35 and (dx[dropped] == 0).all() and (dx[~dropped] != 0).all()


@pytest.mark.parametrize("kernels", ["xla", "compiled"])
def test_add_layer_norm_backward_keeps_only_its_output(kernels, monkeypatch):
    """The backward kernel reads the output and the rows' inverse deviations, not the
    sub-layer's output or the residual: the LayerNorm keeps no input alive (XLA's
    kernels and the compiled ones, kernels/kernels.cc)."""
    if kernels == "compiled" and shutil.which("g++") is None:
        pytest.skip("no C++ compiler to build the compiled kernels with")
    backend = implementation("xla" if kernels == "xla" else "native")
    rng = np.random.default_rng(8)
    x = tf.constant(rng.normal(0, 2, (4, 6, 16)), tf.bfloat16)
    r = tf.constant(rng.normal(0, 1, (4, 6, 16)), tf.bfloat16)
    norm = _layer_norm(rng, 16)
    upstream = tf.constant(rng.normal(0, 1, (4, 6, 16)), tf.float32)

    @tf.function
    def run(x, r):
        with tf.GradientTape() as tape:
            tape.watch([x, r])
            y = backend.add_layer_norm(x, r, norm, _draw((4, 6, 16), 0.1, [1, 2]))
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        return tape.gradient(loss, [x, r])

    graph = run.get_concrete_function(x, r).graph
    if kernels == "xla":
        (forward,) = _calls(graph, "add_norm_forward")
        (backward,) = _calls(graph, "add_norm_backward")
    else:
        (forward,) = [op for op in graph.get_operations() if op.type == "ElectraAddLayerNorm"]
        (backward,) = [op for op in graph.get_operations() if op.type == "ElectraAddLayerNormGrad"]
    taken = {t.ref() for t in backward.inputs}
    assert forward.outputs[0].ref() in taken and forward.outputs[1].ref() in taken
    assert not taken & {t.ref() for t in forward.inputs[:2]}  # the rows of x and r


def test_add_layer_norm_gradient_stays_finite_where_a_scale_is_zero():
    """The backward pass divides by the scale; a zero (or tiny) scale's column gets a
    bounded gradient, and every other column's gradient is the exact one."""
    rng = np.random.default_rng(9)
    shape, width = (8, 12), 12
    x = tf.constant(rng.normal(0, 2, shape), tf.float32)
    r = tf.constant(rng.normal(0, 1, shape), tf.float32)
    upstream = tf.constant(rng.normal(0, 1, shape), tf.float32)
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    norm.build(shape)
    gamma = rng.normal(1, 0.1, width)
    gamma[[2, 7]] = [0.0, -1e-6]
    norm.gamma.assign(gamma)
    norm.beta.assign(rng.normal(0, 0.5, width))
    ours, theirs = _against_keras_layer_norm(norm, x, r, upstream)
    (dx, dr, dgamma, dbeta, _), (kdx, kdr, kdgamma, kdbeta, _) = ours, theirs
    assert all(np.isfinite(g).all() for g in (dx, dr, dgamma, dbeta))
    normal = np.ones(width, bool)
    normal[[2, 7]] = False
    for ours, keras_grad in ((dx, kdx), (dr, kdr)):
        np.testing.assert_allclose(ours[:, normal], keras_grad[:, normal], rtol=1e-4, atol=1e-5)
        assert np.abs(ours).max() <= 2 * np.abs(keras_grad).max()
    np.testing.assert_allclose(dgamma[normal], kdgamma[normal], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dbeta, kdbeta, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_the_fused_dropouts_draw_the_masks_keras_hubs_path_draws(dtype, heads, monkeypatch):
    # Real dropout (0.3): the fused training path and keras-hub's own training path
    # (with the same Dropout layers, from the same seed states) drop the same elements,
    # so their outputs and every gradient agree.
    encoder = ElectraEncoder(
        16, 32, num_layers=2, num_heads=heads, intermediate_dim=64, dropout=0.3, dtype=dtype
    )
    rng = np.random.default_rng(7)
    x = tf.constant(rng.normal(0, 1, (3, 9, 16)), tf.float32)
    mask = tf.constant(np.arange(9)[None, :] < np.array([[9], [5], [2]]))
    encoder.build(x.shape)
    upstream = tf.constant(rng.normal(0, 1, (3, 9, 32)), tf.float32)
    seeds = [v for v in encoder.variables if "seed_generator" in v.path]
    start = [v.numpy() for v in seeds]
    fused_calls = count_calls(monkeypatch, "attention_values")

    def run():
        for v, value in zip(seeds, start, strict=True):
            v.assign(value)
        with tf.GradientTape() as tape:
            y = tf.cast(encoder(x, mask, training=True), tf.float32)
            loss = tf.reduce_sum(y * upstream)
        return [y, *tape.gradient(loss, encoder.trainable_variables)]

    fused = run()
    with monkeypatch.context() as m:  # keras-hub's training path, unfused
        m.setattr(
            encoder_module.TransformerLayer,
            "call",
            lambda self, inputs, padding_mask=None, attention_mask=None, training=None: (
                keras_hub.layers.TransformerEncoder.call(
                    self,
                    inputs,
                    padding_mask=padding_mask,
                    attention_mask=attention_mask,
                    training=training,
                )
            ),
        )
        reference = run()
    with_draw = [call[3] is not None for call in fused_calls]  # the dropout's key
    assert with_draw == ([True, True] if dtype == "mixed_bfloat16" else [])
    dropped = [
        (layer._feedforward_dropout, layer._self_attention_dropout)
        for layer in encoder.transformer_layers
    ]
    assert all(d.rate == 0.3 for pair in dropped for d in pair)
    _assert_same_training(fused, reference, dtype)
    # Dropout is on: without it the gradients differ by far more than the tolerances.
    with tf.GradientTape() as tape:
        y = tf.cast(encoder(x, mask, training=False), tf.float32)
        loss = tf.reduce_sum(y * upstream)
    plain = tape.gradient(loss, encoder.trainable_variables)
    gaps = [
        np.abs(a.numpy() - b.numpy()).max() / (np.abs(b.numpy()).max() + 1e-6)
        for a, b in zip(fused[1:], plain, strict=True)
    ]
    assert max(gaps) > 0.3, gaps


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sparse_cross_entropy_matches_tensorflows_loss_gradient_and_argmax(dtype):
    rng = np.random.default_rng(8)
    logits = tf.constant(rng.normal(0, 4, (3, 4, 97)), dtype)
    labels = tf.constant(rng.integers(0, 97, (3, 4)), tf.int32)
    upstream = tf.constant(rng.normal(0, 1, (3, 4)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        loss, best = sparse_cross_entropy(logits, labels)
        reference = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=tf.cast(logits, tf.float32)
        )
        total, reference_total = tf.reduce_sum(loss * upstream), tf.reduce_sum(reference * upstream)
    grad, reference_grad = tape.gradient(total, logits), tape.gradient(reference_total, logits)
    assert loss.dtype == tf.float32 and loss.shape == (3, 4) and grad.dtype == logits.dtype
    np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)
    # The same float32 math; the 16-bit gradient is rounded from it, as TF's cast is.
    np.testing.assert_allclose(
        tf.cast(grad, tf.float32).numpy(), tf.cast(reference_grad, tf.float32).numpy(), atol=1e-6
    )
    np.testing.assert_array_equal(best.numpy(), tf.argmax(logits, -1, tf.int32).numpy())
    # Large logits do not overflow (the maximum is taken out before the exponential).
    big, _ = sparse_cross_entropy(tf.constant([[1000.0, 0.0]], dtype), tf.constant([1]))
    np.testing.assert_allclose(big.numpy(), [1000.0], rtol=1e-3)


def _attention_training_graph(heads: int):
    """The traced forward and backward pass of one bf16 layer (batch 2, length 9, width 32)."""
    encoder = ElectraEncoder(
        16, 32, num_layers=1, num_heads=heads, intermediate_dim=64, dtype="mixed_bfloat16"
    )
    x = tf.zeros((2, 9, 16))
    mask = tf.ones((2, 9), tf.bool)
    encoder.build(x.shape)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(encoder(x, mask, training=True), tf.float32))
        return tape.gradient(loss, encoder.trainable_variables)

    return step.get_concrete_function(x).graph


@pytest.mark.parametrize("heads", [1, 2])
def test_one_head_attention_trains_without_transposes(heads):
    # One head's [batch, length, 1, dim] projections are [batch, length, dim] tensors:
    # the training path multiplies them as they are (each transpose is a pass over them).
    ops = [op.type for op in _attention_training_graph(heads).get_operations()]
    assert ops.count("BatchMatMulV2") >= 2
    assert (ops.count("Transpose") == 0) == (heads == 1), ops.count("Transpose")


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_attention_values_is_the_masked_softmax_times_the_values_with_the_dropout(dtype):
    """Values and gradients against Keras' masked softmax, the dropout's mask and a
    matmul, with the same dropout draw: the backward pass's re-dropped probabilities are
    the forward's."""
    rng = np.random.default_rng(10)
    shape = (2, 3, 6, 6)
    scores = tf.constant(rng.normal(0, 2, shape), dtype)
    values = tf.constant(rng.normal(0, 1, (2, 3, 6, 4)), dtype)
    mask = np.ones((2, 1, 6, 6), bool)
    mask[0, 0, :, 4:] = False
    mask[1, 0, 2, :] = False  # a row with nothing to attend to
    mask = tf.constant(mask)
    upstream = tf.constant(rng.normal(0, 1, (2, 3, 6, 4)), tf.float32)
    draw = _draw(shape, 0.2, [3, 4])

    def reference(s, m, v, d, scale):  # Keras' masked softmax in float32, then the dropout
        probs = keras.layers.Softmax(axis=-1)(scale * tf.cast(s, tf.float32), mask=m)
        return tf.matmul(tf.cast(probs * d.mask(tf.float32), s.dtype), v)

    results = []
    for fn in (attention_values, reference):
        with tf.GradientTape() as tape:
            tape.watch([scores, values])
            out = fn(scores, mask, values, draw, 0.5)
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * upstream)
        grads = tape.gradient(loss, [scores, values])
        assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
        results.append([tf.cast(t, tf.float32).numpy() for t in (out, *grads)])
    for ours, theirs in zip(*results, strict=True):
        if dtype == tf.float32:
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
        else:  # the reference drops float32 probabilities, ours the rounded ones
            assert np.abs(ours - theirs).max() <= 0.02 * np.abs(theirs).max()
    assert (results[0][1][1, :, 2] == 0).all()  # the empty row passes no gradient


@pytest.mark.parametrize("kernels", ["xla", "compiled"])
def test_attention_values_keeps_only_the_probabilities(kernels, monkeypatch):
    """The backward pass reads the probabilities and the values; the scores and the
    dropped probabilities are gone after the forward pass, and the dropout's recompute
    waits for the incoming gradient (XLA's kernels and the compiled ones)."""
    if kernels == "compiled" and shutil.which("g++") is None:
        pytest.skip("no C++ compiler to build the compiled kernels with")
    backend = implementation("xla" if kernels == "xla" else "native")
    rng = np.random.default_rng(11)
    scores = tf.constant(rng.normal(0, 1, (2, 2, 5, 5)), tf.bfloat16)
    values = tf.constant(rng.normal(0, 1, (2, 2, 5, 3)), tf.bfloat16)
    upstream = tf.constant(rng.normal(0, 1, (2, 2, 5, 3)), tf.bfloat16)

    @tf.function
    def run(scores, values):
        with tf.GradientTape() as tape:
            tape.watch([scores, values])
            out = backend.attention_values(scores, None, values, _draw((2, 2, 5, 5), 0.1, [1, 1]))
            loss = tf.reduce_sum(tf.cast(out * upstream, tf.float32))
        return tape.gradient(loss, [scores, values])

    graph = run.get_concrete_function(scores, values).graph
    if kernels == "xla":
        (forward,) = _calls(graph, "probs_forward")
        (recompute,) = _calls(graph, "dropped_rows")
        (backward,) = _calls(graph, "probs_backward")
    else:
        ops = graph.get_operations()
        (forward,) = [op for op in ops if op.type == "ElectraAttentionProbs"]
        (recompute,) = [op for op in ops if op.type == "ElectraDropout"]
        (backward,) = [op for op in ops if op.type == "ElectraAttentionProbsGrad"]
    probs, dropped = forward.outputs

    def source(t):  # through reshapes
        while t.op.type in ("Reshape", "Identity"):
            t = t.op.inputs[0]
        return t

    # The dropped probabilities feed the forward product (through a reshape) only.
    assert [op.type for op in dropped.consumers()] == ["Reshape"]
    (reshaped,) = dropped.consumers()[0].outputs
    assert [op.type for op in reshaped.consumers()] == ["BatchMatMulV2"]
    assert recompute.control_inputs
    assert source(recompute.inputs[0]) is probs and source(backward.inputs[0]) is probs
    taken = {source(t).ref() for op in (recompute, backward) for t in op.inputs}
    assert source(forward.inputs[0]).ref() not in taken  # not the scores


def test_the_attention_takes_the_mask_unbroadcast():
    """A [B, 1, T, S] mask reaches the kernels as it is: no [B, H, T, S] boolean
    tensor is written out (or kept for the backward pass), and heads still share it."""
    identity = tf.eye(5, batch_shape=[2, 3])  # the product by it returns the probabilities

    @tf.function
    def probs_and_gradient(scores, mask):
        with tf.GradientTape() as tape:
            tape.watch(scores)
            probs = attention_values(scores, mask, identity, None, 0.5)
        return probs, tape.gradient(tf.reduce_sum(probs * scores), scores)

    scores = tf.constant(np.random.default_rng(3).normal(0, 1, (2, 3, 4, 5)), tf.float32)
    mask = tf.constant(np.random.default_rng(4).random((2, 1, 4, 5)) > 0.3)
    graph = probs_and_gradient.get_concrete_function(scores, mask).graph
    full = [
        op.name
        for op in graph.get_operations()
        for t in op.outputs
        if t.dtype == tf.bool and t.shape.num_elements() == scores.shape.num_elements()
    ]
    assert not full, full
    probs, _ = probs_and_gradient(scores, mask)
    expected = keras.layers.Softmax(axis=-1)(0.5 * scores, mask=tf.broadcast_to(mask, scores.shape))
    np.testing.assert_allclose(probs.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def _calls(graph, function: str) -> list:
    """The ops of ``graph`` calling the traced function named ``function``."""
    found = []
    for op in graph.get_operations():
        try:
            name = op.get_attr("f").name
        except (ValueError, AttributeError):
            continue
        if function in name:
            found.append(op)
    return found


@pytest.mark.parametrize("kernels", ["xla", "compiled"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_bias_gelu_matmul_recomputes_the_gelu_output_in_the_backward_pass(
    dtype, kernels, monkeypatch
):
    """Values and gradients of ``bias_gelu`` then a matmul; the GELU output is used by
    the forward matmul only, and the backward pass's recompute waits for its gradient
    (else the graph would run it in the forward pass and keep its output after all):
    XLA's kernels recompute it in a kernel of their own held back by a control edge,
    the compiled gradient kernel computes it with the gradient, from the matmul's."""
    if kernels == "compiled" and shutil.which("g++") is None:
        pytest.skip("no C++ compiler to build the compiled kernels with")
    backend = implementation("xla" if kernels == "xla" else "native")
    rng = np.random.default_rng(5)
    h = tf.constant(rng.normal(0, 2, (3, 4, 40)), dtype)
    b = tf.constant(rng.normal(0, 1, 40), tf.float32)
    k = tf.constant(rng.normal(0, 0.2, (40, 24)), dtype)
    upstream = tf.constant(rng.normal(0, 1, (3, 4, 24)), tf.float32)

    @tf.function
    def run(fn, h, b, k):
        with tf.GradientTape() as tape:
            tape.watch([h, b, k])
            y = fn(h, b, k)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        return (y, *tape.gradient(loss, [h, b, k]))

    ours = run(backend.bias_gelu_matmul, h, b, k)
    reference = run(lambda h, b, k: tf.einsum("btf,fu->btu", backend.bias_gelu(h, b), k), h, b, k)
    for a, r in zip(ours, reference, strict=True):
        assert a.dtype == r.dtype and a.shape == r.shape
        a, r = tf.cast(a, tf.float32).numpy(), tf.cast(r, tf.float32).numpy()
        if dtype == tf.float32:
            np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5)
        else:  # the same math and roundings, summed in another order
            assert np.abs(a - r).max() <= 0.02 * np.abs(r).max()
    graph = run.get_concrete_function(backend.bias_gelu_matmul, h, b, k).graph
    if kernels == "xla":
        forward, recompute = sorted(
            _calls(graph, "bias_gelu_forward"), key=lambda op: len(op.control_inputs)
        )
        assert not forward.control_inputs and recompute.control_inputs
    else:
        (forward,) = [op for op in graph.get_operations() if op.type == "ElectraBiasGelu"]
        (backward,) = [op for op in graph.get_operations() if op.type == "ElectraBiasGeluGrad"]
        assert backward.get_attr("with_output")
        assert backward.inputs[2].op.type == "MatMul"  # the gradient for the GELU output
        # Its recomputed output goes to the kernel's gradient, a matmul.
        assert [c.type for c in backward.outputs[2].consumers()] == ["MatMul"]
    assert [c.type for c in forward.outputs[0].consumers()] == ["MatMul"]


def test_the_loss_gathers_run_before_the_backward_pass_takes_the_probabilities():
    """The per-position loss's gathers (which nothing else waits for) come before the
    gradient's use of the float32 probabilities, so neither those nor the float32
    logits are left alive in a queue (TensorFlow's ops: the compiled loss kernel keeps
    no probabilities)."""
    xla = implementation("xla")

    @tf.function
    def run(logits, labels):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss, _ = xla.sparse_cross_entropy(logits, labels)
            total = tf.reduce_sum(loss)
        return tape.gradient(total, logits)

    logits, labels = tf.zeros([4, 7], tf.bfloat16), tf.constant([0, 1, 2, 3])
    graph = run.get_concrete_function(logits, labels).graph
    (softmax,) = [op for op in graph.get_operations() if op.type == "Softmax"]
    (held,) = [c for c in softmax.outputs[0].consumers() if c.type == "Identity"]
    assert held.control_inputs, "the gradient's probabilities do not wait for the loss"
    grad = run(logits, labels).numpy().astype(np.float32)
    expected = np.full([4, 7], 1 / 7, np.float32) - np.eye(4, 7, dtype=np.float32)
    np.testing.assert_allclose(grad, expected, atol=4e-3)


def test_attention_scores_are_multiplied_in_place_not_transposed():
    """Keras' einsum multiplies key by query and transposes the [B, N, S, T] product;
    the training path multiplies query by key^T: no [B, N, T, S] transpose either way."""
    graph = _attention_training_graph(heads=2)
    transposed = [
        op.outputs[0].shape.as_list() for op in graph.get_operations() if op.type == "Transpose"
    ]
    assert [2, 2, 9, 16] in transposed  # the heads' projections still are
    assert [2, 2, 9, 9] not in transposed, transposed
