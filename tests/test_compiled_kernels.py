"""The compiled training kernels (kernels/kernels.cc, built by kernels/compiled.py): the
same values as the XLA kernels they replace, the same dropout draws, used by the
training step where they build, and the XLA kernels wherever they do not."""

import ctypes
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import traced_step_ops

from keras_electra import internals, kernels
from keras_electra.kernels import compiled, implementation
from keras_electra.layers.dropout import DropoutDraw, dropout_key

HAS_COMPILER = shutil.which("g++") is not None
COMPILED_OPS = (
    "ElectraAddLayerNorm",
    "ElectraAddLayerNormGrad",
    "ElectraBiasGelu",
    "ElectraBiasGeluGrad",
    "ElectraAttentionProbs",
    "ElectraAttentionProbsGrad",
    "ElectraDropout",
    "ElectraSoftmaxXent",
    "ElectraSoftmaxXentGrad",
    "ElectraSplitHeads",
    "ElectraMergeHeads",
    "ElectraInverseCdf",  # the tiny preset's sampler is not at temperature 1
)


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """kernels() as a first call sees it, building into a cache that does not exist yet
    (two directories to create)."""
    cache = tmp_path / "new" / "cache"
    monkeypatch.setenv("KERAS_ELECTRA_CACHE", str(cache))
    compiled.status.cache_clear()
    yield cache
    compiled.status.cache_clear()


def _run(x, r, norm, upstream, draw, use_compiled: bool, bias=None):
    kernels = implementation("native" if use_compiled else "xla")
    inputs = [x, r] + ([] if bias is None else [bias])
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = kernels.add_layer_norm(x, r, norm, draw, bias)
    weights = [x, r, norm.gamma, norm.beta] + ([] if bias is None else [bias])
    grads = tape.gradient(y, weights, output_gradients=upstream)
    return [tf.cast(t, tf.float32).numpy() for t in [y, *grads]]


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("rate", [0.0, 0.1])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_compiled_add_layer_norm_computes_the_xla_kernels_values(dtype, rate, with_bias):
    assert compiled.kernels() is not None  # a compiler is here: the build must work
    rng = np.random.default_rng(5)
    shape = (3, 37, 64)
    x, r, upstream = (tf.cast(rng.normal(0, 1, shape), dtype) for _ in range(3))
    norm = keras.layers.LayerNormalization(epsilon=1e-12)
    norm.build((None, 64))
    gamma = rng.normal(1, 0.3, 64)
    gamma[3] = 1e-4  # below the 1e-3 floor
    norm.gamma.assign(gamma)
    norm.beta.assign(rng.normal(0, 0.3, 64))
    bias = tf.constant(rng.normal(0, 0.5, 64), tf.float32) if with_bias else None
    draw = DropoutDraw(dropout_key(tf.constant([3, 4])), tf.shape(x), rate) if rate else None
    ours = _run(x, r, norm, upstream, draw, True, bias)
    xla = _run(x, r, norm, upstream, draw, False, bias)
    step = 2**-7 if dtype == "bfloat16" else 1e-6  # one rounding step, relative
    names = ("y", "dx", "dresidual", "dgamma", "dbeta", "dbias")
    for name, a, b in zip(names[: len(ours)], ours, xla, strict=True):
        scale = np.abs(b).max()
        assert np.abs(a - b).max() <= step * scale + 1e-6, name
    if with_bias:  # the bias's gradient is x's summed over the rows, in float32
        np.testing.assert_allclose(ours[5], ours[1].reshape(-1, 64).sum(0), rtol=0.02, atol=0.05)
    if rate:  # the same elements dropped: the hashed draws are XLA's
        dropped = xla[1] == 0
        assert 0.05 < dropped.mean() < 0.15
        np.testing.assert_array_equal(ours[1] == 0, dropped)


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
def test_the_training_step_runs_the_compiled_kernels_and_the_build_is_reused(fresh_build):
    ops = {op.type for op in traced_step_ops("mixed_bfloat16")}
    assert set(COMPILED_OPS) <= ops
    (library,) = fresh_build.glob("kernels/*/kernels.so")
    assert library == compiled.library_path(compiled._compiler())
    # Every directory the build created, and the library, are this user's alone.
    for path in (fresh_build.parent, fresh_build, library.parents[1], library.parent, library):
        info = os.lstat(path)
        assert (info.st_mode & 0o777, info.st_uid) == (0o700, os.geteuid()), path
    built = library.stat().st_mtime_ns
    compiled.status.cache_clear()
    assert compiled.kernels() is not None
    assert library.stat().st_mtime_ns == built  # loaded from the cache, not rebuilt


def test_disabled_or_without_a_compiler_training_keeps_the_xla_kernels(
    fresh_build, monkeypatch, caplog
):
    # The deprecated switch is KERAS_ELECTRA_KERNELS=xla, and says so once.
    monkeypatch.setenv(kernels.DEPRECATED_ENV, "0")
    kernels.clear()
    try:
        with caplog.at_level(logging.WARNING, logger=kernels.__name__):
            first, second = kernels.choose(), kernels.choose()
        ops = {op.type for op in traced_step_ops("mixed_bfloat16")}
    finally:
        monkeypatch.delenv(kernels.DEPRECATED_ENV)
        kernels.clear()
    assert first == second and first.backend == "xla" and "deprecated" in first.reason
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{kernels.DEPRECATED_ENV}=0 is {kernels.ENV}=xla" in warning
    assert not ops & set(COMPILED_OPS)
    assert not list(fresh_build.glob("kernels/*/*.so"))  # the xla kernels never build them
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    compiled.status.cache_clear()
    assert compiled.kernels() is None
    assert not list(fresh_build.glob("kernels/*/*.so"))


def test_a_failed_build_warns_once_and_leaves_no_partial_library(fresh_build, monkeypatch, caplog):
    monkeypatch.setenv("CXX", "false")  # a "compiler" that fails
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        assert compiled.kernels() is None
        assert compiled.kernels() is None  # cached: no second attempt, no second warning
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "training uses the XLA kernels" in warnings[0].getMessage()
    assert not list(fresh_build.glob("kernels/*/*"))


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_compiled_bias_gelu_computes_the_xla_kernels_values(dtype):
    assert compiled.kernels() is not None
    rng = np.random.default_rng(6)
    h = tf.cast(rng.normal(0, 2, (5, 7, 48)), dtype)
    upstream = tf.cast(rng.normal(0, 1, (5, 7, 48)), dtype)
    bias = tf.constant(rng.normal(0, 0.5, 48), tf.float32)

    def run(use_compiled):
        with tf.GradientTape() as tape:
            tape.watch([h, bias])
            y = implementation("native" if use_compiled else "xla").bias_gelu(h, bias)
        grads = tape.gradient(y, [h, bias], output_gradients=upstream)
        return [tf.cast(t, tf.float32).numpy() for t in (y, *grads)]

    step = 2**-7 if dtype == "bfloat16" else 1e-5  # one rounding step, relative
    for name, a, b in zip(("y", "dh", "dbias"), run(True), run(False), strict=True):
        assert np.abs(a - b).max() <= step * np.abs(b).max() + 1e-6, name


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
@pytest.mark.parametrize("mask_shape", [None, (3, 1, 1, 9), (3, 1, 7, 9), (1, 2, 1, 1)], ids=str)
@pytest.mark.parametrize("rate", [0.0, 0.2])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_compiled_attention_computes_the_xla_kernels_values(dtype, rate, mask_shape):
    """Softmax, dropout and the product with the values, forward and backward, with the
    masks the attention passes (padding over keys, a full mask, one over heads) and a
    row masked entirely."""
    assert compiled.kernels() is not None
    rng = np.random.default_rng(7)
    scores = tf.cast(rng.normal(0, 3, (3, 2, 7, 9)), dtype)
    values = tf.cast(rng.normal(0, 1, (3, 2, 9, 5)), dtype)
    upstream = tf.cast(rng.normal(0, 1, (3, 2, 7, 5)), dtype)
    mask = None
    if mask_shape is not None:
        mask = rng.random(mask_shape) < 0.7
        mask.reshape(-1, mask_shape[-1])[0] = False  # a row (or rows) with no key at all
        mask = tf.constant(mask)
    draw = DropoutDraw(dropout_key(tf.constant([5, 6])), tf.shape(scores), rate) if rate else None

    def run(use_compiled):
        kernels = implementation("native" if use_compiled else "xla")
        with tf.GradientTape() as tape:
            tape.watch([scores, values])
            out = kernels.attention_values(scores, mask, values, draw, 0.35)
        grads = tape.gradient(out, [scores, values], output_gradients=upstream)
        return [tf.cast(t, tf.float32).numpy() for t in (out, *grads)]

    ours, xla = run(True), run(False)
    step = 2**-7 if dtype == "bfloat16" else 1e-5  # one rounding step, relative
    for name, a, b in zip(("context", "d_scores", "d_values"), ours, xla, strict=True):
        assert np.abs(a - b).max() <= 2 * step * np.abs(b).max() + 1e-6, name


def test_float16_and_mixed_dtypes_keep_the_xla_kernels():
    assert compiled.ops_for(tf.float16, tf.float16) is None
    assert compiled.ops_for(tf.bfloat16, tf.float32) is None


def test_a_graph_xla_compiles_whole_keeps_the_xla_kernels():
    """``--xla`` (and ``jit_compile``) compile the loss and its gradients as one XLA
    function, which cannot hold a custom op: the kernels inside it are XLA's."""
    x = tf.constant(np.random.default_rng(8).normal(0, 1, (6, 16)), tf.bfloat16)
    norm = keras.layers.LayerNormalization(epsilon=1e-12)
    norm.build((None, 16))

    @tf.function(jit_compile=True)
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = implementation("native").add_layer_norm(x, x, norm)
            y = implementation("native").bias_gelu(y, tf.zeros([16]))
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        return y, tape.gradient(loss, x)

    ops = {op.type for op in run.get_concrete_function(x).graph.get_operations()}
    assert not {t for t in ops if t.startswith("Electra")}
    y, dx = run(x)
    assert np.isfinite(tf.cast(dx, tf.float32).numpy()).all() and y.shape == x.shape


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_split_heads_computes_what_the_bias_add_and_transposes_compute(dtype, heads):
    """The split's q, k, v equal TensorFlow's bias add + transpose + unstack bit for bit,
    the projection's gradient is the stacked and transposed upstream exactly, and the
    bias's gradient its column sums (summed in float32)."""
    assert compiled.kernels() is not None
    rng = np.random.default_rng(11)
    batch, length, dim = 2, 5, 4
    qkv = tf.cast(rng.normal(0, 1, (batch, length, 3 * heads * dim)), dtype)
    bias = tf.cast(rng.normal(0, 1, (3, heads, dim)), dtype)
    upstream = [tf.cast(rng.normal(0, 1, (batch, heads, length, dim)), dtype) for _ in "qkv"]

    def reference(qkv, bias):
        added = tf.reshape(qkv, [batch, length, 3, heads, dim]) + bias
        return tf.unstack(tf.transpose(added, [2, 0, 3, 1, 4]))

    results = []
    native = implementation("native").split_heads
    for split in (native, lambda qkv, bias, heads: reference(qkv, bias)):
        with tf.GradientTape() as tape:
            tape.watch([qkv, bias])
            out = split(qkv, bias, heads)
        grads = tape.gradient(out, [qkv, bias], output_gradients=upstream)
        results.append([tf.cast(t, tf.float32).numpy() for t in (*out, *grads)])
    ours, theirs = results
    for name, a, b in zip(("q", "k", "v", "dqkv"), ours, theirs, strict=False):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert ours[0].shape == (batch, heads, length, dim)
    exact = np.stack([tf.cast(u, tf.float32).numpy() for u in upstream]).sum(axis=(1, 3))
    step = 2**-8 if dtype == "bfloat16" else 1e-6  # the float32 sum's one rounding
    assert np.abs(ours[4] - exact).max() <= step * np.abs(exact).max() + 1e-6


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
def test_the_compiled_loss_names_a_label_outside_the_vocabulary():
    """One sentence naming the label and the range, not a crash or a silent NaN."""
    assert compiled.kernels() is not None
    logits = tf.zeros([2, 5], tf.bfloat16)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label 7 is outside \[0, 5\)"):
        implementation("native").sparse_cross_entropy(logits, tf.constant([1, 7]))


# kernels() in a fresh process (TensorFlow registers an op once per process): whether it
# returned the ops, on a first and a second call, and the warnings it logged.
_PROBE = """
import json, logging
from keras_electra.kernels import compiled
warnings = []
handler = logging.Handler(logging.WARNING)
handler.emit = lambda record: warnings.append(record.getMessage())
compiled.log.addHandler(handler)
loaded = [compiled.kernels() is not None for _ in range(2)]
print(json.dumps({"loaded": loaded, "warnings": warnings}))
"""


def _run_in_a_new_process(script: str, cache: Path, *args: str, **env: str) -> dict:
    """``script``'s last printed line, read as JSON, from a fresh Python process given
    ``args``, with the kernel cache at ``cache``, the kernel choice unset and ``env``
    added."""
    unset = (kernels.DEPRECATED_ENV, kernels.ENV)
    env = {**{k: v for k, v in os.environ.items() if k not in unset}, **env}
    env["KERAS_ELECTRA_CACHE"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _plant(library: Path, marker: Path) -> None:
    """A valid shared object at ``library`` whose constructor, when it is loaded, writes
    ``marker``: what another user would plant."""
    source = marker.with_name("planted.c")
    source.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n'
        "}\n"
    )
    library.parent.mkdir(parents=True)
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)


def _assert_refused(cache: Path, library: Path, marker: Path, reason: str) -> None:
    """kernels() in a new process returns None with one warning naming ``reason`` and
    the library, and never loads the planted library, which does run when loaded."""
    result = _run_in_a_new_process(_PROBE, cache)
    assert result["loaded"] == [False, False]
    (warning,) = result["warnings"]
    assert reason in warning and str(library) in warning
    assert "training uses the XLA kernels" in warning
    assert not marker.exists()  # its constructor never ran
    ctypes.CDLL(str(library))  # the control: loading it does run it
    assert marker.exists()


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: kernels() looks at no cache")
def test_a_library_planted_in_a_group_or_other_writable_cache_is_never_loaded(
    tmp_path, monkeypatch
):
    cache = tmp_path / "shared"
    monkeypatch.setenv("KERAS_ELECTRA_CACHE", str(cache))
    library = compiled.library_path(compiled._compiler())
    marker = tmp_path / "the-planted-library-ran"
    _plant(library, marker)
    cache.chmod(0o777)
    reason = f"{cache.resolve()} is writable by group or others (mode 777)"
    _assert_refused(cache, library, marker, reason)


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: kernels() looks at no cache")
@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_a_library_in_a_directory_of_another_user_is_never_loaded(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERAS_ELECTRA_CACHE", str(cache))
    library = compiled.library_path(compiled._compiler())
    marker = tmp_path / "the-planted-library-ran"
    _plant(library, marker)
    for directory in (cache, library.parents[1], library.parent):
        directory.chmod(0o700)
    os.chown(library.parent, 65534, 65534)  # nobody's
    reason = f"{library.parent} belongs to uid 65534, not to this user (0)"
    _assert_refused(cache, library, marker, reason)


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: kernels() looks at no cache")
def test_a_folder_above_the_cache_that_others_can_write_is_refused(tmp_path, monkeypatch, caplog):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # no sticky bit: another user could rename the private cache away
    monkeypatch.setenv("KERAS_ELECTRA_CACHE", str(shared / "mine" / "cache"))
    compiled.status.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=compiled.__name__):
            assert compiled.kernels() is None
    finally:
        compiled.status.cache_clear()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{shared} is writable by group or others without the sticky bit (mode 777)" in warning
    assert "training uses the XLA kernels" in warning
    assert not list(shared.glob("mine/cache/kernels/*/*.so"))  # nothing built there
    shared.chmod(0o1777)  # as /tmp: others may write, but not replace what is not theirs
    assert compiled._unsafe_above(shared / "mine") is None


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory) -> Path:
    """A ``KERAS_ELECTRA_CACHE`` holding the library and digest this process built (or
    loaded), where kernels() looks for them: each test copies it, then tampers."""
    if not HAS_COMPILER or compiled.kernels() is None:
        pytest.skip("the compiled kernels do not build here")
    built = compiled.library_path(compiled._compiler())
    cache = tmp_path_factory.mktemp("built") / "cache"
    target = cache.resolve() / "kernels" / built.parent.name / built.name
    target.parent.mkdir(mode=0o700, parents=True)
    for directory in (cache, target.parent.parent, target.parent):
        directory.chmod(0o700)
    for source in (built, compiled.digest_path(built)):
        shutil.copy2(source, target.parent / source.name)
    return cache


def _foreign_library(path: Path, marker: Path) -> None:
    """A valid shared object at ``path``, this user's, mode 0700, whose constructor
    writes ``marker`` when it is loaded: another library where the built one was."""
    source = path.with_suffix(".c")
    source.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n'
        "}\n"
    )
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    path.chmod(0o700)


# Cases in turn in one fresh process, each with its own cache: a few training steps after
# kernels() looked at the cache; per case the backend chosen, its reason, the warnings, the
# losses, and how many libraries this process had loaded as its own before the case (none:
# every case is refused). With a case's "swap_to" set, the library's path is replaced by
# that file between the check and the load (tf.load_op_library is the load; the check
# came before it).
_TRAIN = """
import json, logging, os, sys, traceback
from keras_electra import kernels
from keras_electra.kernels import compiled
warnings = []
handler = logging.Handler(logging.WARNING)
handler.emit = lambda record: warnings.append(record.getMessage())
kernels.log.addHandler(handler)  # and compiled.log's records, its child's
import numpy as np
import tensorflow as tf
load = tf.load_op_library
swap_to = None
def swap_then_load(path):
    if swap_to:
        library = compiled.library_path(compiled._compiler())
        os.replace(swap_to, library)
    return load(path)
tf.load_op_library = swap_then_load

def train():
    choice = kernels.choose()
    from keras_electra.pretraining.pretrainer import ElectraPretrainer
    from keras_electra.training.optimizer import create_optimizer
    model = ElectraPretrainer.from_preset("tiny", seed=1, vocab_size=300, num_layers=1,
                                          max_position_embeddings=16)
    model.compile(optimizer=create_optimizer(model, learning_rate=1e-3, total_steps=3,
                                             warmup_steps=1))
    ids = np.random.default_rng(0).integers(5, 300, (4, 16)).astype("int32")
    batch = {"token_ids": ids, "padding_mask": np.ones_like(ids),
             "segment_ids": np.zeros_like(ids)}
    history = model.fit(tf.data.Dataset.from_tensors(batch).repeat(3), verbose=0)
    return {"backend": choice.backend, "reason": choice.reason, "warnings": list(warnings),
            "loss": history.history["loss"]}

results = {}
for name, case in json.loads(sys.argv[1]).items():
    os.environ["KERAS_ELECTRA_CACHE"] = case["cache"]
    swap_to = case.get("swap_to")
    kernels.clear()  # kernels() and the backend choice look at this case's cache
    warnings.clear()
    loaded_before = len(compiled._LOADED)
    try:
        results[name] = {"loaded_before": loaded_before, **train()}
    except Exception:
        results[name] = {"error": traceback.format_exc()[-3000:]}
print(json.dumps(results))
"""

# The order the one process takes the cases in. Only "op-missing" and "swap" load a
# library (the other one, whose constructor writes that case's marker; the genuine copy),
# and a loaded library stays loaded: they come last, the genuine copy's ops (which would
# stay registered) last of all. Every case is refused before kernels() keeps a module, so
# each starts as a fresh process would: kernels() has loaded nothing (see loaded_before).
TAMPERINGS = ["another-library", "link", "op-missing", "swap"]


@pytest.fixture(scope="module")
def tampered(built_cache, tmp_path_factory) -> dict:
    """Each tampering done to its own copy of the built cache, then one fresh process
    trains after kernels() looked at each in turn: per tampering the library, the marker
    its other library writes when it runs, the reason expected, and the process's result."""
    cases, expected = {}, {}
    for tampering in TAMPERINGS:
        tmp_path = tmp_path_factory.mktemp(tampering)
        cache = tmp_path / "cache"
        shutil.copytree(built_cache, cache)
        cache.chmod(0o700)
        (library,) = cache.resolve().glob("kernels/*/kernels.so")
        marker = tmp_path / "the-other-library-ran"
        other = tmp_path / "other.so"
        _foreign_library(other, marker)
        case = {"cache": str(cache)}
        if tampering == "another-library":
            os.replace(other, library)
            reason = "is not the library built there"
        elif tampering == "link":
            genuine = tmp_path / "genuine.so"
            shutil.copy2(library, genuine)
            library.unlink()
            library.symlink_to(genuine)
            reason = f"{library} is a symbolic link"
        elif tampering == "swap":
            case["swap_to"] = str(other)
            reason = f"{library} was replaced while it was being loaded"
        else:
            os.replace(other, library)
            digest = hashlib.sha256(library.read_bytes()).hexdigest()
            compiled.digest_path(library).write_text(digest + "\n")
            reason = f"{library} loads without the op electra_add_layer_norm"
        cases[tampering] = case
        expected[tampering] = {"library": library, "marker": marker, "reason": reason}
    first = Path(cases[TAMPERINGS[0]]["cache"])
    results = _run_in_a_new_process(_TRAIN, first, json.dumps(cases))
    return {name: {**expected[name], "result": results[name]} for name in TAMPERINGS}


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
@pytest.mark.parametrize("tampering", ["another-library", "link", "swap", "op-missing"])
def test_a_library_other_than_the_one_built_is_refused_and_training_falls_back(tampering, tampered):
    """Another valid shared library in the built one's place (same owner and mode), a
    symbolic link to a genuine copy, a swap between the check and the load, and a
    library that loads (its digest recorded) without the ops: each is refused with one
    warning, and training completes on the XLA kernels. The other library never runs,
    but where the test itself records its digest."""
    case = tampered[tampering]
    library, marker, reason, result = (case[k] for k in ("library", "marker", "reason", "result"))
    assert "error" not in result, result["error"]
    assert result["loaded_before"] == 0
    assert result["backend"] == "xla", result
    assert reason in result["reason"]
    (warning,) = result["warnings"]
    assert reason in warning and "training uses the XLA kernels" in warning
    assert f"remove {library.parent} to build it again" in warning
    assert len(result["loss"]) == 1 and np.isfinite(result["loss"]).all()
    # The other library ran only where its digest was recorded: never after a swap,
    # though the path names it now (what loaded was the open file checked before).
    assert marker.exists() == (tampering == "op-missing")


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the kernels with")
def test_the_cache_key_covers_every_input_of_the_build(monkeypatch, tmp_path):
    """The source (its content, and its folder: the same bytes at the source's former
    place, layers/kernels.cc, key another library), the flags, TensorFlow's version and
    flags, the compiler's path and version, and the CPU each change the library's
    directory."""
    assert compiled.SOURCE.parts[-3:] == ("keras_electra", "kernels", "kernels.cc")
    moved = tmp_path / "layers" / "kernels.cc"
    moved.parent.mkdir()
    shutil.copyfile(compiled.SOURCE, moved)
    first = compiled.library_path("/usr/bin/g++")
    assert first.parent.parent == compiled.cache_root() and first.name == "kernels.so"
    changes = [
        (compiled, "SOURCE", Path(__file__)),
        (compiled, "SOURCE", moved),
        (compiled, "_FLAGS", [*compiled._FLAGS, "-DMORE"]),
        (tf, "__version__", tf.__version__ + ".1"),
        (tf.sysconfig, "get_link_flags", lambda: ["-lmore"]),
        (compiled, "_compiler_version", lambda compiler: "g++ (GCC) 99.1"),
        (compiled, "_cpu_signature", lambda: "model name: another"),
    ]
    paths = {first.parent, compiled.library_path("/usr/local/bin/g++").parent}
    for owner, name, value in changes:
        with monkeypatch.context() as patch:
            patch.setattr(owner, name, value)
            paths.add(compiled.library_path("/usr/bin/g++").parent)
    assert len(paths) == 2 + len(changes)
    assert compiled.library_path("/usr/bin/g++") == first  # and only they do


def test_the_private_xla_context_check_exists_and_tells_xla_graphs_apart():
    """``_in_xla_function`` calls TensorFlow's private
    ``control_flow_util.GraphOrParentsInXlaContext`` (through keras_electra.internals): the
    day it moves, this fails."""
    from tensorflow.python.ops import control_flow_util

    assert callable(control_flow_util.GraphOrParentsInXlaContext)
    seen = []

    def trace(x):
        seen.append(compiled._in_xla_function())
        return x + 1

    x = tf.constant(1.0)
    tf.function(trace, jit_compile=True).get_concrete_function(x)
    tf.function(trace).get_concrete_function(x)
    assert seen == [True, False]


def test_without_the_private_xla_context_check_it_assumes_xla_and_warns_once(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorflow.python.ops.control_flow_util", None)
    internals._warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger=internals.__name__):
        assert compiled._in_xla_function() and compiled._in_xla_function()
    internals._warn_once.cache_clear()
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "GraphOrParentsInXlaContext" in warning.getMessage()
