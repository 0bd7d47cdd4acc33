"""What bounds the fused kernels: each one's time inside a graph, against the machine's
memory bandwidth, on one and on two threads.

The training step's fused kernels (``keras_electra/layers/fused.py``: bias + GELU,
dropout + residual + LayerNorm, the attention's masked softmax + dropout) are XLA
kernels that each read and write a few MB. This script times each at ELECTRA-Small's
shapes (batch 32 x 128, mixed_bfloat16), ``--calls`` of them chained inside one
``tf.function`` so Python's dispatch is not in the time, and the same chain of a plain
TensorFlow add of two float32 tensors of the kernel's size (oneDNN/Eigen, vectorized)
as a yardstick. It reports ms per call and the bytes the kernel must move over that
time (GB/s), beside the bandwidth of a NumPy add measured in the same process. Each
thread count runs in its own process (TensorFlow fixes its pools at start-up).

    python benchmarks/kernel_times.py [--threads 1,2] [--calls 10] [--repeats 8]
        [--compiled]   # also a compiled C++ add + LayerNorm (needs g++)

``--compiled`` builds ``benchmarks/kernels/add_layer_norm_probe.cc`` (a TensorFlow
custom op: plain loops the compiler vectorizes, rows split over TensorFlow's threads)
with g++ and adds its row, and its largest difference from the XLA kernel's output.

Output: JSON lines, one per (threads, kernel): ``ms_per_call``, ``mbytes`` (inputs +
outputs), ``gbytes_per_s``; and one ``numpy_add`` row per process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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


PROBE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "kernels", "add_layer_norm_probe.cc"
)


def build_probe(directory: str) -> str:
    """``add_layer_norm_probe.cc`` compiled against the installed TensorFlow: the
    shared library's path (g++, -O3 -march=native)."""
    import tensorflow as tf

    out = os.path.join(directory, "add_layer_norm_probe.so")
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
    command = ["g++", "-shared", "-fPIC", "-O3", "-march=native", "-fopenmp-simd"]
    command += ["-Wno-deprecated-declarations", PROBE, "-o", out, *flags]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return out


def kernels(calls: int, probe: str | None = None) -> dict:
    """name -> (chain function, its input, MB moved per call). Each chain calls the
    kernel ``calls`` times, each call on the previous call's output."""
    import tensorflow as tf

    from keras_electra.layers import fused

    bf16 = tf.bfloat16
    rows = tf.cast(tf.random.normal([TOKENS, HIDDEN]), bf16)
    wide = tf.cast(tf.random.normal([TOKENS, FFN]), bf16)
    scores = tf.cast(tf.random.normal([TOKENS // LENGTH, HEADS, LENGTH, LENGTH]), bf16)
    gamma, beta = tf.ones([HIDDEN]), tf.zeros([HIDDEN])
    bias = tf.zeros([FFN])
    keep = tf.ones([TOKENS // LENGTH, 1, 1, LENGTH], tf.bool)
    inv_std = tf.ones([TOKENS, 1])

    def chain(step):
        @tf.function
        def run(x):
            for _ in range(calls):
                x = step(x)
            return x

        return run

    def probs(s):
        out = tf.nest.flatten(fused._probs_forward(s, keep, None, 0.125))[0]
        return tf.reshape(out, tf.shape(s))

    mb = 1 / 2**20
    table = {}
    if probe is not None:
        op = tf.load_op_library(probe)
        table["add_layer_norm_forward_compiled"] = (
            chain(lambda x: op.probe_add_layer_norm(x, x, gamma, beta, epsilon=1e-12)[0]),
            rows,
            (3 * rows.shape.num_elements() * 2 + TOKENS * 4) * mb,
        )
    return table | {
        # x + residual (bf16) -> y (bf16) and 1/std (f32 per row)
        "add_layer_norm_forward": (
            chain(lambda x: fused._add_norm_forward(x, x, gamma, beta, 1e-12, None)[0]),
            rows,
            (3 * rows.shape.num_elements() * 2 + TOKENS * 4) * mb,
        ),
        # y, upstream (bf16) -> two bf16 gradients and the column sums
        "add_layer_norm_backward": (
            chain(lambda x: fused._add_norm_backward(x, gamma, beta, inv_std, x, None)[0]),
            rows,
            4 * rows.shape.num_elements() * 2 * mb,
        ),
        # h (bf16) -> gelu(h + b) (bf16)
        "bias_gelu_forward": (
            chain(lambda h: fused._bias_gelu_forward(h, bias)),
            wide,
            2 * wide.shape.num_elements() * 2 * mb,
        ),
        # scores (bf16) -> probabilities (bf16)
        "attention_probs_forward": (chain(probs), scores, 2 * scores.shape.num_elements() * 2 * mb),
        # the yardstick: TensorFlow's own float32 add of a [tokens, hidden] tensor
        "tensorflow_float32_add": (
            chain(lambda x: x + x * 0.5),
            tf.cast(rows, tf.float32),
            3 * rows.shape.num_elements() * 4 * mb,
        ),
    }


def probe_difference(probe: str) -> float:
    """The largest difference between the compiled add + LayerNorm and the XLA kernel on
    random rows (bf16 output: a rounding step is 2**-8 of the value)."""
    import numpy as np
    import tensorflow as tf

    from keras_electra.layers import fused

    op = tf.load_op_library(probe)
    x, r = (tf.cast(tf.random.normal([TOKENS, HIDDEN], seed=s), tf.bfloat16) for s in (1, 2))
    gamma, beta = tf.random.normal([HIDDEN], seed=3), tf.random.normal([HIDDEN], seed=4)
    xla = fused._add_norm_forward(x, r, gamma, beta, 1e-12, None)[0]
    ours = op.probe_add_layer_norm(x, r, gamma, beta, epsilon=1e-12)[0]
    return float(np.abs(tf.cast(xla, tf.float32) - tf.cast(ours, tf.float32)).max())


def child(threads: int, calls: int, repeats: int, compiled: bool = False) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    bandwidth = round(numpy_add_gbytes_per_s(), 1)
    print(json.dumps({"threads": threads, "kind": "numpy_add", "gbytes_per_s": bandwidth}))
    probe = build_probe(tempfile.mkdtemp(prefix="kernel_times_")) if compiled else None
    if probe is not None:
        check = {"threads": threads, "kind": "probe_check"}
        check["max_abs_difference"] = probe_difference(probe)
        print(json.dumps(check), flush=True)
    for name, (run, x, mbytes) in kernels(calls, probe).items():
        run(x).numpy()  # trace and compile
        start = time.perf_counter()
        for _ in range(repeats):
            out = run(x)
        out.numpy()
        ms = (time.perf_counter() - start) / (repeats * calls) * 1e3
        row = {
            "threads": threads,
            "kind": "kernel",
            "name": name,
            "ms_per_call": round(ms, 3),
            "mbytes": round(mbytes, 2),
            "gbytes_per_s": round(mbytes / 1024 / (ms / 1e3), 1),
        }
        print(json.dumps(row), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts")
    p.add_argument("--calls", type=int, default=10, help="kernel calls chained in one graph")
    p.add_argument("--repeats", type=int, default=8, help="runs of the chain timed")
    p.add_argument("--compiled", action="store_true", help="also a compiled C++ add + LayerNorm")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        child(args.child, args.calls, args.repeats, args.compiled)
        return
    for threads in (int(t) for t in args.threads.split(",")):
        argv = [sys.executable, __file__, "--child", str(threads)]
        argv += ["--calls", str(args.calls), "--repeats", str(args.repeats)]
        argv += ["--compiled"] if args.compiled else []
        done = subprocess.run(argv, capture_output=True, text=True)
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            lines.append(json.dumps({"threads": threads, "kind": "failed", "reason": reason}))
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
