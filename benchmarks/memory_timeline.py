"""What is alive when one pretraining step's memory peaks: TensorFlow's allocator, traced.

Builds the pretrainer as ``step_profile.py`` does (ELECTRA-Small, synthetic batches of
32 x 128), warms it up, and records one step with TensorFlow's profiler at host tracer
level 3, where the CPU allocator's pool (``mklcpu``, the ``BFCAllocator`` that holds
every tensor of 256 kB and more) writes an event for each allocation and release:
its address, bytes, shape and the op that asked for it (TensorFlow uses that pool only
with oneDNN on, its default on CPUs with AVX512-VNNI/BF16 or AMX: the script traces in a
child process with ``TF_ENABLE_ONEDNN_OPTS=1`` on every other CPU). From those the script finds
the moment the pool's bytes in use peak and replays the events up to it, so it can
say which tensors were alive then (grouped by op name, layer numbers folded
together), and which large tensors (``--large`` MB and up) lived longest.

    python benchmarks/memory_timeline.py [--preset small] [--precision mixed_bfloat16]
        [--baseline REF]   # the same for commit REF's keras_electra

Output: JSON lines. ``peak`` (MB in use, the op and the time into the step), ``live``
rows (MB and count per op group at the peak, largest first), ``large`` rows (each
large tensor's shape, op, and when it was allocated and released), ``timeline`` rows
(bytes in use sampled through the step). Tensors allocated before the recorded step
(the variables and optimizer slots) count in ``peak`` but not in ``live``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

EVENTS = ("MemoryAllocation", "MemoryDeallocation")


def allocator_events(xplane_path: str) -> list[tuple[int, str, dict]]:
    """The trace's allocation events as (time in ps, name, stats), in time order."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as f:
        space.ParseFromString(f.read())
    events = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name not in EVENTS:
                    continue
                stats = {}
                for stat in event.stats:
                    ref = plane.stat_metadata[stat.ref_value].name if stat.ref_value else None
                    stats[names.get(stat.metadata_id)] = (
                        stat.str_value or ref or stat.int64_value or stat.uint64_value
                    )
                events.append((line.timestamp_ns * 1000 + event.offset_ps, name, stats))
    # An event can appear on two lines of the trace; one per (time, kind, address).
    unique = {(t, name, stats.get("addr")): (t, name, stats) for t, name, stats in events}
    return sorted(unique.values(), key=lambda e: e[0])


def group(op_name: str) -> str:
    """An op's name with layer numbers and Keras' call suffixes folded together."""
    name = re.sub(r"transformer_layer_\d+(_\d+)?", "layer_N", op_name or "None")
    name = re.sub(r"_\d+(/|$)", r"\1", name)
    return "/".join(name.split("/")[:6])


def analyse(events, large_mb: float, samples: int = 40) -> list[dict]:
    """The rows described in the module's docstring."""
    in_use = [int(s.get("bytes_allocated") or 0) for _, _, s in events]
    peak = max(range(len(events)), key=in_use.__getitem__)
    start = events[0][0]
    rows = [
        {
            "kind": "peak",
            "mb_in_use": round(in_use[peak] / 2**20, 1),
            "op": events[peak][2].get("tf_op"),
            "seconds_into_step": round((events[peak][0] - start) / 1e12, 3),
        }
    ]
    live: dict = {}
    born: dict = {}
    large = []
    for i, (t, name, stats) in enumerate(events):
        address = stats.get("addr")
        if name == "MemoryAllocation":
            size = int(stats.get("allocation_bytes") or stats.get("requested_bytes") or 0)
            if i <= peak:
                live[address] = (size, stats.get("tf_op"))
            born[address] = (t, size, stats)
        else:
            if i <= peak:
                live.pop(address, None)
            t0, size, first = born.pop(address, (None, 0, {}))
            if t0 is not None and size >= large_mb * 2**20:
                large.append((t0, t, size, first))
    for t0, size, first in born.values():  # not released within the step
        if size >= large_mb * 2**20:
            large.append((t0, None, size, first))
    sizes: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for size, op in live.values():
        sizes[group(op)] += size
        counts[group(op)] += 1
    for key, size in sizes.most_common():
        rows.append(
            {"kind": "live", "group": key, "mb": round(size / 2**20, 1), "count": counts[key]}
        )
    for t0, t1, size, stats in sorted(large, key=lambda x: x[0]):
        rows.append(
            {
                "kind": "large",
                "op": stats.get("tf_op"),
                "shape": stats.get("shape"),
                "mb": round(size / 2**20, 1),
                "from_s": round((t0 - start) / 1e12, 3),
                "to_s": None if t1 is None else round((t1 - start) / 1e12, 3),
            }
        )
    every = max(1, len(events) // samples)
    for i in range(0, len(events), every):
        rows.append(
            {
                "kind": "timeline",
                "s": round((events[i][0] - start) / 1e12, 3),
                "mb_in_use": round(in_use[i] / 2**20, 1),
            }
        )
    return rows


def main(argv=None) -> None:
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "1":
        # The pool that writes allocation events is oneDNN's (mklcpu), which TensorFlow turns
        # on by default only on CPUs with AVX512-VNNI/BF16 or AMX (not on an AVX2-only AMD
        # EPYC): trace in a child process that has it on, wherever this one was started.
        import subprocess

        child = subprocess.run(
            [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)],
            env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1"},
            capture_output=True,
            text=True,
        )
        print(child.stdout, end="", flush=True)
        if child.returncode:
            raise SystemExit(child.stderr.strip().splitlines()[-1] if child.stderr.strip() else 1)
        return
    from step_profile import add_model_arguments, profile_steps

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_arguments(p)
    p.add_argument("--large", type=float, default=30.0, help="MB: list tensors this large")
    p.add_argument("--baseline", metavar="REF", help="trace commit REF's keras_electra instead")
    args = p.parse_args(argv)
    if args.baseline:
        from pretrain_throughput import extract, load_package_from

        load_package_from(extract(args.baseline, tempfile.mkdtemp(prefix="memory_timeline_src_")))

    path, _ = profile_steps(args, 1, host_tracer_level=3)
    events = allocator_events(path)
    if not events:
        raise SystemExit("The trace has no allocator events (TensorFlow wrote none at level 3).")
    for row in analyse(events, args.large):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
