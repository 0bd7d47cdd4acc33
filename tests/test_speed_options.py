"""Training-speed options: gradient accumulation, XLA gradients, LAMB, steps per execution."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import TINY_RECIPE, pretrain_command

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.pretraining.run import load_run, pretrain
from keras_electra.training.lamb import Lamb
from keras_electra.training.optimizer import create_optimizer

CONFIG = ElectraConfig.from_preset(
    "tiny", vocab_size=300, num_layers=1, dropout=0.0, max_position_embeddings=32
)


def make_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 300, (8, 32)).astype("int32")
    mask = np.ones_like(ids)
    mask[:3, 20:] = 0  # uneven padding: micro-batches predict different numbers of tokens
    ids[:, 0], ids = 2, ids * mask
    return {"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def initial_weights():
    keras.utils.set_random_seed(0)
    return ElectraPretrainer(CONFIG, seed=7, hyperparameters=TINY_RECIPE).get_weights()


def one_step(initial_weights, **options):
    """One SGD(1.0) step from the same weights on the same batch: gradients show directly."""
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(CONFIG, seed=7, hyperparameters=TINY_RECIPE)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    model.configure_step(**options)
    model.set_weights(initial_weights)
    logs = model.train_on_batch(make_batch(), return_dict=True)
    return model.get_weights(), {k: float(v) for k, v in logs.items()}


def max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def reference(initial_weights):
    return one_step(initial_weights)


@pytest.mark.parametrize("steps", [2, 4])
def test_accumulated_micro_batches_equal_one_batch(initial_weights, reference, steps):
    weights, logs = one_step(initial_weights, gradient_accumulation=steps)
    assert max_diff(reference[0], initial_weights) > 1e-3  # the step moved the weights
    assert max_diff(weights, reference[0]) < 1e-5
    for name, value in reference[1].items():  # metrics too: losses and per-token metrics
        assert logs[name] == pytest.approx(value, rel=1e-5, abs=1e-5), name


def test_xla_gradients_train_like_the_plain_step(initial_weights, reference):
    weights, logs = one_step(initial_weights, xla_gradients=True)
    assert max_diff(weights, initial_weights) > 1e-3
    # Masking runs outside XLA, so the masked-LM half is the plain step's; the
    # Gumbel samples come from XLA's own stateless-random stream. (XLA with
    # accumulation: see the mirrored-strategy test below.)
    assert logs["mlm_loss"] == pytest.approx(reference[1]["mlm_loss"], rel=1e-5)
    assert logs["mlm_accuracy"] == reference[1]["mlm_accuracy"]
    assert all(np.isfinite(v) for v in logs.values())


def test_accumulation_that_does_not_divide_the_batch_is_refused(initial_weights):
    with pytest.raises(ValueError, match="equal micro-batches"):
        one_step(initial_weights, gradient_accumulation=3)


# === LAMB ===


def numpy_lamb(w, grads, lr, wd, adapt, b1=0.9, b2=0.999, eps=1e-6):
    """LAMB (You et al., 2019, Algorithm 2) written out for one variable."""
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        if adapt:
            r = r + wd * w
            w_norm, r_norm = np.linalg.norm(w), np.linalg.norm(r)
            r = r * (w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0)
        w = w - lr * r
    return w


def test_lamb_matches_a_hand_written_update_for_several_steps():
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(5, 3)).astype("float32")
    bias = rng.normal(size=(3,)).astype("float32")
    grads = [(rng.normal(size=(5, 3)), rng.normal(size=(3,)) * 10**-s) for s in range(4)]
    grads = [(a.astype("float32"), b.astype("float32")) for a, b in grads]
    variables = [keras.Variable(kernel, name="kernel"), keras.Variable(bias, name="bias")]
    optimizer = Lamb(learning_rate=0.05, weight_decay=0.1)
    optimizer.exclude_from_weight_decay(var_list=[variables[1]])
    for g in grads:
        optimizer.apply(list(g), variables)
    want_kernel = numpy_lamb(kernel, [g[0] for g in grads], 0.05, 0.1, adapt=True)
    want_bias = numpy_lamb(bias, [g[1] for g in grads], 0.05, 0.1, adapt=False)
    np.testing.assert_allclose(variables[0].numpy(), want_kernel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variables[1].numpy(), want_bias, rtol=1e-5, atol=1e-6)
    # The trust ratio changed the kernel's step: plain Adam would land elsewhere.
    adam = numpy_lamb(kernel, [g[0] for g in grads], 0.05, 0.0, adapt=False)
    assert np.max(np.abs(want_kernel - adam)) > 1e-3


def _compiled_apply(optimizer, variables):
    import tensorflow as tf

    @tf.function
    def step(gradients):
        optimizer.apply(gradients, variables)

    return step


def _scaled_apply(optimizer, variables, factor, fused):
    """A traced update with gradients times ``factor``: multiplied before Keras' apply,
    or (``fused``) handed to the optimizer as clip_summed_gradient hands them."""
    import tensorflow as tf

    from keras_electra.training.step import clipped_already

    @tf.function
    def step(gradients):
        if not fused:
            return optimizer.apply([g * factor for g in gradients], variables)
        with clipped_already(optimizer, tf.constant(factor)):
            optimizer.apply(gradients, variables)

    return step


@pytest.mark.parametrize("kernels", ["compiled", "tensorflow"])
def test_fused_adamw_takes_keras_adamws_steps_in_one_kernel_per_variable(kernels, monkeypatch):
    """Five steps of Keras' AdamW (decay on one variable, none on the other) and ours,
    ours given unscaled gradients and clipping's factor as clip_summed_gradient hands
    them (the compiled kernel multiplies inside), Keras the gradients multiplied."""
    from keras_electra.kernels import compiled
    from keras_electra.training.optimizer import AdamW

    if kernels == "compiled" and compiled.kernels() is None:
        pytest.skip("no compiled kernels here")
    if kernels == "tensorflow":
        monkeypatch.setattr(compiled, "ops_for", lambda *dtypes: None)
    rng = np.random.default_rng(2)
    start = [rng.normal(size=(7, 5)).astype("float32"), rng.normal(size=(5,)).astype("float32")]
    grads = [[rng.normal(size=w.shape).astype("float32") for w in start] for _ in range(5)]
    factor = np.float32(0.37)
    states, graphs = [], []
    for cls in (keras.optimizers.AdamW, AdamW):
        variables = [keras.Variable(w) for w in start]
        optimizer = cls(learning_rate=1e-2, weight_decay=0.01, epsilon=1e-6)
        optimizer.exclude_from_weight_decay(var_list=[variables[1]])
        optimizer.build(variables)
        step = _scaled_apply(optimizer, variables, factor, fused=cls is AdamW)
        graphs.append(step.get_concrete_function(grads[0]).graph)
        for g in grads:
            step(g)
        moments = [m.numpy() for m in optimizer._momentums + optimizer._velocities]
        states.append([v.numpy() for v in variables] + moments)
    for keras_value, fused_value in zip(*states, strict=True):
        np.testing.assert_allclose(fused_value, keras_value, rtol=1e-5, atol=1e-6)
    assert np.abs(states[1][0] - start[0]).max() > 1e-2  # the steps moved the weights
    fused_ops = [op.type for op in graphs[1].get_operations()]
    if kernels == "compiled":
        assert fused_ops.count("ElectraApplyAdamW") == 2
        assert "ResourceApplyAdam" not in fused_ops and "AssignSubVariableOp" not in fused_ops
    else:
        assert fused_ops.count("ResourceApplyAdam") == 2
    assert len(fused_ops) < len(graphs[0].get_operations()) - 20


def test_fused_adamw_makes_the_steps_scalars_once_not_per_variable():
    # A traced graph's nodes cost memory whatever the batch (about 26 kB each for
    # ELECTRA-Small's step), and Keras recomputes the schedule, beta^t and their casts
    # for every variable.
    import tensorflow as tf

    from keras_electra.training.optimizer import AdamW, WarmupLinearDecay

    def nodes(cls, count):
        variables = [keras.Variable(np.ones((3,), "float32")) for _ in range(count)]
        optimizer = cls(learning_rate=WarmupLinearDecay(1e-3, 10, 100), weight_decay=0.01)
        optimizer.build(variables)
        step = _compiled_apply(optimizer, variables)
        return len(step.get_concrete_function([tf.ones(3)] * count).graph.get_operations())

    keras_per_variable = (nodes(keras.optimizers.AdamW, 12) - nodes(keras.optimizers.AdamW, 2)) / 10
    ours_per_variable = (nodes(AdamW, 12) - nodes(AdamW, 2)) / 10
    assert keras_per_variable > 30
    assert ours_per_variable <= 10  # gradient in, the fused update, the decay's read-multiply-write


def test_create_optimizer_lamb_keeps_electras_exclusions_and_schedule():
    model = ElectraPretrainer(CONFIG, seed=0, hyperparameters=TINY_RECIPE)
    optimizer = create_optimizer(
        model, learning_rate=1e-3, total_steps=100, warmup_steps=10, optimizer="lamb"
    )
    assert isinstance(optimizer, Lamb)
    assert optimizer.global_clipnorm == 1.0 and optimizer.weight_decay == 0.01
    by_name = {v.path: v for v in model.trainable_variables}
    norms = [v for p, v in by_name.items() if "norm" in p]
    biases = [v for p, v in by_name.items() if p.endswith("bias")]
    kernels = [v for p, v in by_name.items() if p.endswith("kernel")]
    assert norms and biases and kernels
    assert not any(optimizer._use_weight_decay(v) for v in norms + biases)
    assert all(optimizer._use_weight_decay(v) for v in kernels)
    assert float(optimizer.learning_rate) == 0.0  # warm-up starts at 0
    with pytest.raises(ConfigError, match="Unknown optimizer 'sgd'"):
        create_optimizer(model, learning_rate=1e-3, total_steps=10, warmup_steps=1, optimizer="sgd")


# === Runs ===


def test_a_run_with_every_option_counts_steps_and_records_them(small_corpus, tmp_path):
    out = tmp_path / "run"
    options = ["--optimizer", "lamb", "--steps-per-execution", "2", "--grad-accumulation", "2"]
    code = pretrain_command(
        *("--corpus", str(small_corpus), "--output", str(out), "--no-progress"),
        *("--steps", "8", "--log-every", "4", *options),
        "--no-xla",  # XLA is tested above; compiling it here would double the time
    )
    assert code == 0
    settings = json.loads((out / "run.json").read_text())
    assert (settings["optimizer"], settings["xla"]) == ("lamb", False)
    assert (settings["steps_per_execution"], settings["grad_accumulation"]) == (2, 2)
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [4, 8]  # every executed step counted once
    assert all(np.isfinite(r["loss"]) for r in records)
    assert load_run(out)[2] == 8
    # The first window's rate leaves out the execution that traced the step function (its
    # two steps): with them, it was a fraction of the next window's.
    first, second = (r["tokens_per_sec"] for r in records)
    assert first > second / 4, (first, second)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(steps_per_execution=3), "--steps-per-execution 3 must be a positive divisor"),
        (dict(grad_accumulation=3), "--grad-accumulation 3 must be a positive divisor"),
        (dict(optimizer="adam"), "Unknown optimizer 'adam'"),
    ],
)
def test_bad_speed_options_are_one_sentence(small_corpus, tmp_path, options, message):
    with pytest.raises(ConfigError, match=message):
        pretrain(
            [str(small_corpus)],
            tmp_path / "run",
            steps=4,
            log_every=2,
            batch_size=4,
            progress=False,
            **options,
        )


MIRRORED = r"""
import json
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.training.strategy import resolve_strategy
from test_speed_options import CONFIG, TINY_RECIPE, make_batch

data = tf.data.Dataset.from_tensors(make_batch())

def train(strategy, **options):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = ElectraPretrainer(CONFIG, seed=7, hyperparameters=TINY_RECIPE)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
        model.configure_step(**options)
    model.set_weights(initial)
    logs = model.fit(data, epochs=1, verbose=0).history
    return model.get_weights(), {k: v[-1] for k, v in logs.items()}

keras.utils.set_random_seed(0)
initial = ElectraPretrainer(CONFIG, seed=7, hyperparameters=TINY_RECIPE).get_weights()
one, one_logs = train(tf.distribute.get_strategy(), xla_gradients=True)
two, two_logs = train(resolve_strategy("mirrored"), xla_gradients=True, gradient_accumulation=2)
diff = max(float(np.max(np.abs(a - b))) for a, b in zip(one, two))
moved = max(float(np.max(np.abs(a - b))) for a, b in zip(one, initial))
print(json.dumps({"max_abs_diff": diff, "moved": moved, "one": one_logs, "two": two_logs}))
"""


@pytest.mark.slow
def test_xla_gradients_and_accumulation_work_under_the_mirrored_strategy():
    """Two replicas, XLA and 2 micro-batches each: the one-device XLA step, same batch.
    (Slow: XLA compiles both programs. Each option alone is checked above, and two
    replicas against one device in tests/test_distribute.py.)"""
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        KERAS_BACKEND="tensorflow",
        PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), *sys.path]),
    )
    done = subprocess.run(
        [sys.executable, "-c", MIRRORED], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["moved"] > 1e-3
    assert result["max_abs_diff"] < 1e-4, result
    for name in ("loss", "mlm_loss", "disc_loss", "mlm_accuracy", "disc_auc"):
        assert result["two"][name] == pytest.approx(result["one"][name], rel=1e-4, abs=1e-5), name


def _fit_two_epochs(initial_weights, keras_function: bool):
    import tensorflow as tf
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(CONFIG, seed=7, hyperparameters=TINY_RECIPE)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-3, total_steps=10, warmup_steps=2)
    )
    model.set_weights(initial_weights)
    if keras_function:
        TensorFlowTrainer.make_train_function(model)  # Keras' own: fit keeps it
    data = tf.data.Dataset.from_tensor_slices(make_batch()).batch(4)  # 2 batches, no repeat
    history = model.fit(data, epochs=2, verbose=0, shuffle=False)
    return model, history


def test_one_graph_train_function_takes_keras_steps_and_ends_epochs_at_the_data_end(
    initial_weights,
):
    import tensorflow as tf

    ours, history = _fit_two_epochs(initial_weights, keras_function=False)
    theirs, their_history = _fit_two_epochs(initial_weights, keras_function=True)
    assert int(ours.optimizer.iterations) == 4  # 2 batches x 2 epochs: OutOfRange ends each
    # Traced once: the optimizer's variables exist before the trace (made inside it,
    # tf.function would trace the whole step a second time and hold both graphs).
    assert ours.train_function.on_iterator.experimental_get_tracing_count() == 1
    assert max_diff(ours.get_weights(), initial_weights) > 1e-4
    assert max_diff(ours.get_weights(), theirs.get_weights()) < 1e-6
    assert history.history["loss"] == pytest.approx(their_history.history["loss"], rel=1e-6)
    # One graph: the update's ops sit in the traced function itself, not in a callee.
    iterator = iter(tf.data.Dataset.from_tensor_slices(make_batch()).batch(4))
    concrete = ours.train_function.on_iterator.get_concrete_function(iterator)
    ops = {op.type for op in concrete.graph.get_operations()}
    assert ops & {"ResourceApplyAdam", "ElectraApplyAdamW"} and "IteratorGetNext" in ops
    # The heap's freed pages went back on the first two calls, before their reads.
    assert ours.train_function.trim.calls_left == 0
    (read,) = [op for op in concrete.graph.get_operations() if op.type == "IteratorGetNext"]
    assert [op.type for op in read.control_inputs] == ["PyFunc"]


def _fit_classifier(keras_function: bool):
    import tensorflow as tf
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    from keras_electra.finetuning import ElectraClassifier
    from keras_electra.layers import ElectraBackbone

    keras.utils.set_random_seed(3)
    model = ElectraClassifier(ElectraBackbone(CONFIG), num_classes=3)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    if keras_function:
        TensorFlowTrainer.make_train_function(model)
    rng = np.random.default_rng(0)
    features = {
        "token_ids": rng.integers(5, CONFIG.vocab_size, (8, 16)).astype("int32"),
        "segment_ids": np.zeros((8, 16), "int32"),
        "padding_mask": np.ones((8, 16), "int32"),
    }
    labels = rng.integers(0, 3, 8).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(4)
    history = model.fit(data, epochs=2, verbose=0, shuffle=False)
    return model, history


def test_fine_tuning_models_train_through_one_graph_traced_once():
    """The heads' models take the same path as the pretrainer: one graph, one trace,
    Keras' own steps (the same weights and losses as Keras' nested function)."""
    ours, history = _fit_classifier(keras_function=False)
    theirs, their_history = _fit_classifier(keras_function=True)
    assert int(ours.optimizer.iterations) == 4
    assert ours.train_function.on_iterator.experimental_get_tracing_count() == 1
    assert max_diff(ours.get_weights(), theirs.get_weights()) < 1e-6
    assert history.history["loss"] == pytest.approx(their_history.history["loss"], rel=1e-6)
