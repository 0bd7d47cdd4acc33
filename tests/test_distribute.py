"""Distribution strategies: a 2-replica step equals a one-device step on the same global batch.

Logical CPU devices must be configured before TensorFlow initializes, so the
multi-replica checks run in a fresh subprocess.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_electra.errors import ConfigError
from keras_electra.training.strategy import resolve_strategy

EQUIVALENCE = r"""
import json, sys, traceback
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
import os, tempfile
from keras_electra.config import ElectraConfig
from keras_electra.data import ElectraTokenizer
from keras_electra.pretraining import load_run, save_run
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.training.strategy import resolve_strategy

rng = np.random.default_rng(0)
ids = rng.integers(5, 300, (8, 32)).astype("int32")
mask = np.ones_like(ids)
mask[:3, 20:] = 0  # uneven padding: the replicas predict different numbers of tokens
ids[:, 0], ids = 2, ids * mask
data = tf.data.Dataset.from_tensors(
    {"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)})
# One strategy for every case: a second MirroredStrategy in the process would reuse the
# first one's collective keys, which the runtime has bound to the first one's tensors.
mirrored = resolve_strategy("mirrored")

def train(strategy, config, hyperparameters, clip, initial, on_nan):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = ElectraPretrainer(config, seed=7, hyperparameters=hyperparameters)
        # With a clip, the global norm of the summed gradient (~1 here) must be clipped
        # once, not each replica's share of it (as Keras' optimizers do on their own).
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=clip))
        model.configure_step(on_nan=on_nan)
    model.set_weights(initial)
    logs = model.fit(data, epochs=1, verbose=0).history
    return model, {k: v[-1] for k, v in logs.items()}

def case(clip, temperature, on_nan, dropout):
    # The clip norm (None for no clip) and the sampling temperature (at 1 the sampler
    # takes the MLM loss's probabilities, otherwise its own softmax).
    config = ElectraConfig.from_preset("tiny", vocab_size=300, num_layers=1, dropout=dropout,
                                       max_position_embeddings=32)
    sampling = {"temperature": temperature}
    keras.utils.set_random_seed(0)
    initial = ElectraPretrainer(config, seed=7, hyperparameters=sampling).get_weights()
    one, one_logs = train(tf.distribute.get_strategy(), config, sampling, clip, initial, on_nan)
    two, two_logs = train(mirrored, config, sampling, clip, initial, on_nan)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(one.get_weights(), two.get_weights()))
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(one.get_weights(), initial))
    # Each replica's own copy of every variable: the replicas applied the same update.
    copies = [w.value.values for w in two.weights + two.optimizer.variables]
    replica_gap = max(float(np.max(np.abs(c[1].numpy() - c[0].numpy()))) for c in copies)
    # The 2-replica model saved as a run directory (save_run) reads back as it is.
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(295)]
    run_dir = os.path.join(tempfile.mkdtemp(), "run")
    save_run(two, ElectraTokenizer(tokens, lowercase=config.lowercase), run_dir)
    loaded, _, saved_step = load_run(run_dir)
    saved_gap = max(float(np.max(np.abs(a - b)))
                    for a, b in zip(loaded.get_weights(), two.get_weights()))
    return {"replicas": mirrored.num_replicas_in_sync, "max_abs_diff": diff,
            "moved": moved, "one": one_logs, "two": two_logs,
            "replica_gap": replica_gap, "mirrored": sum(len(c) == 2 for c in copies),
            "variables": len(copies), "saved_step": saved_step, "saved_gap": saved_gap}

# argv: a JSON object of cases, each [clip norm or null, temperature, on_nan or null,
# dropout]. A case that fails reports its traceback; the others still run.
results = {}
for name, (clip, temperature, on_nan, dropout) in json.loads(sys.argv[1]).items():
    try:
        results[name] = case(clip, temperature, on_nan, dropout)
    except Exception:
        results[name] = {"error": traceback.format_exc()[-3000:]}
print(json.dumps(results))
"""

RUN = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_electra.pretraining.run import load_run, pretrain
result = pretrain([sys.argv[1]], sys.argv[2], steps=2, log_every=1, batch_size=8,
                  max_seq_length=32, vocab_size=500, progress=False,
                  config_overrides={"num_layers": 1}, strategy="mirrored")
_, _, step = load_run(sys.argv[2])
print(json.dumps({"step": step, "history": result.history,
                  "replicas": result.model.distribute_strategy.num_replicas_in_sync,
                  "clipnorm": result.model.optimizer.global_clipnorm}))
"""


def run_python(script, *args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    done = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# The equivalence cases: (clip norm, sampling temperature, on_nan, dropout). One
# subprocess runs them all (importing TensorFlow and building the model is most of a case's
# time). With an on_nan policy, as every `pretrain` runs, the update is applied inside a
# branch on the step's finiteness (it applied half a step on two replicas: each replica its
# own share). With dropout, each replica draws the global batch's masks of its own rows
# (replica 1 drew rows 0-3's).
EQUIVALENCE_CASES = {
    "unclipped": (None, 2.0, None, 0.0),
    "global-norm-clipped": (0.05, 2.0, None, 0.0),
    "sampling-from-the-loss-softmax": (None, 1.0, None, 0.0),
    "as-pretrain-runs-guarded-with-dropout": (0.05, 2.0, "stop", 0.1),
}


@pytest.fixture(scope="module")
def equivalence_results() -> dict:
    return run_python(EQUIVALENCE, json.dumps(EQUIVALENCE_CASES))


@pytest.mark.parametrize("case", list(EQUIVALENCE_CASES))
def test_two_replica_step_equals_one_device_step_on_the_same_global_batch(
    case, equivalence_results
):
    result = equivalence_results[case]
    assert "error" not in result, result["error"]
    assert result["replicas"] == 2
    assert result["moved"] > 1e-3  # the step changed the weights
    assert result["max_abs_diff"] < 1e-5, result
    # The two replicas hold the same bits: each applied the same all-reduced update.
    assert result["mirrored"] == result["variables"] > 0
    assert result["replica_gap"] == 0.0, result["replica_gap"]
    assert result["saved_step"] == 1 and result["saved_gap"] == 0.0, result  # save_run
    # Metrics aggregate over replicas: the 2-replica losses are the global-batch losses.
    for name in ("loss", "mlm_loss", "disc_loss", "mlm_accuracy", "disc_accuracy", "disc_auc"):
        assert result["two"][name] == pytest.approx(result["one"][name], rel=1e-4, abs=1e-5), name


def test_pretrain_with_the_mirrored_strategy_checkpoints_and_resumes(small_corpus, tmp_path):
    result = run_python(RUN, str(small_corpus), str(tmp_path / "run"))
    assert result["replicas"] == 2 and result["step"] == 2
    assert all(v == v for r in result["history"] for v in r.values())  # no NaN
    # The replicas trace the step in their own threads, each switching the optimizer's
    # clipping off while it applies the gradient it clipped: the clip is back afterwards
    # (it was None, and every step traced later went unclipped).
    assert result["clipnorm"] == 1.0


UNEVEN = r"""
import json
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.training.strategy import resolve_strategy

ids = np.random.default_rng(0).integers(5, 300, (7, 32)).astype("int32")
ids[:, 0] = 2
data = tf.data.Dataset.from_tensors(
    {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)})
with resolve_strategy("mirrored").scope():
    model = ElectraPretrainer.from_preset("tiny", vocab_size=300, num_layers=1)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1))
logs = model.fit(data, epochs=2, verbose=0).history
replicas = model.distribute_strategy.num_replicas_in_sync
print(json.dumps({"loss": logs["loss"], "replicas": replicas}))
"""


def test_a_batch_the_replicas_split_unevenly_trains(tmp_path):
    # 7 rows on 2 replicas (4 and 3): Keras' symbolic build averaged the replicas' halves
    # of the first batch and failed ("AddN ... [4,64] != [3,64]").
    result = run_python(UNEVEN)
    assert result["replicas"] == 2 and all(np.isfinite(result["loss"])), result


def test_requested_hardware_that_is_absent_is_one_sentence(monkeypatch):
    with pytest.raises(ConfigError, match="needs at least two GPUs"):
        resolve_strategy("mirrored")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="needs TF_CONFIG"):
        resolve_strategy("multi_worker")
    with pytest.raises(ConfigError, match="Unknown strategy 'gpu'"):
        resolve_strategy("gpu")


def test_auto_and_one_device_use_a_single_replica_here():
    assert resolve_strategy("auto").num_replicas_in_sync == 1
    assert resolve_strategy("one_device").num_replicas_in_sync == 1
    assert isinstance(resolve_strategy("one_device"), tf.distribute.OneDeviceStrategy)


def test_each_replica_draws_the_global_batchs_dropout_masks_of_its_rows():
    """Replica r's dropout key is shifted past the earlier replicas' elements: the
    replicas' masks together are one device's mask of the global batch (replica 1 of 2
    drew rows 0-3's masks before). One device's key is untouched (its runs are the same
    bits as before)."""
    from keras_electra.layers.dropout import DropoutDraw, dropout_key, replica_key

    key = dropout_key(tf.constant([3, 7], tf.int64))
    whole = DropoutDraw(key, tf.constant([8, 16, 64]), 0.5).mask(tf.float32).numpy()
    shares = [
        DropoutDraw(replica_key(key, tf.constant([2, 16, 64]), r), [2, 16, 64], 0.5)
        .mask(tf.float32)
        .numpy()
        for r in range(4)
    ]
    assert (np.concatenate(shares) == whole).all()
    assert (shares[1] != shares[0]).any()
    assert (replica_key(key, tf.constant([2, 16, 64]), 0).numpy() == key.numpy()).all()


@pytest.fixture
def http1_server():
    """An HTTP/1 server on 127.0.0.1 (a port that accepts connections, but not gRPC's)."""
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", ["grpc://127.0.0.1:1", "my-tpu", "http1"])
def test_a_tpu_address_that_does_not_answer_is_no_tpu(monkeypatch, name, http1_server):
    # grpc://127.0.0.1:1 hung without a word (killed at 175 s); "my-tpu", a name that does
    # not resolve, ended with URLError read as a disk error ("free space or fix the path");
    # an address that accepts connections but speaks HTTP/1 hung past 120 s.
    import time

    if name == "http1":
        name = f"grpc://{http1_server}"
    monkeypatch.setenv("TPU_NAME", name)
    start = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"^--strategy tpu found no TPU \(.+\); run on a TPU host"
    ):
        resolve_strategy("tpu")
    assert resolve_strategy("auto").num_replicas_in_sync == 1  # auto falls back
    assert time.monotonic() - start < 60


TPU_VM = """
import sys
from keras_electra.errors import ConfigError
from keras_electra.training import strategy
strategy.local_tpu_devices = lambda: ["/dev/accel0"]  # what a TPU VM lists
try:
    strategy.resolve_strategy("tpu")
except ConfigError as e:
    print("tpu:", e)
print("auto:", strategy.resolve_strategy("auto").num_replicas_in_sync)
"""


def test_a_tpu_vm_is_asked_for_its_local_tpu_and_auto_says_when_it_cannot_use_it():
    # Colab's TPU runtime (a TPU VM) names no TPU: TPUClusterResolver() raised "Please
    # provide a TPU Name to connect to.", --strategy tpu said "found no TPU" on a TPU host
    # and auto trained on the CPU without a word. A subprocess: connecting to the local
    # "cluster" changes the process's eager context.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "KUBE_"))}
    done = subprocess.run(
        [sys.executable, "-c", TPU_VM], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    tpu = next(line for line in done.stdout.splitlines() if line.startswith("tpu:"))
    # The local resolver was asked (it finds no TPU here), not the one that wants a name.
    assert "Please provide a TPU Name" not in tpu
    assert tpu.startswith("tpu: --strategy tpu found no TPU (TPUs not found in the cluster")
    assert "auto: 1" in done.stdout
    warning = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
    assert warning == [
        "Warning: this machine has TPU devices (/dev/accel0) but TensorFlow cannot use them "
        "(TPUs not found in the cluster); training runs without them. Install the TensorFlow "
        "build for TPUs (docs/installation.md), or pass --strategy tpu to stop here instead."
    ]


def test_no_tpu_device_means_no_local_tpu_and_no_warning(monkeypatch, capsys):
    from keras_electra.training import strategy

    monkeypatch.delenv("TPU_NAME", raising=False)
    assert strategy.local_tpu_devices() == []  # this machine has none
    assert resolve_strategy("auto").num_replicas_in_sync == 1
    assert "Warning" not in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"\(Please provide a TPU Name to connect to\)"):
        resolve_strategy("tpu")


def test_a_grpc_server_speaks_http2_and_others_do_not(http1_server):
    """What tells a TPU's gRPC address from a port that only accepts connections."""
    from concurrent import futures

    import grpc

    from keras_electra.training.strategy import speaks_http2

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        assert speaks_http2("127.0.0.1", port, 5.0)
    finally:
        server.stop(None)
    host, _, http_port = http1_server.rpartition(":")
    assert not speaks_http2(host, int(http_port), 5.0)
    with socket.socket() as silent:  # accepts (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        assert not speaks_http2("127.0.0.1", silent.getsockname()[1], 0.5)
    assert not speaks_http2("127.0.0.1", port, 1.0)  # stopped: refused


@pytest.mark.parametrize(
    "workers",
    [["127.0.0.1"], "127.0.0.1:23456", ["127.0.0.1:99999"], [12345]],
)
def test_a_tf_config_without_host_port_workers_is_one_sentence(monkeypatch, workers):
    # ["127.0.0.1"] passed the dry run and failed at the start ("Could not parse port");
    # a string counted its characters as 15 workers.
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    with pytest.raises(
        ConfigError, match=r"^TF_CONFIG's cluster lists its worker as .* not a list"
    ):
        resolve_strategy("multi_worker")
