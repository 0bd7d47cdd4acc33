"""What bounds the fused kernels: each one's time inside a graph, XLA's and the compiled
one, against the machine's memory bandwidth, on one and on two threads.

The training step's fused kernels (bias + GELU, dropout + residual + LayerNorm, the
attention's masked softmax + dropout) each read and write a few MB. They exist twice: as
XLA kernels (``keras_electra/kernels/xla.py``) and as compiled custom ops
(``keras_electra/kernels/native.py``: ``keras_electra/kernels/kernels.cc``, built by
``keras_electra/kernels/compiled.py`` where a C++ compiler is). This script times each
at ELECTRA-Small's shapes (batch 32 x 128, mixed_bfloat16, dropout 0.1), ``--calls`` of
them chained inside one ``tf.function`` so Python's dispatch is not in the time, and the
same chain of a plain TensorFlow float32 add as a yardstick. It reports ms per call and
the bytes the kernel must move over that time (GB/s), beside the bandwidth of a NumPy add
measured in the same process. Each thread count runs in its own process (TensorFlow
fixes its pools at start-up).

    python benchmarks/kernel_times.py [--threads 1,2] [--calls 10] [--repeats 8]

Output: JSON lines, one per (threads, kernel, engine ``xla`` or ``compiled``):
``ms_per_call``, ``mbytes`` (inputs + outputs), ``gbytes_per_s``; one ``numpy_add`` row
per process; and with the compiled kernels, their largest difference from XLA's output
per kernel (``agreement`` rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOKENS, HIDDEN, FFN, HEADS, LENGTH = 4096, 256, 1024, 4, 128  # ELECTRA-Small, 32 x 128


def numpy_add_gbytes_per_s(elements: int = 1 << 20, repeats: int = 50) -> float:
    """GB/s of ``np.add(a, b, out=c)`` on float32 arrays (read two, write one)."""
    import numpy as np

    a = np.random.default_rng(0).random(elements, dtype=np.float32)
    b, c = a.copy(), a.copy()
    np.add(a, b, out=c)
    start = time.perf_counter()
    for _ in range(repeats):
        np.add(a, b, out=c)
    return 12 * elements * repeats / (time.perf_counter() - start) / 1e9


def kernels(calls: int) -> dict:
    """(name, engine) -> (chain function, its input, MB moved per call). Each chain calls
    the kernel ``calls`` times, each call on the previous call's output."""
    import tensorflow as tf

    from keras_electra.kernels import native as native_kernels
    from keras_electra.kernels import xla as xla_kernels
    from keras_electra.kernels.compiled import kernels as compiled_kernels
    from keras_electra.layers.dropout import DropoutDraw, dropout_key

    bf16 = tf.bfloat16
    rows = tf.cast(tf.random.normal([TOKENS, HIDDEN]), bf16)
    wide = tf.cast(tf.random.normal([TOKENS, FFN]), bf16)
    scores = tf.cast(tf.random.normal([TOKENS // LENGTH, HEADS, LENGTH, LENGTH]), bf16)
    gamma, beta = tf.ones([HIDDEN]), tf.zeros([HIDDEN])
    bias = tf.zeros([FFN])
    keep = tf.ones([TOKENS // LENGTH, 1, 1, LENGTH], tf.bool)
    inv_std = tf.ones([TOKENS, 1])

    def drop(shape):
        draw = DropoutDraw(dropout_key(tf.constant([1, 2])), tf.constant(shape), 0.1)
        return xla_kernels.kernel_dropout(draw)

    row_drop, score_drop = drop(rows.shape), drop(scores.shape)

    def chain(step):
        @tf.function
        def run(x):
            for _ in range(calls):
                x = step(x)
            return x

        return run

    def first(out, like):
        return tf.reshape(tf.nest.flatten(out)[0], tf.shape(like))

    mb = 1 / 2**20
    moved = {
        "add_layer_norm_forward": (3 * rows.shape.num_elements() * 2 + TOKENS * 4) * mb,
        "add_layer_norm_backward": 4 * rows.shape.num_elements() * 2 * mb,
        "bias_gelu_forward": 2 * wide.shape.num_elements() * 2 * mb,
        "bias_gelu_backward": 3 * wide.shape.num_elements() * 2 * mb,
        "attention_probs_forward": 3 * scores.shape.num_elements() * 2 * mb,
    }
    xla = {
        "add_layer_norm_forward": (
            lambda x: xla_kernels._add_norm_forward(x, x, gamma, beta, 1e-12, row_drop)[0],
            rows,
        ),
        "add_layer_norm_backward": (
            lambda x: xla_kernels._add_norm_backward(x, gamma, beta, inv_std, x, row_drop)[0],
            rows,
        ),
        "bias_gelu_forward": (lambda h: xla_kernels._bias_gelu_forward(h, bias), wide),
        "bias_gelu_backward": (lambda h: xla_kernels._bias_gelu_backward(h, bias, h)[0], wide),
        "attention_probs_forward": (
            lambda s: first(xla_kernels._probs_forward(s, keep, score_drop, 0.125), s),
            scores,
        ),
    }
    table = {(name, "xla"): (chain(f), x, moved[name]) for name, (f, x) in xla.items()}
    ops = compiled_kernels()
    if ops is not None:
        d_rows = native_kernels.compiled_draw(row_drop)
        d_scores = native_kernels.compiled_draw(score_drop)
        ours = {
            "add_layer_norm_forward": lambda x: ops.electra_add_layer_norm(
                x, x, gamma, beta, *d_rows, tf.zeros([0]), epsilon=1e-12, dropout=True
            )[0],
            "add_layer_norm_backward": lambda x: ops.electra_add_layer_norm_grad(
                x, x, gamma, beta, *d_rows, inv_std, dropout=True
            )[0],
            "bias_gelu_forward": lambda h: ops.electra_bias_gelu(h, bias),
            "bias_gelu_backward": lambda h: ops.electra_bias_gelu_grad(h, bias, h)[0],
            "attention_probs_forward": lambda s: ops.electra_attention_probs(
                s, keep, *d_scores, scale=0.125, dropout=True
            )[0],
        }
        for name, f in ours.items():
            table[(name, "compiled")] = (chain(f), xla[name][1], moved[name])
    table[("tensorflow_float32_add", "tensorflow")] = (
        chain(lambda x: x + x * 0.5),
        tf.cast(rows, tf.float32),
        3 * rows.shape.num_elements() * 4 * mb,
    )
    return table


def agreement(table: dict) -> dict:
    """Per kernel with both engines: the largest difference between their outputs after
    one call, relative to the largest XLA output (bf16: a rounding step is 2**-8)."""
    import numpy as np

    out = {}
    for (name, engine), (run, x, _) in table.items():
        if engine != "compiled":
            continue
        ours = run(x).numpy().astype(np.float32)
        theirs = table[(name, "xla")][0](x).numpy().astype(np.float32)
        out[name] = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))
    return out


def child(threads: int, calls: int, repeats: int) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    bandwidth = round(numpy_add_gbytes_per_s(), 1)
    print(json.dumps({"threads": threads, "kind": "numpy_add", "gbytes_per_s": bandwidth}))
    table = kernels(calls)
    for (name, engine), (run, x, mbytes) in table.items():
        run(x).numpy()  # trace and compile
        start = time.perf_counter()
        for _ in range(repeats):
            out = run(x)
        out.numpy()
        ms = (time.perf_counter() - start) / (repeats * calls) * 1e3
        row = {"threads": threads, "kind": "kernel", "name": name, "engine": engine}
        row |= {"ms_per_call": round(ms, 3), "mbytes": round(mbytes, 2)}
        row["gbytes_per_s"] = round(mbytes / 1024 / (ms / 1e3), 1)
        print(json.dumps(row), flush=True)
    if calls == 1:  # each chain is one call: the outputs compare directly
        for name, gap in agreement(table).items():
            row = {"threads": threads, "kind": "agreement", "name": name}
            print(json.dumps(row | {"max_relative_difference": gap}), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts")
    p.add_argument("--calls", type=int, default=10, help="kernel calls chained in one graph")
    p.add_argument("--repeats", type=int, default=8, help="runs of the chain timed")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        child(args.child, args.calls, args.repeats)
        return
    for threads in (int(t) for t in args.threads.split(",")):
        argv = [sys.executable, __file__, "--child", str(threads)]
        argv += ["--calls", str(args.calls), "--repeats", str(args.repeats)]
        done = subprocess.run(argv, capture_output=True, text=True)
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            lines.append(json.dumps({"threads": threads, "kind": "failed", "reason": reason}))
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
