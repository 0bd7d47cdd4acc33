"""Replicas stay bit-identical: what a replica computes after the all-reduce (the gradient
norms, clipping's factor, the optimizer's update) and every compiled kernel, forward and
backward, give the same bits for the same inputs however the threads are timed.

In data-parallel training every replica applies the same update to the same all-reduced
gradient; an op whose result follows thread timing makes the replicas drift apart in the
last bits, and the chief's checkpoint no longer describes the others. The one found so
far was ``tf.add_n`` summing the gradient norms' terms (see
:func:`keras_electra.training.step.ordered_sum`). Each check here repeats the same
computation while other threads load both cores.
"""

import contextlib
import shutil
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_RECIPE, traced_step_ops

from keras_electra import kernels as kernel_tables
from keras_electra.config import ElectraConfig
from keras_electra.kernels import compiled
from keras_electra.layers.dropout import dropout_key
from keras_electra.pretraining.pretrainer import ElectraPretrainer, loss_totals
from keras_electra.training.optimizer import create_optimizer
from keras_electra.training.step import ordered_sum

REPETITIONS = 20
HAS_COMPILER = shutil.which("g++") is not None


@contextlib.contextmanager
def cpu_load(threads: int = 2):
    """Other threads keeping both cores busy (NumPy's matmul runs without the GIL)."""
    stop = threading.Event()

    def spin():
        a = np.random.default_rng(0).random((256, 256))
        while not stop.is_set():
            a = a @ a
            a /= np.abs(a).max()

    workers = [threading.Thread(target=spin, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def _bits(values) -> list[bytes]:
    return [np.asarray(tf.convert_to_tensor(v).numpy()).tobytes() for v in values]


def _repeat(run, *args) -> None:
    """``run(*args)`` REPETITIONS times under load: every output's bits as the first's."""
    with cpu_load():
        first = _bits(run(*args))
        for repetition in range(1, REPETITIONS):
            again = _bits(run(*args))
            changed = [i for i, (a, b) in enumerate(zip(first, again, strict=True)) if a != b]
            assert not changed, f"outputs {changed} changed on repetition {repetition}"


# === The sum itself ===


def test_ordered_sum_adds_in_list_order_where_add_n_may_reuse_a_later_buffer():
    """tf.add_n accumulates into the first input whose buffer no other op reads and moves
    it to the front: here the third (a fresh product), so it adds -1e8 + 1e8 + 1 = 1
    where the list's order gives (1 + 1e8) - 1e8 = 0. Which buffer is free depends, in a
    real step, on which of the inputs' other readers have finished."""
    values = [tf.Variable(1.0), tf.Variable(1e8), tf.Variable(-1e8)]

    @tf.function
    def sums():
        a, b = values[0].read_value(), values[1].read_value()
        fresh = values[2] * 1.0  # its one reader is the sum: a buffer the sum may reuse
        return tf.add_n([a, b, fresh]), ordered_sum([a, b, values[2] * 1.0])

    with _without_graph_rewrites():  # Grappler rewrites the AddN of this small graph
        add_n, ours = sums()
    assert float(add_n) == 1.0  # the reordering this module guards against
    assert float(ours) == 0.0


@contextlib.contextmanager
def _without_graph_rewrites():
    before = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options(
            {"disable_meta_optimizer": before.get("disable_meta_optimizer", False)}
        )


def test_nothing_after_the_gradients_sums_with_add_n():
    """In the traced step, no AddN of three or more tensors reads the gradient norms'
    terms or anything computed from them (the norms, the factor, the update)."""
    ops = traced_step_ops("float32")
    frontier = [op for op in ops if op.type == "L2Loss"]
    assert frontier, "the step measures the gradient norm with L2Loss"
    after, seen = [], set()
    while frontier:
        op = frontier.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        after.append(op)
        frontier.extend(c for t in op.outputs for c in t.consumers())
    offending = [op.name for op in after if op.type == "AddN" and len(op.inputs) > 2]
    assert not offending, offending


# === After the all-reduce: norms, clipping, the optimizer's update ===


@pytest.fixture(scope="module")
def pretrainer_and_gradients():
    """A small pretrainer (8,192 words: the token embedding's norm is a
    multi-threaded reduction), its optimizer built, and one batch's gradients."""
    config = ElectraConfig.from_preset(
        "tiny", vocab_size=8192, num_layers=1, max_position_embeddings=64
    )
    keras.utils.set_random_seed(3)
    model = ElectraPretrainer(config, seed=3, hyperparameters=TINY_RECIPE)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-3, total_steps=10, warmup_steps=0)
    )
    model.optimizer.build(model.trainable_variables)
    ids = np.random.default_rng(0).integers(5, 8192, (8, 64)).astype("int32")
    batch = {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": 0 * ids}

    @tf.function
    def gradients(batch):
        prepared = model.prepare_batch(batch)
        grads, losses, _ = model._loss_and_gradients(prepared, loss_totals(prepared))
        return [tf.convert_to_tensor(g) for g in grads], losses

    grads, losses = gradients(batch)
    return model, grads, losses


@pytest.mark.parametrize("kernels", ["compiled", "tensorflow"])
def test_the_update_after_the_all_reduce_is_bit_identical_under_load(
    pretrainer_and_gradients, kernels, monkeypatch
):
    """The pretrainer's own update (global norm and its parts, clipping, AdamW) from the
    same state and gradients, 20 times: the same weights, moments and norms."""
    if kernels == "compiled" and not HAS_COMPILER:
        pytest.skip("no C++ compiler to build the kernels with")
    if kernels == "tensorflow":  # ResourceApplyAdam instead of the compiled update
        monkeypatch.setenv(kernel_tables.ENV, "xla")
    model, grads, losses = pretrainer_and_gradients
    state = model.trainable_variables + model.optimizer.variables
    saved = [v.numpy() for v in state]

    @tf.function
    def update(grads):
        model._apply_update(list(grads), losses, lambda: None)
        norms = {k: t.result() for k, t in model._trackers.items() if k.startswith("grad_norm")}
        return [v.value for v in state] + list(norms.values())

    def run():
        for variable, value in zip(state, saved, strict=True):
            variable.assign(value)
        for tracker in model._trackers.values():
            tracker.reset_state()
        return update(grads)

    if kernels == "compiled":
        assert compiled.ops_for(tf.float32) is not None
    _repeat(run)
    moved = max(float(np.max(np.abs(v.numpy() - s))) for v, s in zip(state, saved, strict=True))
    assert moved > 0.0  # the update changed the weights


# === Every compiled kernel, forward and backward ===


def _kernel_cases(dtype: str):
    """(name, function of no arguments returning the op's outputs) for each compiled op,
    on inputs big enough that its rows are split over both threads."""
    ops = compiled.kernels()
    rng = np.random.default_rng(11)
    rows, width, heads, length, vocab = 512, 256, 4, 64, 3000

    def tensor(shape, scale=1.0):
        return tf.cast(rng.normal(0, scale, shape).astype(np.float32), dtype)

    def floats(shape, mean=0.0):
        return tf.constant(rng.normal(mean, 0.5, shape).astype(np.float32))

    x, r, up = tensor([rows, width]), tensor([rows, width]), tensor([rows, width])
    gamma, beta, bias = floats([width], 1.0), floats([width]), floats([width])
    key = dropout_key(tf.constant([5, 6]))
    threshold, scale = tf.constant(6554, tf.uint32), tf.constant(1.0 / 0.9)
    y, inv_std = ops.electra_add_layer_norm(
        x, r, gamma, beta, key, threshold, scale, bias, epsilon=1e-12, dropout=True
    )
    scores = tensor([8, heads, length, length])
    keep = tf.constant(rng.random([8, 1, 1, length]) > 0.2)
    probs, _ = ops.electra_attention_probs(
        scores, keep, key, threshold, scale, scale=0.125, dropout=True
    )
    logits = tensor([rows, vocab], 3.0)
    labels = tf.constant(rng.integers(0, vocab, rows).astype(np.int32))
    uniform = tf.constant(rng.random(rows).astype(np.float32))
    _, _, log_sum_exp, _ = ops.electra_softmax_xent(logits, labels, uniform)
    weights = tf.constant(rng.random([rows, vocab]).astype(np.float32))
    qkv, qkv_bias = tensor([8, length, 3 * width]), floats([3 * width])
    dq, dk, dv = (tensor([8, heads, length, width // heads]) for _ in range(3))
    return [
        (
            "AddLayerNorm",
            lambda: ops.electra_add_layer_norm(
                x, r, gamma, beta, key, threshold, scale, bias, epsilon=1e-12, dropout=True
            ),
        ),
        (
            "AddLayerNormGrad",
            lambda: ops.electra_add_layer_norm_grad(
                y, up, gamma, beta, key, threshold, scale, inv_std, dropout=True, with_bias=True
            ),
        ),
        ("BiasGelu", lambda: [ops.electra_bias_gelu(x, bias)]),
        ("BiasGeluGrad", lambda: ops.electra_bias_gelu_grad(x, bias, up, with_output=True)),
        (
            "AttentionProbs",
            lambda: ops.electra_attention_probs(
                scores, keep, key, threshold, scale, scale=0.125, dropout=True
            ),
        ),
        (
            "AttentionProbsGrad",
            lambda: [
                ops.electra_attention_probs_grad(
                    probs, scores, key, threshold, scale, scale=0.125, dropout=True
                )
            ],
        ),
        ("Dropout", lambda: [ops.electra_dropout(x, key, threshold, scale)]),
        ("SoftmaxXent", lambda: ops.electra_softmax_xent(logits, labels, uniform)),
        (
            "SoftmaxXentGrad",
            lambda: [ops.electra_softmax_xent_grad(logits, log_sum_exp, labels, tf.ones([rows]))],
        ),
        ("InverseCdf", lambda: [ops.electra_inverse_cdf(weights, uniform)]),
        ("SplitHeads", lambda: ops.electra_split_heads(qkv, qkv_bias, heads=heads)),
        ("MergeHeads", lambda: ops.electra_merge_heads(dq, dk, dv)),
    ]


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_compiled_kernel_is_bit_identical_under_load(dtype):
    assert compiled.kernels() is not None
    cases = _kernel_cases(dtype)
    for name, run in cases:
        try:
            _repeat(tf.function(run))
        except AssertionError as error:
            raise AssertionError(f"{name} ({dtype}): {error}") from None


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
def test_the_compiled_adamw_update_is_bit_identical_under_load():
    ops = compiled.kernels()
    rng = np.random.default_rng(2)
    shapes = [(30522, 128), (1000, 7), (129,)]  # odd sizes: uneven thread blocks
    start = [[rng.normal(0, s, shape).astype(np.float32) for shape in shapes] for s in (0.1, 1e-3)]
    start.append([np.abs(v) * 1e-3 for v in start[1]])  # the second moments: positive
    weights, moments, squares = ([tf.Variable(v) for v in group] for group in start)
    grads = [tf.constant(rng.normal(0, 1e-2, shape).astype(np.float32)) for shape in shapes]

    @tf.function
    def update():
        for w, m, v, g in zip(weights, moments, squares, grads, strict=True):
            ops.electra_apply_adam_w(
                var=w.handle, m=m.handle, v=v.handle, grad=g, scale=tf.constant(0.37),
                decay=tf.constant(1e-5), lr=tf.constant(1e-3), beta1=tf.constant(0.9),
                beta2=tf.constant(0.999), epsilon=tf.constant(1e-6),
                beta1_power=tf.constant(0.9**3), beta2_power=tf.constant(0.999**3),
            )  # fmt: skip

    def run():
        for group, values in zip((weights, moments, squares), start, strict=True):
            for variable, value in zip(group, values, strict=True):
                variable.assign(value)
        update()
        return [v.value() for v in weights + moments + squares]

    _repeat(run)
