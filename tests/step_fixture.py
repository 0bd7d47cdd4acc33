"""One pretraining step per kernel backend, recorded bit for bit (tests/golden/steps/).

``python tests/step_fixture.py [COMMIT]`` (``PYTHONPATH`` at a checkout of ``COMMIT``,
run in the repository) runs one training step of a small pretrainer (masking, sampling,
both losses, clipping, AdamW) from a fixed seed and batch on each backend
(``reference``, ``xla``, ``native``) and policy (float32, ``mixed_bfloat16``), each in a
fresh process, and writes its logs (as ``float.hex``) and the SHA-256 of every weight
after the update. ``tests/test_kernel_conformance.py`` holds today's code to the record
of the machine it runs on: the values are those of the commit a record names (74faae4,
before the kernels moved to ``keras_electra/kernels/``), and a change of the kernels'
code that changes no numerics keeps every one of them, bit for bit.

Bit for bit holds on one kind of machine only: the compiled kernels are built for its CPU
(``-march=native``), oneDNN chooses its kernels by CPU, and reductions split by thread
count. So each record names the machine's signature (:func:`machine`: the CPU's model
and flags, the core count, TensorFlow's and Keras' versions, the C++ compiler's version)
and is a file of its own, ``one_step.json`` (the first) or ``one_step_<signature>.json``;
on a machine with no record the test is skipped, and
``test_a_pretraining_step_matches_the_reference`` (the same step against the
``reference`` backend, within tolerances) still runs. To record on another machine,
check the recorded commit out and run this file there with ``PYTHONPATH`` at it::

    git worktree add /tmp/golden 74faae4
    PYTHONPATH=/tmp/golden python tests/step_fixture.py 74faae4
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "golden" / "steps"
BACKENDS = ("reference", "xla", "native")
DTYPES = ("float32", "bfloat16")


def machine() -> str:
    """What bit-for-bit values depend on, hashed: CPU model and flags, cores, versions."""
    import keras
    import tensorflow as tf

    try:
        cpu = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpu = "unknown"
    wanted = sorted({ln for ln in cpu.splitlines() if ln.startswith(("model name", "flags"))})
    try:
        compiler = subprocess.run(
            [os.environ.get("CXX") or "g++", "--version"], capture_output=True, text=True
        ).stdout
    except OSError:
        compiler = ""
    parts = [*wanted, str(os.cpu_count()), tf.__version__, keras.__version__, compiler]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def recorded_here() -> dict | None:
    """The record of this machine (its signature), if one was written."""
    here = machine()
    for path in sorted(GOLDEN_DIR.glob("one_step*.json")):
        record = json.loads(path.read_text())
        if record["machine"] == here:
            return record
    return None


def one_step(dtype: str):
    """``(model, batch, logs)`` after one training step on the backend the environment
    chooses (``KERAS_ELECTRA_KERNELS``), from the same seed and batch."""
    import keras
    import numpy as np

    from keras_electra.pretraining.pretrainer import ElectraPretrainer
    from keras_electra.training.optimizer import create_optimizer

    keras.utils.set_random_seed(1)
    policy = f"mixed_{dtype}" if dtype != "float32" else None
    sizes = dict(vocab_size=300, num_layers=2, max_position_embeddings=32)
    if hasattr(ElectraPretrainer, "from_preset"):
        model = ElectraPretrainer.from_preset("tiny", seed=1, dtype=policy, **sizes)
    else:  # the recorded commit (74faae4): the recipe was the config's
        from keras_electra.config import ElectraConfig

        model = ElectraPretrainer(ElectraConfig.from_preset("tiny", **sizes), seed=1, dtype=policy)
    model.compile(
        optimizer=create_optimizer(model, learning_rate=1e-3, total_steps=10, warmup_steps=0)
    )
    ids = np.random.default_rng(0).integers(5, 300, (8, 32)).astype("int32")
    batch = {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    logs = model.train_on_batch(batch, return_dict=True)
    return model, batch, logs


def _digest(array) -> list:
    """An array's SHA-256 (its first 32 digits) and its sum (to tell how far it moved)."""
    import numpy as np

    array = np.ascontiguousarray(np.asarray(array))
    return [hashlib.sha256(array.tobytes()).hexdigest()[:32], float(array.astype("f8").sum())]


def record_of(model, batch, logs) -> dict:
    """The step's logs as ``float.hex``, each weight's path and :func:`_digest`, then the
    inference after the step (the discriminator's logits: Keras' ops on every backend)
    and an evaluation step's logs (the masked-LM loss's kernels outside training)."""
    record = {
        "logs": {k: float(v).hex() for k, v in sorted(logs.items())},
        "weights": [[v.path, *_digest(v.numpy())] for v in model.trainable_variables],
    }
    record["inference"] = _digest(model(batch, training=False))
    evaluated = model.test_on_batch(batch, return_dict=True)
    record["evaluation"] = {k: float(v).hex() for k, v in sorted(evaluated.items())}
    return record


def _chooser():
    """What chooses the kernels: keras_electra.kernels, or before the kernels moved there
    (74faae4), keras_electra.layers.backend."""
    try:
        from keras_electra import kernels

        if hasattr(kernels, "choose"):
            return kernels
    except ImportError:
        pass
    from keras_electra.layers import backend

    return backend


def _record_here() -> None:  # one backend and dtype, in this process: prints the record
    backend = _chooser()
    name, dtype = sys.argv[2], sys.argv[3]
    os.environ[backend.ENV] = name
    chosen = backend.choose().backend
    if chosen != name:
        raise SystemExit(f"the {name} kernels cannot run here: {backend.choose().reason}")
    print(json.dumps(record_of(*one_step(dtype))))


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        return _record_here()
    commit = sys.argv[1] if sys.argv[1:] else "HEAD"  # the code PYTHONPATH names
    commit = subprocess.run(
        ["git", "rev-parse", "--short=7", commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    runs = {}
    for name in BACKENDS:
        for dtype in DTYPES:
            done = subprocess.run(
                [sys.executable, __file__, "--one", name, dtype],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[f"{name}/{dtype}"] = json.loads(done.stdout.strip().splitlines()[-1])
            print(name, dtype, runs[f"{name}/{dtype}"]["logs"].get("loss"), flush=True)
    record = {"commit": commit, "machine": machine(), "runs": runs}
    path = GOLDEN_DIR / f"one_step_{record['machine']}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
