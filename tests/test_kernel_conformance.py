"""Conformance: every training operation on each kernel backend against the reference.

The backends are chosen as a user chooses them, with ``KERAS_ELECTRA_KERNELS``
(keras_electra/kernels/). The oracles below are the math written once more with
TensorFlow's plain ops (Keras' LayerNorm, GELU, masked softmax and the Dropout layer's
hashed mask), in float32, rounded where the operation returns its input's dtype.

Tolerances: float32, within a few float32 roundings at the tensor's scale (``rtol=2e-5``
and ``atol=2e-5`` times the largest reference value); bfloat16, within 2% of the
tensor's largest value (bfloat16 keeps 8 bits: one rounding is 0.4%, and the kernels
round at other points than the oracles). The attention's output shows its mask and
dropout (its values are the identity: it returns the dropped probabilities), and their
zeros are compared exactly, in every dtype; a LayerNorm's dropout shows only through its
values, where another mask moves them far beyond the tolerances. ``native`` is skipped
where the compiled kernels cannot run (no C++ compiler).

The projections (``dense`` through the model's ``Dense`` and ``EinsumDense`` layers),
``bias_add`` and AdamW's update (``adam_w``: the variable and its two moments after one
step) hold the same tolerances with room: measured on every backend (2-core EPYC,
TensorFlow 2.21), the largest difference was 1.8e-7 of the tensor's largest value in
float32 and 0.85% in bfloat16 (one or two roundings: the bias gradient, summed in
bfloat16 by Keras' add on ``reference``; the variable's, rounded after each of
``ResourceApplyAdam``'s steps).
"""

import json
import logging

import keras
import numpy as np
import pytest
import step_fixture
import tensorflow as tf
from conftest import pretrain_command, traced_step_ops

from keras_electra import kernels
from keras_electra.layers.dense import Dense, EinsumDense
from keras_electra.layers.dropout import DropoutDraw, dropout_key

BACKENDS = ["xla", "native"]
DTYPES = ["float32", "bfloat16"]
F32 = tf.float32


@pytest.fixture
def use(monkeypatch):
    """Select a backend for the rest of the test, as ``KERAS_ELECTRA_KERNELS`` does."""

    def select(name: str) -> None:
        monkeypatch.setenv(kernels.ENV, name)
        if kernels.choose().backend != name:
            pytest.skip(f"the {name} kernels cannot run here: {kernels.choose().reason}")

    return select


def _draw(shape, rate, seed=3):
    if not rate:
        return None
    return DropoutDraw(dropout_key(tf.constant([seed, 7], tf.int64)), tf.constant(shape), rate)


def _values_and_gradients(fn, inputs: dict, upstream_seed=11):
    """``fn(**inputs)``'s outputs and the gradients of a random projection of them for
    every floating input and the weights of every layer input, as float32 arrays."""
    floats = [k for k, v in inputs.items() if isinstance(v, tf.Tensor) and v.dtype.is_floating]
    layers = [v for v in inputs.values() if isinstance(v, keras.layers.Layer)]
    weights = [w for layer in layers for w in layer.trainable_variables]
    with tf.GradientTape() as tape:
        for k in floats:
            tape.watch(inputs[k])
        out = fn(**inputs)
        outs = out if isinstance(out, tuple) else (out,)
        rng = np.random.default_rng(upstream_seed)
        loss = tf.add_n(
            [
                tf.reduce_sum(tf.cast(o, F32) * rng.normal(0, 1, o.shape).astype("float32"))
                for o in outs
                if o.dtype.is_floating
            ]
        )
    watched = [inputs[k] for k in floats] + weights
    grads = tape.gradient(loss, watched)
    return [tf.cast(o, F32).numpy() for o in outs] + [
        np.zeros(w.shape, "float32") if g is None else tf.cast(g, F32).numpy()
        for w, g in zip(watched, grads, strict=True)
    ]


def _assert_conforms(got: list, expected: list, dtype: str) -> None:
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a.shape == b.shape, (i, a.shape, b.shape)
        scale = float(np.abs(b).max(initial=0.0)) + 1e-6
        if dtype == "float32":
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * scale, err_msg=str(i))
        else:
            assert np.abs(a - b).max() <= 0.02 * scale, (i, np.abs(a - b).max(), scale)


# === The oracles ===


def _gelu(z):
    return keras.activations.gelu(z, approximate=False)


def ref_add_layer_norm(x, residual, norm, dropout=None, bias=None):
    v = tf.cast(x, F32) + (0.0 if bias is None else tf.cast(bias, F32))
    if dropout is not None:
        v = v * dropout.mask(F32)
    s = v + tf.cast(residual, F32)
    mean, variance = tf.nn.moments(s, axes=[-1], keepdims=True)
    y = (s - mean) * tf.math.rsqrt(variance + norm.epsilon) * norm.gamma + norm.beta
    return tf.cast(y, x.dtype)


def ref_dropout(x, draw):
    return tf.cast(tf.cast(x, F32) * draw.mask(F32), x.dtype)


def ref_bias_gelu(h, bias):
    return tf.cast(_gelu(tf.cast(h, F32) + tf.cast(bias, F32)), h.dtype)


def ref_bias_gelu_matmul(h, bias, kernel):
    return tf.matmul(ref_bias_gelu(h, bias), kernel)


def ref_attention_values(scores, mask, values, dropout=None, scale=1.0):
    keep = tf.broadcast_to(tf.cast(mask, tf.bool), tf.shape(scores))
    logits = tf.where(keep, tf.cast(scores, F32) * scale, -1e9)
    probs = tf.cast(tf.where(keep, tf.nn.softmax(logits, axis=-1), 0.0), scores.dtype)
    if dropout is not None:
        probs = probs * dropout.mask(scores.dtype)
    return tf.matmul(probs, values)


def ref_cross_entropy(logits, labels):
    z = tf.cast(logits, F32)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=z)
    return loss, tf.argmax(z, axis=-1, output_type=tf.int32)


def ref_bias_add(x, bias):
    return tf.cast(tf.cast(x, F32) + tf.cast(bias, F32), x.dtype)


def ref_dense(layer, inputs, contracted):
    """The layer's affine map, its ``contracted`` trailing input axes against the kernel's
    leading ones, plus the bias over the kernel's other axes."""
    y = tf.tensordot(tf.cast(inputs, F32), tf.cast(layer.kernel, F32), contracted)
    return tf.cast(y + tf.cast(layer.bias, F32), inputs.dtype)


def ref_adam_w(variable, m, v, gradient, scalars, scale=None, decay=None):
    """Adam's step as ``ResourceApplyAdam`` documents it, after the gradient's scale and
    the variable's decay, in float32."""
    s = {k: tf.cast(value, F32) for k, value in scalars.items()}
    g = tf.cast(gradient, F32) * (1.0 if scale is None else tf.cast(scale, F32))
    w = tf.cast(variable, F32)
    w = w if decay is None else w - w * tf.cast(decay, F32)
    m_new = tf.cast(m, F32) + (g - tf.cast(m, F32)) * (1 - s["beta1"])
    v_new = tf.cast(v, F32) + (g * g - tf.cast(v, F32)) * (1 - s["beta2"])
    alpha = s["lr"] * tf.sqrt(1 - s["beta2_power"]) / (1 - s["beta1_power"])
    w = w - alpha * m_new / (tf.sqrt(v_new) + s["epsilon"])
    for target, value in ((variable, w), (m, m_new), (v, v_new)):
        target.assign(tf.cast(value, target.dtype))


# === One operation at a time ===


def _case(op: str, dtype: str, rate: float):
    """``(kernel function, oracle, inputs)`` for one operation."""
    rng = np.random.default_rng(5)

    def t(shape, scale=1.0, dt=dtype):
        return tf.constant(rng.normal(0, scale, shape).astype("float32"), dt)

    if op == "add_layer_norm":
        x, residual = t((6, 5, 16)), t((6, 5, 16))
        # A LayerNorm of x's compute dtype (its scale and offset float32), as a layer's.
        policy = "float32" if dtype == "float32" else f"mixed_{dtype}"
        norm = keras.layers.LayerNormalization(epsilon=1e-12, dtype=policy)
        norm.build((None, 16))
        norm.gamma.assign(t((16,), dt=F32) + 1.0)
        norm.beta.assign(t((16,), dt=F32))
        inputs = dict(x=x, residual=residual, norm=norm, bias=t((16,), dt=F32))
        inputs.update(dropout=_draw((6, 5, 16), rate))
        return kernels.table().add_layer_norm, ref_add_layer_norm, inputs
    if op == "dropout":
        inputs = dict(x=t((6, 5, 16)), draw=_draw((6, 5, 16), rate))
        return kernels.table().dropout, ref_dropout, inputs
    if op == "bias_gelu":
        inputs = dict(h=t((6, 5, 32)), bias=t((32,), dt=F32))
        return kernels.table().bias_gelu, ref_bias_gelu, inputs
    if op == "bias_gelu_matmul":
        inputs = dict(h=t((30, 32)), bias=t((32,), dt=F32), kernel=t((32, 16), 0.2))
        return kernels.table().bias_gelu_matmul, ref_bias_gelu_matmul, inputs
    if op == "attention_values":
        scores = t((3, 2, 7, 9), 2.0)
        mask = tf.constant(
            np.arange(9)[None, None, None, :] < np.array([9, 5, 1])[:, None, None, None]
        )
        # Values the identity: the output is the dropped probabilities, whose zeros
        # (masked or dropped) are compared exactly below.
        values = tf.eye(9, batch_shape=[3, 2], dtype=dtype)
        inputs = dict(scores=scores, mask=mask, values=values, scale=0.5)
        inputs["dropout"] = _draw((3, 2, 7, 9), rate)
        return kernels.table().attention_values, ref_attention_values, inputs
    if op == "cross_entropy":
        logits = t((4, 6, 97), 3.0)
        labels = tf.constant(rng.integers(0, 97, (4, 6)), tf.int32)
        inputs = dict(logits=logits, labels=labels)
        return kernels.table().sparse_cross_entropy, ref_cross_entropy, inputs
    if op == "bias_add":  # the bias in x's dtype, as the layers autocast it
        inputs = dict(x=t((6, 5, 16)), bias=t((16,)))
        return kernels.table().bias_add, ref_bias_add, inputs
    if op in DENSE_LAYERS:
        # The model's Dense and EinsumDense layers, whose training call is the table's
        # ``dense`` (Keras' own call on reference, one 2-D matmul on xla and native).
        policy = "float32" if dtype == "float32" else f"mixed_{dtype}"
        make, input_shape, contracted = DENSE_LAYERS[op]
        layer = make(policy)
        layer.build((None, *input_shape[1:]))
        for weight in layer.weights:
            weight.assign(t(weight.shape, 0.3, dt=F32))
        inputs = dict(layer=layer, inputs=t(input_shape), contracted=contracted)
        return _training_call, ref_dense, inputs
    if op == "adam_w":
        # One update from moments already under way (step 3), the gradient scaled and
        # the variable decayed as clipping and weight decay do; a learning rate large
        # enough that the step shows at a bfloat16 variable's precision.
        shape = (7, 16)
        scalars = dict(lr=0.05, beta1=0.9, beta2=0.999, epsilon=1e-7)
        scalars.update(beta1_power=0.9**3, beta2_power=0.999**3)
        inputs = dict(
            variable=t(shape, 0.1),
            m=t(shape, 0.1),
            v=tf.constant(rng.uniform(0.001, 0.02, shape).astype("float32"), dtype),
            gradient=t(shape, 0.1),
            scalars={k: tf.constant(value, dtype) for k, value in scalars.items()},
            scale=tf.constant(0.5),
            decay=tf.constant(0.2, dtype),
        )
        return kernels.table().adam_w, ref_adam_w, inputs
    raise AssertionError(op)


def _training_call(layer, inputs, contracted):
    """``layer``'s training call: the kernel table's ``dense`` (its ``contracted``
    axes are the layer's equation's)."""
    return layer(inputs, training=True)


DENSE_LAYERS = {  # op: (layer of a dtype policy, input shape, contracted input axes)
    "dense": (lambda policy: Dense(12, dtype=policy), (6, 5, 16), 1),
    "dense_split_heads": (
        lambda policy: EinsumDense("abc,cde->abde", (None, 3, 4), bias_axes="de", dtype=policy),
        (6, 5, 16),
        1,
    ),
    "dense_merge_heads": (
        lambda policy: EinsumDense("abcd,cde->abe", (None, 16), bias_axes="e", dtype=policy),
        (6, 5, 3, 4),
        2,
    ),
}


def _updated(adam_w, inputs: dict) -> list:
    """The variable and its moments (float32 arrays) after ``adam_w`` updated fresh
    copies of them."""
    state = [tf.Variable(inputs[k]) for k in ("variable", "m", "v")]
    others = {k: value for k, value in inputs.items() if k not in ("variable", "m", "v")}
    adam_w(*state, **others)
    return [tf.cast(w, F32).numpy() for w in state]


DROPOUT_OPS = ["add_layer_norm", "attention_values"]
OPS = [(op, rate) for op in DROPOUT_OPS for rate in (0.0, 0.2)] + [
    ("dropout", 0.2),
    *((op, 0.0) for op in ("bias_gelu", "bias_gelu_matmul", "cross_entropy", "bias_add")),
    *((op, 0.0) for op in (*DENSE_LAYERS, "adam_w")),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["reference", *BACKENDS])
@pytest.mark.parametrize(("op", "rate"), OPS, ids=[f"{o}-dropout{r}" for o, r in OPS])
def test_each_operation_matches_the_reference(op, rate, name, dtype, use):
    use(name)
    kernel, oracle, inputs = _case(op, dtype, rate)
    if op == "adam_w":  # no value, no gradient: the variable and its moments updated
        got = _updated(tf.function(kernel), inputs)
        _assert_conforms(got, _updated(oracle, inputs), dtype)
        reference = kernels.implementation("reference").adam_w
        _assert_conforms(got, _updated(tf.function(reference), inputs), dtype)
        return
    got = _values_and_gradients(tf.function(kernel), inputs)
    expected = _values_and_gradients(oracle, inputs)
    _assert_conforms(got, expected, dtype)
    if op == "attention_values":  # the same probabilities masked and dropped, exactly
        np.testing.assert_array_equal(got[0] == 0, expected[0] == 0)
        assert (got[0] == 0).mean() > (0.3 if rate else 0.2)


# The inputs whose first axis is the batch's (the rest are weights).
BATCHED = {"x", "residual", "h", "scores", "mask", "values", "logits", "labels", "inputs"}
NO_DROPOUT = [op for op, rate in OPS if op not in ("adam_w", "dropout") and not rate]


@pytest.mark.parametrize("name", ["reference", *BACKENDS])
@pytest.mark.parametrize("op", NO_DROPOUT)
def test_each_operation_takes_a_batch_of_no_rows(op, name, use):
    # A replica given no rows of an uneven last batch: the native LayerNorm and GELU
    # gradients divided by their count of row blocks, 0, and the process died of SIGFPE.
    use(name)
    kernel, oracle, inputs = _case(op, "float32", 0.0)
    inputs = {k: v[:0] if k in BATCHED else v for k, v in inputs.items()}
    got = _values_and_gradients(tf.function(kernel), inputs)
    _assert_conforms(got, _values_and_gradients(oracle, inputs), "float32")
    assert got[0].size == 0 and not any(np.any(g) for g in got[1:] if g.size)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["reference", *BACKENDS])
@pytest.mark.parametrize("heads", [1, 3])
def test_the_head_split_matches_the_reference(heads, name, dtype, use):
    use(name)
    rng = np.random.default_rng(2)
    batch, length, dim = 2, 5, 4
    qkv = tf.constant(rng.normal(0, 1, (batch, length, 3 * heads * dim)), dtype)
    bias = tf.constant(rng.normal(0, 1, (3, heads, dim)), F32)

    def reference(qkv, bias):
        x = tf.reshape(qkv, [batch, length, 3, heads, dim]) + tf.cast(bias, qkv.dtype)
        return tuple(tf.unstack(tf.transpose(x, [2, 0, 3, 1, 4])))

    got = _values_and_gradients(
        lambda qkv, bias: kernels.table().split_heads(qkv, bias, heads), dict(qkv=qkv, bias=bias)
    )
    _assert_conforms(got, _values_and_gradients(reference, dict(qkv=qkv, bias=bias)), dtype)


def test_the_native_sampler_draws_the_references_tokens(use, monkeypatch):
    # Inverse-CDF sampling from the loss's softmax: the same index for each uniform,
    # except where a uniform falls within float32 rounding of a cumulative boundary.
    rng = np.random.default_rng(4)
    logits = tf.constant(rng.normal(0, 2, (64, 97)), F32)
    labels = tf.constant(rng.integers(0, 97, (64,)), tf.int32)
    uniform = tf.constant(rng.random(64), F32)
    monkeypatch.setenv(kernels.ENV, "reference")
    reference = kernels.table()
    loss, best, probs = reference.sparse_cross_entropy(logits, labels, probabilities=True)
    expected = reference.inverse_cdf(probs, uniform).numpy()
    use("native")
    native = kernels.table()
    got_loss, got_best, sampled = native.sparse_cross_entropy(logits, labels, uniform=uniform)
    assert (sampled.numpy() == expected).mean() >= 0.98, (sampled.numpy(), expected)
    np.testing.assert_array_equal(got_best.numpy(), best.numpy())
    np.testing.assert_allclose(got_loss.numpy(), loss.numpy(), rtol=2e-5, atol=2e-5)


# === A whole pretraining step ===


def _select(name: str, monkeypatch) -> None:
    monkeypatch.setenv(kernels.ENV, name)
    if kernels.choose().backend != name:
        pytest.skip(f"the {name} kernels cannot run here: {kernels.choose().reason}")


_STEPS: dict[tuple[str, str], tuple[dict, dict, list[np.ndarray]]] = {}


def _one_step(name: str, dtype: str, monkeypatch) -> tuple[dict, dict, list[np.ndarray]]:
    """One training step of a small pretrainer (masking, sampling, both losses,
    clipping, AdamW) on backend ``name``, from the same seed and batch: its record
    (step_fixture.record_of), its logs and its weights after the update. Each backend
    and policy steps once in this module; the tests below read the same step."""
    _select(name, monkeypatch)
    if (name, dtype) not in _STEPS:
        model, batch, logs = step_fixture.one_step(dtype)
        weights = [v.numpy() for v in model.trainable_variables]
        _STEPS[name, dtype] = (step_fixture.record_of(model, batch, logs), logs, weights)
    return _STEPS[name, dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["reference", *BACKENDS])
def test_a_pretraining_step_is_the_recorded_commits_bit_for_bit(name, dtype, monkeypatch):
    """The logs and every weight after one step, on each backend, as the commit recorded
    in this machine's record in tests/golden/steps/ computed them (tests/step_fixture.py):
    moving the kernels changed no value. Bit for bit holds on the kind of machine that
    recorded them."""
    recorded = step_fixture.recorded_here()
    if recorded is None:
        pytest.skip("no record of this machine (tests/step_fixture.py records one here)")
    got, _, _ = _one_step(name, dtype, monkeypatch)
    want = recorded["runs"][f"{name}/{dtype}"]
    assert got["logs"] == want["logs"], recorded["commit"]
    changed = [
        (path, total, expected)
        for (path, digest, total), (_, want_digest, expected) in zip(
            got["weights"], want["weights"], strict=True
        )
        if digest != want_digest
    ]
    assert not changed, (recorded["commit"], len(changed), changed[:5])
    assert got["inference"] == want["inference"], recorded["commit"]
    assert got["evaluation"] == want["evaluation"], recorded["commit"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_a_pretraining_step_matches_the_reference(name, dtype, monkeypatch):
    _, reference_logs, reference_weights = _one_step("reference", dtype, monkeypatch)
    _, logs, weights = _one_step(name, dtype, monkeypatch)
    tolerance = 2e-4 if dtype == "float32" else 2e-2
    for key in ("loss", "mlm_loss", "disc_loss"):
        assert abs(logs[key] - reference_logs[key]) <= tolerance * abs(reference_logs[key]), (
            key,
            logs[key],
            reference_logs[key],
        )
    # AdamW's first step moves each weight by about the learning rate times the sign of
    # its gradient, so a gradient within rounding of zero may move either way: the
    # updates agree everywhere within two learning rates, and almost everywhere closely.
    lr = 1e-3
    gaps = np.concatenate(
        [np.abs(a - b).ravel() for a, b in zip(weights, reference_weights, strict=True)]
    )
    assert gaps.max() <= 2 * lr + 1e-6
    assert (gaps <= 0.1 * lr).mean() >= (0.99 if dtype == "float32" else 0.9), (
        gaps <= 0.1 * lr
    ).mean()


# === Choosing a backend ===


def _pretrain_command(corpus, output) -> int:
    args = ["--preset", "tiny", "--log-every", "1", "--no-health"]
    return pretrain_command("--corpus", str(corpus), "--output", str(output), *args)


@pytest.mark.parametrize("name", ["reference", "xla", "native"])
def test_the_command_pretrains_on_each_backend_and_says_which(
    name, small_corpus, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(kernels.ENV, name)
    if kernels.choose().backend != name:
        pytest.skip(f"the {name} kernels cannot run here: {kernels.choose().reason}")
    assert _pretrain_command(small_corpus, tmp_path / name) == 0
    printed = capsys.readouterr().out
    assert f"Training kernels: {name} ({kernels.ENV}={name})" in printed
    recorded = json.loads((tmp_path / name / "run.json").read_text())["kernels"]
    assert recorded == f"{name}: {kernels.ENV}={name}"


def test_the_reference_backend_traces_no_kernel(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "reference")
    ops = traced_step_ops("mixed_bfloat16")
    found = [
        op.name
        for op in ops
        if op.type.startswith("Electra")
        or any(s in op.name for s in ("fused_", "query_key_value", "cross_entropy"))
    ]
    assert not found, found[:5]
    monkeypatch.setenv(kernels.ENV, "xla")
    assert any("fused_layer_norm" in op.name for op in traced_step_ops("mixed_bfloat16"))


def test_an_unknown_backend_is_one_sentence_and_writes_nothing(
    small_corpus, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(kernels.ENV, "fastest")
    assert _pretrain_command(small_corpus, tmp_path / "run") == 2
    message = capsys.readouterr().err.strip()
    assert message.endswith(
        f"{kernels.ENV}='fastest' is not a kernel backend: set it to reference, xla or "
        "native, or unset it to let keras-electra choose."
    ), message
    assert "\n" not in message and "Traceback" not in message
    assert not (tmp_path / "run").exists()


def test_native_asked_for_where_it_cannot_run_says_why_once_and_takes_xla(monkeypatch, caplog):
    monkeypatch.setenv(kernels.ENV, "native")
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    kernels.clear()
    try:
        with caplog.at_level("WARNING", logger=kernels.__name__):
            first, second = kernels.choose(), kernels.choose()
    finally:
        monkeypatch.undo()
        kernels.clear()
    assert first == second and first.backend == "xla"
    assert "no-such-compiler-here" in first.reason
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "KERAS_ELECTRA_KERNELS=native" in warnings[0], warnings


def test_a_backend_table_lacking_an_operation_fails_when_built():
    from keras_electra.kernels.interface import Kernels
    from keras_electra.kernels.reference import KERNELS

    ops = {name: getattr(KERNELS, name) for name in ("dense", "dropout", "adam_w")}
    with pytest.raises(TypeError, match="The partial kernels lack bias_add, bias_gelu, "):
        Kernels.of("partial", ops)
    borrowed = {k: v for k, v in vars(KERNELS).items() if k not in ("name", "dense")}
    table = Kernels.of("mixed", {"dense": KERNELS.dense}, **borrowed)
    assert table == KERNELS.__class__(name="mixed", **{**borrowed, "dense": KERNELS.dense})
