"""Where the pretraining process's resident memory goes: RSS after each stage.

One child process per batch size: importing TensorFlow and Keras, building the model
and optimizer, the first ``fit`` step (tracing, graph optimization, the first
activations) and a few more steps, each as resident (``VmRSS``) and peak
(``VmHWM``) MB from ``/proc/self/status``, the resident part split into private
pages (``anon_mb``) and pages of mapped files (``file_mb``). The difference between
two batch sizes is what the batch costs (activations kept for the backward pass, and their
gradients); what a batch of one costs above the built model is the traced step's
graph and runtime. After the measurements the child also counts the traced step's
graph nodes, each of which costs memory whatever the batch.

    python benchmarks/memory_stages.py --batches 1,32 > memory.jsonl

Prints one JSON line per (batch, stage), then one per batch with the node count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pretrain_throughput import make_batches, status_mb  # noqa: E402  (stdlib imports only)


def rss_mb() -> dict[str, float]:
    """This process's resident and peak resident memory, MB, and the resident split
    into private pages and pages of mapped files (TensorFlow's shared libraries)."""
    now = status_mb()
    return {
        "rss_mb": now["rss"],
        "peak_mb": now["peak"],
        "anon_mb": now["anon"],
        "file_mb": now["file"],
    }


def child(args) -> None:
    def stage(name: str) -> None:
        print(json.dumps({"batch": args.batch, "stage": name, **rss_mb()}), flush=True)

    stage("start")
    import keras
    import numpy as np
    import tensorflow as tf

    stage("import tensorflow and keras")
    from keras_electra.pretraining.pretrainer import ElectraPretrainer
    from keras_electra.training.optimizer import create_optimizer
    from keras_electra.training.precision import dtype_policy

    keras.utils.set_random_seed(0)
    model = ElectraPretrainer.from_preset(
        args.preset,
        seed=0,
        dtype=dtype_policy(args.precision),
        max_position_embeddings=args.length,
    )
    config = model.config
    optimizer = create_optimizer(model, learning_rate=5e-4, total_steps=10_000, warmup_steps=100)
    model.compile(optimizer=optimizer)
    optimizer.build(model.trainable_variables)
    stage("model and optimizer built")
    ids = make_batches(4, args.batch, args.length, config.vocab_size)
    data = tf.data.Dataset.from_tensor_slices(
        {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    ).repeat()
    model.fit(data, epochs=1, steps_per_epoch=1, verbose=0)
    stage("first step (trace, optimize, run)")
    model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0)
    stage(f"{args.steps} more steps")
    batch = {k: tf.constant(v[0]) for k, v in next(iter(data.batch(1))).items()}
    graph = tf.function(model.train_step).get_concrete_function(batch).graph
    nodes = len(graph.as_graph_def().node)
    print(json.dumps({"batch": args.batch, "kind": "graph", "train_step_nodes": nodes}), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--precision", default="mixed_bfloat16")
    p.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)  # a child's
    args = p.parse_args(argv)
    if args.batch is not None:
        child(args)
        return
    for batch in (int(b) for b in args.batches.split(",")):
        argv = [sys.executable, __file__, "--batch", str(batch)]
        for name in ("preset", "precision", "length", "steps"):
            argv += [f"--{name}", str(getattr(args, name))]
        done = subprocess.run(argv, capture_output=True, text=True)
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            lines.append(json.dumps({"batch": batch, "kind": "failed", "reason": reason}))
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
