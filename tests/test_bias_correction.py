"""AdamW without Adam's bias correction (``bias_correction=False``, ``--no-bias-correction``):
google-research/electra's ``AdamWeightDecayOptimizer`` update, ``w -= lr * (m / (sqrt(v) +
eps) + wd * w)`` with the uncorrected moments, on every kernel backend and Keras' sparse
path; the default stays Keras' bias-corrected AdamW."""

import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_electra import kernels
from keras_electra.cli import main
from keras_electra.errors import ConfigError
from keras_electra.finetuning.layerwise import LayerwiseAdamW
from keras_electra.settings import PretrainSettings
from keras_electra.training.optimizer import AdamW, create_optimizer

LR, WD, EPS, B1, B2 = 1e-2, 0.1, 1e-6, 0.9, 0.999
STEPS = 5


def numpy_adamw(w, grads, *, lr=LR, wd=WD, factor=1.0, corrected=False):
    """The update in float64: with ``corrected`` False google-research/electra's (alpha =
    lr), else Keras' (alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)); decay lr * wd * w."""
    w = np.asarray(w, np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    rate = lr * factor
    for t, g in enumerate(grads, start=1):
        g = np.asarray(g, np.float64)
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * g * g
        alpha = rate * np.sqrt(1 - B2**t) / (1 - B1**t) if corrected else rate
        w = w - rate * wd * w - alpha * m / (np.sqrt(v) + EPS)
    return w


def one_sentence(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# === The update ===


def _traced(optimizer, variables):
    @tf.function
    def step(gradients):
        optimizer.apply(gradients, variables)

    return step


@pytest.mark.parametrize("name", kernels.BACKENDS)
def test_without_bias_correction_each_backend_steps_as_the_reference(name, monkeypatch):
    """Three variables: one at layer factor 0.5, one at 1, one excluded from decay. With
    bias_correction=False the steps are the reference's; by default Keras' (as before)."""
    monkeypatch.setenv(kernels.ENV, name)
    if kernels.choose().backend != name:
        pytest.skip(f"the {name} kernels cannot run here: {kernels.choose().reason}")
    rng = np.random.default_rng(5)
    start = [rng.normal(size=s).astype("float32") for s in ((6, 4), (4,), (3,))]
    grads = [[rng.normal(size=w.shape).astype("float32") for w in start] for _ in range(STEPS)]
    factors = (0.5, 1.0, 1.0)
    got = {}
    for correction in (False, True):
        variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
        extra = {} if correction else {"bias_correction": False}  # True: the default
        optimizer = LayerwiseAdamW(
            {variables[0].path: 0.5}, learning_rate=LR, weight_decay=WD, epsilon=EPS, **extra
        )
        assert optimizer.bias_correction is correction
        optimizer.exclude_from_weight_decay(var_list=[variables[2]])
        optimizer.build(variables)
        step = _traced(optimizer, variables)
        for g in grads:
            step([tf.constant(x) for x in g])
        got[correction] = [v.numpy() for v in variables]
        for i, (w, value) in enumerate(zip(start, got[correction], strict=True)):
            want = numpy_adamw(
                w,
                [g[i] for g in grads],
                wd=0.0 if i == 2 else WD,
                factor=factors[i],
                corrected=correction,
            )
            np.testing.assert_allclose(value, want, rtol=1e-6, atol=1e-6, err_msg=f"{i}")
    # The default is Keras' AdamW itself (factor 1 on the variables it shares with it).
    variables = [keras.Variable(w) for w in start[1:]]
    keras_adamw = keras.optimizers.AdamW(learning_rate=LR, weight_decay=WD, epsilon=EPS)
    keras_adamw.exclude_from_weight_decay(var_list=[variables[1]])
    for g in grads:
        keras_adamw.apply([tf.constant(x) for x in g[1:]], variables)
    for ours, theirs in zip(got[True][1:], variables, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-6, atol=1e-6)
    # The two rules differ: the reference's early steps are larger.
    assert np.abs(got[False][1] - got[True][1]).max() > 1e-3


def _gather_gradient(table: keras.Variable, ids, weights) -> tf.IndexedSlices:
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, ids) * weights)
    gradient = tape.gradient(loss, table)
    assert isinstance(gradient, tf.IndexedSlices)
    return gradient


def test_sparse_gradients_take_the_references_update_without_bias_correction():
    """An embedding gather's gradient (IndexedSlices) goes through Keras' own Adam step:
    it must land on the reference's update too (and by default on Keras'). The rows are
    distinct: Keras squares a repeated row's parts apart, which no dense update does."""
    rng = np.random.default_rng(9)
    start = rng.normal(size=(7, 3)).astype("float32")
    ids = tf.constant([1, 4, 6])
    weights = [rng.normal(size=(3, 3)).astype("float32") for _ in range(STEPS)]
    dense = []
    for w in weights:
        g = np.zeros_like(start)
        np.add.at(g, ids.numpy(), w)
        dense.append(g)
    results = {}
    for make in (
        lambda: AdamW(learning_rate=LR, weight_decay=WD, epsilon=EPS, bias_correction=False),
        lambda: AdamW(learning_rate=LR, weight_decay=WD, epsilon=EPS),
        lambda: keras.optimizers.AdamW(learning_rate=LR, weight_decay=WD, epsilon=EPS),
    ):
        table = keras.Variable(start)
        optimizer = make()
        for w in weights:
            optimizer.apply([_gather_gradient(table, ids, w)], [table])
        results[len(results)] = table.numpy()
    want = numpy_adamw(start, dense, corrected=False)
    np.testing.assert_allclose(results[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(results[1], numpy_adamw(start, dense, corrected=True), atol=1e-6)
    np.testing.assert_allclose(results[1], results[2], rtol=1e-6, atol=1e-6)
    assert np.abs(results[0] - results[1]).max() > 1e-3


def test_the_option_survives_get_config_and_serialization():
    for optimizer in (
        AdamW(learning_rate=LR, bias_correction=False),
        LayerwiseAdamW({"w": 0.5}, learning_rate=LR, bias_correction=False),
    ):
        assert optimizer.get_config()["bias_correction"] is False
        again = type(optimizer).from_config(optimizer.get_config())
        assert again.bias_correction is False
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(optimizer)
        )
        assert type(restored) is type(optimizer) and restored.bias_correction is False
    assert AdamW.from_config(AdamW(learning_rate=LR).get_config()).bias_correction is True


def _model() -> keras.Model:
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])


def test_create_optimizer_passes_it_on_and_lamb_refuses_it_in_one_sentence():
    common = dict(learning_rate=1e-3, total_steps=10, warmup_steps=1)
    model = _model()
    assert create_optimizer(model, **common).bias_correction is True
    assert create_optimizer(model, **common, bias_correction=False).bias_correction is False
    scaled = create_optimizer(model, **common, loss_scale=True, bias_correction=False)
    assert scaled.inner_optimizer.bias_correction is False
    create_optimizer(model, **common, optimizer="lamb")  # LAMB with its own correction
    with pytest.raises(ConfigError) as raised:
        create_optimizer(model, **common, optimizer="lamb", bias_correction=False)
    message = str(raised.value)
    assert "--no-bias-correction" in message and "LAMB" in message
    assert message.count(". ") == 0 and message.endswith(".")
    with pytest.raises(ConfigError, match=re.escape(message)):
        PretrainSettings(corpus=["a"], optimizer="lamb", bias_correction=False).resolved()


# === The commands ===


def _plan_rows(out: str) -> dict:
    return dict(re.findall(r"^  (\S+(?: step)?)\s{2,}(.+)$", out, re.M))


def test_pretrain_takes_no_bias_correction_records_it_and_keeps_it_on_resume(
    small_corpus, tiny_run, tmp_path, capsys
):
    from keras_electra.pretraining.run import pretrain

    argv = ["pretrain", "--corpus", small_corpus, "--output", tmp_path / "r", "--dry-run"]
    status, out, err = run_cli(capsys, *argv, "--no-bias-correction")
    assert status == 0, err
    assert ", adamw without bias correction, batch " in _plan_rows(out)["steps"]
    status, out, err = run_cli(capsys, *argv)
    assert status == 0 and "bias correction" not in out, err
    status, _, err = run_cli(capsys, *argv, "--optimizer", "lamb", "--no-bias-correction")
    assert status == 2 and "LAMB" in one_sentence(err)
    plan = pretrain([str(small_corpus)], tmp_path / "r", bias_correction=False, dry_run=True)
    assert plan.settings.record()["bias_correction"] is False
    assert not (tmp_path / "r").exists()
    # A resumed run keeps its update rule (run.json recorded it: tiny_run's is the default).
    assert json.loads((tiny_run / "run.json").read_text())["bias_correction"] is True
    resume = ["pretrain", "--corpus", small_corpus, "--output", tiny_run, "--steps", "10"]
    resume += ["--batch-size", "8", "--max-seq-length", "32", "--dry-run"]
    status, _, err = run_cli(capsys, *resume, "--no-bias-correction")
    assert status == 2 and "bias_correction=True, not False" in one_sentence(err)


class _Built(Exception):
    """Raised by a spy once the optimizer is made: nothing is trained."""


def test_pretraining_builds_its_optimizer_from_the_setting(
    small_corpus, tiny_run, tmp_path, monkeypatch
):
    from keras_electra.pretraining import run

    made = []

    def spy(*args, **kwargs):
        made.append(run_create(*args, **kwargs))
        raise _Built

    run_create = run.create_optimizer
    monkeypatch.setattr(run, "create_optimizer", spy)
    with pytest.raises(_Built):
        run.pretrain(
            [str(small_corpus)],
            tmp_path / "r",
            steps=2,
            batch_size=8,
            max_seq_length=32,
            vocab=str(tiny_run / "vocab.txt"),
            config_overrides={"num_layers": 1},
            bias_correction=False,
            progress=False,
            health=False,
        )
    assert made[0].bias_correction is False


def test_finetune_takes_no_bias_correction_shows_records_and_uses_it(
    tiny_run, tmp_path, capsys, monkeypatch
):
    from keras_electra.finetuning import run

    train = tmp_path / "train.csv"
    rows = ["sentence,label"] + [f"the king {i} is here,{'ab'[i % 2]}" for i in range(16)]
    train.write_text("\n".join(rows) + "\n", encoding="utf-8")
    argv = ["finetune", "--run", tiny_run, "--task", "classify", "--train", train]
    argv += ["--text-column", "sentence", "--batch-size", "8", "--output", tmp_path / "ft"]
    argv += ["--dry-run"]
    status, out, err = run_cli(capsys, *argv, "--no-bias-correction")
    assert status == 0, err
    assert _plan_rows(out)["steps"].endswith(", AdamW without bias correction")
    status, out, err = run_cli(capsys, *argv)
    assert status == 0 and "bias correction" not in out, err
    keywords = dict(text_column="sentence", batch_size=8, epochs=1, progress=False)
    plan = run.finetune(
        str(tiny_run), "classify", str(train), bias_correction=False, dry_run=True, **keywords
    )
    assert plan.settings.training["bias_correction"] is False  # finetune.json's record
    # The run's optimizer, and LP-FT's probe optimizer, are made without it.
    made = []

    def spy(real):
        def made_and_stopped(*args, **kwargs):
            made.append(real(*args, **kwargs))
            raise _Built

        return made_and_stopped

    monkeypatch.setattr(run, "create_finetune_optimizer", spy(run.create_finetune_optimizer))
    monkeypatch.setattr(run, "AdamW", spy(run.AdamW))
    for probe_epochs in (1, 0):
        with pytest.raises(_Built):
            run.finetune(
                str(tiny_run),
                "classify",
                str(train),
                bias_correction=False,
                probe_epochs=probe_epochs,
                **keywords,
            )
    assert [type(o).__name__ for o in made] == ["AdamW", "LayerwiseAdamW"]
    assert [o.bias_correction for o in made] == [False, False]
