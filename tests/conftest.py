import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import contextlib  # noqa: E402
import importlib  # noqa: E402
import pathlib  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "data" / "sample" / "shakespeare.txt"
SAMPLE_VALID = REPO / "data" / "sample" / "shakespeare_valid.txt"


class OnFirstUse:
    """A module imported when a test first uses it, not when a worker collects the file:
    torch, transformers and keras-hub take seconds to import, which every test worker
    would pay whether or not it runs the file's tests."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        if attribute.startswith("_"):  # pytest's collection asks for _mock_name, __test__...
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)


# The longest files, longest first (seconds of one worker in the last timed run:
# benchmarks/measurements.md, "The test suite's time"). `make test` runs two workers that each take
# whole files in collection order (`--dist loadfile --no-loadscope-reorder`); starting the
# long ones first lets the short ones fill in behind them, instead of one worker running a
# long file alone at the end. Files not named here follow, in their usual order.
LONGEST_FIRST = (
    "test_learning.py",
    "test_multi_worker.py",
    "test_faults.py",
    "test_pretrain_run.py",
    "test_benchmarks.py",
    "test_kernel_conformance.py",
    "test_distribute.py",
    "test_speed_options.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: keeps the rest


@pytest.fixture(scope="session")
def sample_corpus() -> pathlib.Path:
    return SAMPLE_CORPUS


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> pathlib.Path:
    """The first ~3000 lines of the sample corpus: enough for a vocabulary and batches."""
    lines = SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()[:3000]
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, small_corpus) -> pathlib.Path:
    """A few steps of a one-layer model: a real run directory, built once per session."""
    from keras_electra.pretraining.run import pretrain

    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    pretrain(
        [str(small_corpus)],
        run_dir,
        steps=4,
        batch_size=8,
        max_seq_length=32,
        vocab_size=2000,
        log_every=2,
        config_overrides={"num_layers": 1},
        progress=False,
    )
    return run_dir


def marker_squad(words: list[str], n: int, seed: int, max_words: int = 14) -> dict:
    """SQuAD 2.0 data: the answer is the word after "marker"; a third have no marker."""
    rng = random.Random(seed)
    data = []
    for i in range(n):
        context = rng.sample(words, rng.randint(6, max_words))
        qa = {"id": f"q{i}", "question": "what follows the marker?", "answers": []}
        if rng.random() < 0.67:
            answer, at = rng.choice(words), rng.randrange(len(context) + 1)
            before = " ".join(context[:at])
            context[at:at] = ["marker", answer]
            start = len(before) + (1 if before else 0) + len("marker ")
            qa["answers"] = [{"text": answer, "answer_start": start}]
        else:
            qa["is_impossible"] = True
        data.append({"paragraphs": [{"context": " ".join(context), "qas": [qa]}]})
    return {"version": "v2.0", "data": data}


# The metric names the core issue specifies, spelled out once for the tests.
# The electra objective's hyperparameters for the tiny preset (its preset_hyperparameters:
# sampling at temperature 2), for tests that build a tiny pretrainer from a config
# (test_objectives checks that they are the objective's).
TINY_RECIPE = {"temperature": 2.0}

METRICS = {
    "loss",
    "mlm_loss",
    "mlm_accuracy",
    "sampled_mlm_accuracy",
    "disc_loss",
    "disc_accuracy",
    "disc_precision",
    "disc_recall",
    "disc_auc",
    "replaced_fraction",
}
# The training step also reports the global gradient norm before clipping, and per part.
GRADIENT_NORMS = {
    "grad_norm",
    "grad_norm_generator",
    "grad_norm_discriminator",
    "grad_norm_embeddings",
    "grad_norm_heads",
}
# The run-health probe's metrics (pretraining/health.py) for a one-layer discriminator.
HEALTH = {
    "disc_cosine_0",
    "disc_cosine_1",
    "disc_effective_rank",
    "embedding_cosine",
    "context_auc",
    "rarity_auc",
    "probe_auc",
    "probe_logit_std",
    "probe_mean_prob",
    "probe_replaced_fraction",
    "probe_identity_r2",
}
# What every metrics.jsonl line holds beside the model's metrics.
WINDOW = {"step", "tokens_per_sec", "learning_rate", "health_seconds", "window_seconds"}


def pretrain_command(*args: str) -> int:
    """``keras-electra pretrain`` of 2 steps of 4 x 16 tokens with a 500-token vocabulary,
    then ``args`` (a flag given again takes its later value)."""
    from keras_electra.cli import main

    small = ["--steps", "2", "--batch-size", "4", "--max-seq-length", "16", "--vocab-size", "500"]
    return main(["pretrain", *small, *args])


def score_everywhere(export_dir, texts: list[str], capsys) -> dict[str, tuple[str, list]]:
    """``keras-electra score`` on ``texts`` in process (``--model``) and through the
    stand-in TF Serving's gRPC and REST servers, each as text and with ``--json``: for
    each of ``model``, ``grpc`` and ``rest``, the printed lines and the JSON records."""
    import json

    from tfserving_standin import ModelServer

    from keras_electra.cli import main

    def run(*where: str) -> tuple[str, list]:
        capsys.readouterr()
        assert main(["score", *where, *texts]) == 0, capsys.readouterr().err
        shown = capsys.readouterr().out
        assert main(["score", *where, "--json", *texts]) == 0, capsys.readouterr().err
        return shown, json.loads(capsys.readouterr().out)

    found = {"model": run("--model", str(export_dir))}
    with ModelServer(export_dir, "served") as server:
        found["grpc"] = run("--server", server.grpc_target, "--model-name", "served")
        found["rest"] = run("--server", server.rest_url, "--model-name", "served")
    return found


def assert_same_records(actual, expected, atol: float = 1e-5) -> None:
    """JSON values equal, floats within ``atol`` (the servers' float32 arrives as JSON)."""
    if isinstance(expected, dict):
        assert list(actual) == list(expected), (actual, expected)  # the keys, in order
        for key, value in expected.items():
            assert_same_records(actual[key], value, atol)
    elif isinstance(expected, list):
        assert len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same_records(a, e, atol)
    elif isinstance(expected, float):
        assert abs(actual - expected) <= atol, (actual, expected)
    else:
        assert actual == expected, (actual, expected)


def traced_step_ops(policy: str, hyperparameters: dict | None = None, **config) -> list:
    """The ops of a small pretrainer's traced train function under ``policy``, with
    the bodies of the functions it calls (the custom gradients' and kernels');
    ``config`` and ``hyperparameters`` override the tiny preset's."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_electra.pretraining.pretrainer import ElectraPretrainer
    from keras_electra.training.optimizer import create_optimizer

    sizes = dict(vocab_size=300, num_layers=2, max_position_embeddings=32)
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = ElectraPretrainer.from_preset(
            "tiny", seed=1, hyperparameters=hyperparameters, **sizes, **config
        )
        model.compile(
            optimizer=create_optimizer(model, learning_rate=1e-3, total_steps=10, warmup_steps=2)
        )
        ids = np.random.default_rng(0).integers(5, 300, (4, 32)).astype("int32")
        batch = {
            "token_ids": ids,
            "padding_mask": np.ones_like(ids),
            "segment_ids": np.zeros_like(ids),
        }
        iterator = iter(tf.data.Dataset.from_tensors(batch))
        graph = model.make_train_function().on_iterator.get_concrete_function(iterator).graph
    finally:
        keras.mixed_precision.set_global_policy("float32")
    ops = list(graph.get_operations())
    for function in graph._functions.values():  # the custom gradients' and kernels' bodies
        ops.extend(function.graph.get_operations() if hasattr(function, "graph") else [])
    return ops


@contextlib.contextmanager
def held_by_another_process(directory):
    """Another Python process holding the existing ``directory`` (``held_directory``, as a
    pretrain, finetune or prepare writing into it) until the block ends; yields its id."""
    code = (
        "import sys, time; from keras_electra.atomic import held_directory\n"
        "with held_directory(sys.argv[1]):\n"
        "    print('held', flush=True); time.sleep(300)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(directory)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def records(paths: list[str]) -> list[bytes]:
    """Every serialized record of the TFRecord files ``paths``, in order."""
    import tensorflow as tf

    return [r.numpy() for path in paths for r in tf.data.TFRecordDataset(path)]


def as_rows(serialized: list[bytes]) -> list[tuple]:
    """Each record's ``input_ids``, ``input_mask`` and ``segment_ids`` as tuples."""
    import tensorflow as tf

    names = ("input_ids", "input_mask", "segment_ids")
    features = [tf.train.Example.FromString(record).features.feature for record in serialized]
    return [tuple(tuple(f[name].int64_list.value) for name in names) for f in features]
