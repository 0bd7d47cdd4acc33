"""Where the time of one pretraining step goes: op time by category, from TF's profiler.

Builds the pretrainer the way ``pretrain_throughput.py`` does (ELECTRA-Small by default,
synthetic batches of 32 x 128), warms it up, records ``--steps`` steps with
``tf.profiler.experimental`` and reads the trace (the ``XSpace`` protobuf TensorFlow
writes) directly: every executed op is an event named ``scope/name:OpType`` on one of
TensorFlow's compute threads. Op time is summed per category (by name scope first, so
the random draws, multiplies and selects of dropout count as dropout) and per op type.

    python benchmarks/step_profile.py [--preset small] [--precision mixed_bfloat16]
        [--baseline REF]   # the same for commit REF's keras_electra

Output: one JSON object per line (``category`` rows, then the top ``op`` types, then a
``summary`` with the wall time per step), or ``--markdown`` for the table in
benchmarks/measurements.md.
Op time is summed over threads, so it can exceed wall time when ops run in parallel;
shares are of total op time.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (category, test on the lower-cased op name, test on the op type), first match wins.
CATEGORIES = (
    # keras_electra/kernels/kernels.cc's custom ops (ElectraAddLayerNorm, ...)
    ("compiled kernels (gelu, layer norm, softmax)", None, lambda t: t.startswith("Electra")),
    ("dropout", lambda name: "dropout" in name, None),
    ("matmul", None, lambda t: "MatMul" in t or "Einsum" in t),
    ("softmax", lambda name: "softmax" in name, lambda t: "Softmax" in t),
    ("layer norm", lambda name: "layer_norm" in name or "layernorm" in name, None),
    ("gelu", lambda name: "gelu" in name, None),
    ("masking and sampling", lambda name: "sample" in name or "mask_tokens" in name, None),
    ("fused XLA kernels (gelu, layer norm, softmax)", None, lambda t: t == XLA_KEY[1]),
    ("optimizer", lambda name: "adam" in name or "optimizer" in name or "clip" in name, None),
    ("embedding gather/scatter", None, lambda t: "Gather" in t or "Scatter" in t or "Segment" in t),
    ("cast", None, lambda t: t == "Cast"),
    ("random (other)", None, lambda t: t.startswith(("StatelessRandom", "RandomUniform"))),
    ("elementwise and other", None, lambda t: True),
)
# Events that are not ops doing work: function calls wrap other ops' time.
WRAPPERS = ("PartitionedCall", "StatefulPartitionedCall", "While", "If", "StatelessIf")
# Events without an op type that are not XLA kernels: the executor's and the profiler's own.
NOT_XLA = (
    "ExecutorState",
    "ExecutorDone",
    "ThreadpoolListener",
    "Memory",
    "Eager",
    "TFE_",
    "ParallelFor",  # also inside TF ops; XLA's own run inside its thunks
)
XLA_KEY = ("xla", "XLA kernels")


def category(name: str, op_type: str) -> str:
    lower = name.lower()
    for label, by_name, by_type in CATEGORIES:
        if (by_name and by_name(lower)) or (by_type and by_type(op_type)):
            return label
    return "elementwise and other"


def op_times(xplane_path: str) -> dict[tuple[str, str], float]:
    """Seconds per (op name, op type) over the compute threads of one trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as f:
        space.ParseFromString(f.read())
    times: dict[tuple[str, str], float] = collections.defaultdict(float)
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            xla_spans = []
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name and not name.startswith(NOT_XLA):
                    # An XLA kernel's thunk (HLO names such as add_multiply_fusion, call,
                    # ParallelFor): no TF op event carries its time (the fused kernels
                    # of keras_electra/kernels/xla.py run this way).
                    xla_spans.append((event.offset_ps, event.offset_ps + event.duration_ps))
                if ":" not in name or "::" in name:  # executor bookkeeping, not ops
                    continue
                op_name, op_type = name.rsplit(":", 1)
                if op_type in WRAPPERS:
                    continue
                times[(op_name, op_type)] += event.duration_ps * 1e-12
            times[XLA_KEY] += _covered(xla_spans) * 1e-12
    return times


def _covered(spans: list[tuple[int, int]]) -> int:
    """The length of the union of intervals (XLA thunks nest inside one another)."""
    total, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def build(args):
    import keras
    import numpy as np
    import tensorflow as tf
    from pretrain_throughput import make_batches, new_pretrainer

    from keras_electra.training.optimizer import create_optimizer

    keras.utils.set_random_seed(0)
    model = new_pretrainer(args)
    config = model.config
    optimizer = create_optimizer(model, learning_rate=5e-4, total_steps=10_000, warmup_steps=100)
    model.compile(optimizer=optimizer)
    ids = make_batches(4, args.batch, args.length, config.vocab_size)
    data = tf.data.Dataset.from_tensor_slices(
        {"token_ids": ids, "padding_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    ).repeat()
    return model, data


def profile_steps(args, steps: int, host_tracer_level: int = 2) -> tuple[str, float]:
    """Build, warm up (3 steps) and profile ``steps`` steps: the trace's ``.xplane.pb``
    path and the wall seconds per profiled step. ``args`` as :func:`build` reads it."""
    import tensorflow as tf

    model, data = build(args)
    model.fit(data, epochs=1, steps_per_epoch=3, verbose=0)  # trace and warm up
    logdir = tempfile.mkdtemp(prefix="step_profile_")
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=host_tracer_level)
    tf.profiler.experimental.start(logdir, options=options)
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
    wall = (time.perf_counter() - start) / steps
    tf.profiler.experimental.stop()
    (path,) = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    return path, wall


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The options :func:`build` reads: preset, precision, batch and length."""
    p.add_argument("--preset", default="small")
    p.add_argument("--precision", default="mixed_bfloat16")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=128)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(p)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--top", type=int, default=15, help="op types listed")
    p.add_argument("--markdown", action="store_true", help="print the profile as a Markdown table")
    p.add_argument(
        "--names",
        type=int,
        default=0,
        help="also list the N costliest ops by name (layer numbers folded together)",
    )
    p.add_argument("--baseline", metavar="REF", help="profile commit REF's keras_electra instead")
    args = p.parse_args(argv)
    if args.baseline:  # that commit's package, extracted (as pretrain_throughput does)
        from pretrain_throughput import extract, load_package_from

        load_package_from(extract(args.baseline, tempfile.mkdtemp(prefix="step_profile_src_")))

    path, wall = profile_steps(args, args.steps)
    times = op_times(path)

    total = sum(times.values())
    by_category: dict[str, float] = collections.Counter()
    by_type: dict[str, float] = collections.Counter()
    for (name, op_type), seconds in times.items():
        by_category[category(name, op_type)] += seconds
        by_type[op_type] += seconds
    base = {
        "preset": args.preset,
        "precision": args.precision,
        "batch": args.batch,
        "source": args.baseline or "current",
    }
    rows = [
        {
            **base,
            "kind": "category",
            "name": label,
            "ms_per_step": 1e3 * s / args.steps,
            "share": s / total,
        }
        for label, s in sorted(by_category.items(), key=lambda kv: -kv[1])
    ]
    ops = [
        {**base, "kind": "op", "name": t, "ms_per_step": 1e3 * s / args.steps, "share": s / total}
        for t, s in by_type.most_common(args.top)
    ]
    by_name: dict[tuple[str, str], float] = collections.Counter()
    for (name, op_type), seconds in times.items():
        by_name[(re.sub(r"\d+", "N", name), op_type)] += seconds
    ops += [
        {**base, "kind": "name", "name": f"{n} ({t})", "ms_per_step": 1e3 * s / args.steps}
        for (n, t), s in by_name.most_common(args.names)
    ]
    summary = {
        **base,
        "kind": "summary",
        "wall_seconds_per_step": wall,
        "op_seconds_per_step": total / args.steps,
        "length": args.length,
    }
    if args.markdown:
        print(f"| where ({args.precision}) | ms per step | share of op time |")
        print("| --- | --- | --- |")
        for r in rows:
            print(f"| {r['name']} | {r['ms_per_step']:.0f} | {100 * r['share']:.1f}% |")
        print(f"\nwall {wall:.3f} s per step; op time {total / args.steps:.3f} s per step")
        return
    for r in rows + ops + [summary]:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}))


if __name__ == "__main__":
    main()
