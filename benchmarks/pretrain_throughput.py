"""Pretraining throughput: the full ELECTRA step, ours (Keras/TF) vs Hugging Face (PyTorch).

One step is what pretraining runs: mask 15% of the tokens, generator forward at
the masked positions, sampling (inverse CDF), discriminator forward, MLM + 50 x
replaced-token-detection loss, backward through both towers (shared
embeddings), gradient clipping and AdamW. Reported per engine and precision:
tokens/s, seconds/step with the spread of the timed steps (fastest, median,
slowest), the child process's peak resident memory, and MFU, the model FLOP/s
(analytic matmul FLOPs of the step, backward counted as twice the forward) over
this machine's matmul peak, measured here for float32 and bfloat16. A fixed NumPy
matmul timed before and after each row (``calibration_gflops``) shows whether the
machine slowed down while the row ran.

Ours runs per precision as the default step, with ``--xla`` (forward + backward
compiled by XLA inside the step) and with ``steps_per_execution``; with
``--try-levers`` also gradient accumulation, whole-step ``jit_compile`` and
``torch.compile``. An ``input`` line measures the real input pipeline
(``keras_electra.data``: parallel tokenization, packing, prefetch) on the sample
corpus alone, to compare with the step's tokens/s: it must be well above it.

Each configuration runs in its own subprocess (TensorFlow and PyTorch would
otherwise share and fight over the thread pools). Output: one JSON object per
line (``peak``, ``result`` or ``skipped``) and a final ``summary`` line.

    python benchmarks/pretrain_throughput.py [--preset small] [--steps 20] [--no-torch]

``--baseline REF`` also runs our default step from another commit of this repository
(its ``keras_electra/`` extracted with ``git archive`` into a temporary directory and put
first on the child's ``PYTHONPATH``), ``--rounds N`` times alternating with today's (which
of the two goes first alternates by round), so load noise hits both: "is the step slower
than before this change?" The summary gives each round's ratio and their median.

    python benchmarks/pretrain_throughput.py --baseline 1f9706d --no-torch --no-xla \
        --spe-row 0 --no-input --rounds 3 --steps 20

PyTorch is not a dependency of keras-electra; for the comparison install
``torch==2.13.0 transformers safetensors`` (the ``benchmarks`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DISC_WEIGHT = 50.0


# === Matmul peak ===


def matmul_peak(dtype: str, size: int = 2048, repeats: int = 10) -> float:
    """The best FLOP/s of a TensorFlow ``size`` x ``size`` matmul chain in ``dtype``."""
    import tensorflow as tf

    a = tf.random.normal([size, size], dtype=tf.float32) / size**0.5
    x, y = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)

    @tf.function
    def chain(x, y):
        for _ in range(8):  # each product feeds the next: nothing to fold or skip
            x = tf.matmul(x, y)
        return tf.reduce_sum(tf.cast(x, tf.float32))

    chain(x, y).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        chain(x, y).numpy()
        best = min(best, time.perf_counter() - start)
    return 8 * 2.0 * size**3 / best


def calibrate(size: int = 768, repeats: int = 5) -> float:
    """The best FLOP/s of a fixed NumPy float32 matmul: the same work in every row."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(4):
            a @ a
        best = min(best, time.perf_counter() - start)
    return 4 * 2.0 * size**3 / best


# === Synthetic batches (the same for both engines) ===


def make_batches(n: int, batch: int, length: int, vocab: int, seed: int = 0):
    """``n`` packed batches of random word-piece ids with [CLS] ... [SEP], no padding."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (n, batch, length)).astype("int32")
    ids[:, :, 0], ids[:, :, -1] = 2, 3
    return ids


# === Ours ===


def run_keras(args) -> dict:
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_electra.training.optimizer import create_optimizer

    keras.utils.set_random_seed(0)
    model = new_pretrainer(args)
    config = model.config
    optimizer = create_optimizer(model, learning_rate=5e-4, total_steps=10_000, warmup_steps=100)
    model.compile(
        optimizer=optimizer,
        jit_compile=args.jit_compile,
        steps_per_execution=args.steps_per_execution,
    )
    model.configure_step(xla_gradients=args.xla, gradient_accumulation=args.grad_accumulation)
    ids = make_batches(4, args.batch, args.length, config.vocab_size)
    data = tf.data.Dataset.from_tensor_slices(
        {
            "token_ids": ids,
            "padding_mask": np.ones_like(ids),
            "segment_ids": np.zeros_like(ids),
            # The names a --baseline commit before the one feature naming reads.
            "input_ids": ids,
            "input_mask": np.ones_like(ids),
        }
    ).repeat()
    # As keras_electra.data.fit_options(), which pretrain()'s pipeline uses (inlined so a
    # --baseline commit gets it too): without tf.data autotuning, whose thread the end of
    # fit otherwise waits for (up to 60 s; 15 s in some rows of an earlier run).
    options = tf.data.Options()
    options.autotune.enabled = False
    data = data.with_options(options)
    spe = args.steps_per_execution
    model.fit(data, epochs=1, steps_per_epoch=args.warmup * spe, verbose=0)  # trace + warm up

    steps = max(spe, args.steps // spe * spe)
    clock = StepClock()
    start = time.perf_counter()
    history = model.fit(
        data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock.callback]
    )
    seconds = (time.perf_counter() - start) / steps
    return {
        "config": config,
        "seconds_per_step": seconds,
        "step_seconds": clock.times(start, spe),
        "loss": history.history["loss"][-1],
    }


class StepClock:
    """A Keras callback noting when each step (or execution of several) ends."""

    def __init__(self):
        import keras

        class Clock(keras.callbacks.Callback):
            def on_train_batch_end(inner, batch, logs=None):  # noqa: N805
                self.ends.append(time.perf_counter())

        self.ends: list[float] = []
        self.callback = Clock()

    def times(self, start: float, per_call: int = 1) -> list[float]:
        """Seconds per step of each call, from the fit's start."""
        marks = [start, *self.ends]
        return [(b - a) / per_call for a, b in zip(marks, marks[1:], strict=False)]


# === The input pipeline alone ===


def run_input(args) -> dict:
    """Tokens/s of the text pipeline pretraining reads, over one whole pass of the corpus.

    A pass is timed whole (its first batch waits for the shuffle block, which on
    the sample corpus is the whole pass), so this is the pipeline's sustained rate.
    """
    from keras_electra.data import ElectraTokenizer, learn_vocab, pretraining_dataset

    tokenizer = ElectraTokenizer(learn_vocab([args.corpus], 8000))
    one_pass = pretraining_dataset(
        [args.corpus],
        tokenizer,
        batch_size=args.batch,
        max_seq_length=args.length,
        seed=0,
        repeat=False,
    )
    start = time.perf_counter()
    batches = iter(one_pass)
    next(batches)
    first = time.perf_counter() - start
    count = 1 + sum(1 for _ in batches)
    seconds = time.perf_counter() - start
    return {
        "kind": "input",
        "batch": args.batch,
        "length": args.length,
        "batches_per_pass": count,
        "first_batch_seconds": round(first, 2),
        "pass_seconds": round(seconds, 2),
        "tokens_per_sec": round(count * args.batch * args.length / seconds, 1),
    }


# === Hugging Face transformers on PyTorch ===


def run_torch(args) -> dict:
    import torch
    import transformers

    from keras_electra.config import ElectraConfig

    torch.set_num_threads(args.threads or os.cpu_count())
    # TensorFlow flushes denormals to zero in its thread pools; without this tiny
    # gradients and Adam moments make PyTorch's float32 CPU kernels ~4x slower.
    torch.set_flush_denormal(True)
    config = ElectraConfig.from_preset(args.preset, max_position_embeddings=args.length)
    model = TorchElectra(config, transformers)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=5e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01
    )
    step = make_torch_step(model, optimizer, config, args, torch)
    ids = torch.from_numpy(make_batches(4, args.batch, args.length, config.vocab_size)).long()
    for i in range(args.warmup):
        step(ids[i % 4])
    ends = []
    start = time.perf_counter()
    for i in range(args.steps):
        loss = step(ids[i % 4])
        ends.append(time.perf_counter())
    seconds = (time.perf_counter() - start) / args.steps
    step_seconds = [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]
    return {
        "config": config,
        "seconds_per_step": seconds,
        "step_seconds": step_seconds,
        "loss": float(loss),
    }


def TorchElectra(config, transformers):  # noqa: N802 (builds a torch.nn.Module)
    """HF ElectraForMaskedLM + ElectraForPreTraining sharing one embedding module."""
    import torch

    gen, disc = config.generator_config(), config.discriminator_config()

    def hf_config(sizes):
        return transformers.ElectraConfig(
            vocab_size=config.vocab_size,
            embedding_size=config.embedding_size,
            hidden_size=sizes.hidden_size,
            num_hidden_layers=sizes.num_layers,
            num_attention_heads=sizes.num_heads,
            intermediate_size=sizes.intermediate_size,
            max_position_embeddings=config.max_position_embeddings,
            hidden_dropout_prob=config.dropout,
            attention_probs_dropout_prob=config.dropout,
            attn_implementation="sdpa",
        )

    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.generator = transformers.ElectraForMaskedLM(hf_config(gen))
            self.discriminator = transformers.ElectraForPreTraining(hf_config(disc))
            self.discriminator.electra.embeddings = self.generator.electra.embeddings
            # The MLM output projection is the shared word-embedding matrix.
            self.generator.generator_lm_head.weight = (
                self.generator.electra.embeddings.word_embeddings.weight
            )

    return Pair()


def torch_mask(ids, config, torch):
    """The same masking as keras_electra: top-k of random scores, 85% [MASK]."""
    batch, length = ids.shape
    p = config.max_predictions(length)
    candidates = (
        (ids != config.cls_token_id) & (ids != config.sep_token_id) & (ids != config.pad_token_id)
    )
    num = torch.clamp(torch.round(candidates.sum(1).float() * config.mask_prob), 1, p).long()
    scores = torch.where(candidates, torch.rand(ids.shape), torch.full(ids.shape, -1.0))
    positions = scores.topk(p, dim=1).indices
    chosen = torch.arange(p)[None, :] < num[:, None]
    labels = ids.gather(1, positions)
    use_mask = chosen & (torch.rand(positions.shape) < config.mask_token_prob)
    masked = ids.clone()
    masked.scatter_(1, positions, torch.where(use_mask, config.mask_token_id, labels))
    return masked, positions, labels, chosen.float()


def make_torch_step(model, optimizer, config, args, torch):
    import torch.nn.functional as F  # noqa: N812

    gen, disc = model.generator, model.discriminator

    def losses(ids):
        masked, positions, labels, weights = torch_mask(ids, config, torch)
        hidden = gen.electra(input_ids=masked).last_hidden_state
        picked = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        logits = gen.generator_lm_head(gen.generator_predictions(picked)).float()
        per_position = F.cross_entropy(  # rows of V: log-softmax over contiguous memory
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        )
        mlm = (per_position * weights.reshape(-1)).sum()
        mlm = mlm / (weights.sum() + 1e-6)
        with torch.no_grad():  # inverse CDF, one uniform per position (as ours)
            cdf = torch.softmax(logits, -1).cumsum_(-1)
            target = torch.rand(cdf.shape[:-1] + (1,)) * cdf[..., -1:]
            sampled = torch.searchsorted(cdf, target, right=True)[..., 0]
            sampled = sampled.clamp_(max=cdf.shape[-1] - 1)
        fake = ids.scatter(1, positions, torch.where(weights > 0, sampled, labels))
        disc_logits = disc(input_ids=fake).logits.float()
        rtd = F.binary_cross_entropy_with_logits(disc_logits, (fake != ids).float())
        return mlm + DISC_WEIGHT * rtd

    if args.torch_compile:
        losses = torch.compile(losses)

    def step(ids):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision != "float32"):
            loss = losses(ids)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach()

    return step


# === Driver ===


def load_package_from(directory: str) -> None:
    """Import ``keras_electra`` from ``directory`` (an editable install's import hook
    would otherwise win over ``PYTHONPATH``)."""
    import importlib.util

    root = os.path.join(directory, "keras_electra")
    spec = importlib.util.spec_from_file_location(
        "keras_electra", os.path.join(root, "__init__.py"), submodule_search_locations=[root]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["keras_electra"] = module
    spec.loader.exec_module(module)


def child(args) -> None:
    """Run one configuration; print its ``result`` JSON line."""
    if args.engine == "peak":
        for dtype in ("float32", "bfloat16"):
            print(json.dumps({"kind": "peak", "dtype": dtype, "flops": matmul_peak(dtype)}))
        return
    if args.engine == "input":
        print(json.dumps(run_input(args)), flush=True)
        return
    if args.source:  # a --baseline row: that commit's keras_electra, not the installed one
        load_package_from(args.source)
    before = calibrate()
    out = run_keras(args) if args.engine == "keras" else run_torch(args)
    after = calibrate()
    out.pop("config")
    times = sorted(out["step_seconds"])
    tokens = args.batch * args.length
    record = {
        "kind": "result",
        "engine": args.engine,
        "preset": args.preset,
        "precision": args.precision,
        "batch": args.batch,
        "length": args.length,
        "jit_compile": args.jit_compile,
        "steps_per_execution": args.steps_per_execution,
        "xla": args.xla,
        "grad_accumulation": args.grad_accumulation,
        "torch_compile": args.torch_compile,
        "threads": args.threads or None,
        "seconds_per_step": round(out["seconds_per_step"], 4),
        "tokens_per_sec": round(tokens / out["seconds_per_step"], 1),
        "loss": round(out["loss"], 4),
        "timed_steps": len(times),
        # Step-time spread: fastest, median and slowest timed step.
        "step_seconds_min_median_max": [
            round(times[0], 3),
            round(statistics.median(times), 3),
            round(times[-1], 3),
        ],
        # The child's peak resident memory (model, optimizer, activations, runtime).
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        # What is resident after the timed steps: private (anonymous) pages, and pages of
        # mapped files (the engines' shared libraries, shared between processes).
        **resident_split(),
    }
    record["package"] = os.path.dirname(sys.modules["keras_electra"].__file__)
    # The machine's speed around this row: a slow spell shows as a low figure here.
    record["calibration_gflops"] = [round(before / 1e9, 1), round(after / 1e9, 1)]
    print(json.dumps(record), flush=True)


def status_mb() -> dict[str, float]:
    """This process's memory from ``/proc/self/status``, MB: ``rss`` (resident now),
    ``peak`` (its high-water mark), ``anon`` (private pages) and ``file`` (pages of
    mapped files: the engines' shared libraries). Empty where there is no ``/proc``.

    The benchmark's own reader, not the package's: a ``--baseline`` child runs an
    older ``keras_electra``."""
    names = {"VmRSS": "rss", "VmHWM": "peak", "RssAnon": "anon", "RssFile": "file"}
    found: dict[str, float] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in names:
                    found[names[name]] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        return {}
    return found


def resident_split() -> dict[str, float | None]:
    """``rss_anon_mb`` and ``rss_file_mb`` (None where there is no ``/proc``)."""
    now = status_mb()
    return {"rss_anon_mb": now.get("anon"), "rss_file_mb": now.get("file")}


def cpu_times() -> list[int]:
    """The machine's CPU time counters (``/proc/stat``'s first line; empty elsewhere)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return []


def spawn(args, source: str | None = None, **overrides) -> list[dict]:
    """Run one configuration in a child process; ``source`` is a directory holding
    another checkout's ``keras_electra`` (a ``--baseline`` row)."""
    argv = [sys.executable, __file__, "--child"]
    settings = {**vars(args), **overrides}
    if source is not None:
        argv += ["--source", source]
    for name in (
        "engine",
        "preset",
        "precision",
        "batch",
        "length",
        "steps",
        "warmup",
        "steps_per_execution",
        "grad_accumulation",
        "threads",
        "corpus",
    ):
        argv += [f"--{name.replace('_', '-')}", str(settings[name])]
    for flag in ("jit_compile", "torch_compile", "xla"):
        if settings[flag]:
            argv.append(f"--{flag.replace('_', '-')}")
    env = dict(os.environ)
    if settings["engine"] == "torch":
        # PyTorch's best setting here: glibc keeps freed activations instead of
        # returning them to the kernel (a fresh mmap per large tensor per step
        # otherwise page-faults every step).
        env.update(
            MALLOC_MMAP_THRESHOLD_="33554432",
            MALLOC_TRIM_THRESHOLD_="4294967296",
            MALLOC_TOP_PAD_="1073741824",
        )
    before = cpu_times()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, env=env)
    after = cpu_times()
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        lines = [
            {
                "kind": "skipped",
                **{k: settings[k] for k in ("engine", "precision")},
                "reason": reason,
            }
        ]
    # The hypervisor's share of this machine's CPU time while the child ran: a
    # throttled VM shows here, not in the child's own numbers.
    spent = [b - a for a, b in zip(before, after, strict=True)]
    steal = round(spent[7] / max(sum(spent), 1), 4) if len(spent) > 7 else None
    for line in lines:
        line["source"] = args.baseline if source is not None else "current"
        line["steal_share"] = steal
        if line["kind"] == "result":
            line["step_gflops"] = round(step_gflops(settings), 2)
        print(json.dumps(line), flush=True)
    return lines


def step_gflops(settings: dict) -> float:
    """Matmul GFLOPs of one ELECTRA step of the configuration (today's FLOP count)."""
    from keras_electra.config import ElectraConfig
    from keras_electra.pretraining import objectives

    config = ElectraConfig.from_preset(
        settings["preset"], max_position_embeddings=settings["length"]
    )
    return objectives.get("electra").step_flops(config, settings["batch"], settings["length"]) / 1e9


def new_pretrainer(args):
    """The preset's pretrainer (its recipe too: the tiny preset samples at temperature 2)
    at ``args.length`` positions in ``args.precision``, also from a baseline's older
    keras_electra, whose preset config held the recipe."""
    from keras_electra.config import ElectraConfig
    from keras_electra.pretraining.pretrainer import ElectraPretrainer
    from keras_electra.training.precision import dtype_policy

    dtype = dtype_policy(args.precision)
    if hasattr(ElectraPretrainer, "from_preset"):
        return ElectraPretrainer.from_preset(
            args.preset, seed=0, dtype=dtype, max_position_embeddings=args.length
        )
    config = ElectraConfig.from_preset(args.preset, max_position_embeddings=args.length)
    return ElectraPretrainer(config, seed=0, dtype=dtype)


def extract(ref: str, directory: str) -> str:
    """``keras_electra/`` of commit ``ref`` written under ``directory``; return it."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    archive = subprocess.run(
        ["git", "-C", repo, "archive", ref, "keras_electra"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
    return directory


def configurations(args) -> list[dict]:
    """The configurations to run: ours and (unless --no-torch) PyTorch's, per precision."""
    runs = []
    for precision in args.precisions.split(","):
        runs.append(dict(engine="keras", precision=precision))
        if not args.no_xla:
            runs.append(dict(engine="keras", precision=precision, xla=True))
        if args.spe_row > 1:
            runs.append(dict(engine="keras", precision=precision, steps_per_execution=args.spe_row))
        if args.try_levers:
            runs.append(dict(engine="keras", precision=precision, grad_accumulation=2))
            runs.append(dict(engine="keras", precision=precision, jit_compile=True))
        if args.no_torch:
            continue
        # OpenMP threads that spin-wait are pathological on a busy machine: try each count.
        for threads in (int(t) for t in args.torch_threads.split(",")):
            runs.append(dict(engine="torch", precision=precision, threads=threads))
            if args.try_levers or args.torch_compile_rows:
                runs.append(
                    dict(engine="torch", precision=precision, threads=threads, torch_compile=True)
                )
    return runs


def paired_ratios(results: list[dict], source: str, precision: str) -> list[float]:
    """Per round, ``source``'s default step time over today's (above 1: today is faster)."""
    steps: dict = {}
    for r in results:
        default_step = not (r["xla"] or r["jit_compile"] or r["grad_accumulation"] > 1)
        if r["engine"] == "keras" and default_step and r["steps_per_execution"] == 1:
            if r["precision"] == precision and "round" in r:
                steps.setdefault(r["round"], {})[r["source"]] = r["seconds_per_step"]
    return [s[source] / s["current"] for _, s in sorted(steps.items()) if len(s) == 2]


def summarize(peaks: dict, results: list[dict], inputs: list[dict]) -> dict:
    """Add MFU to each result; the best tokens/s per engine and their ratio."""
    best = {}
    for r in results:
        peak = peaks["bfloat16" if r["precision"] != "float32" else "float32"]
        r["mfu"] = round(r["step_gflops"] * 1e9 / r["seconds_per_step"] / peak, 4)
        if r["tokens_per_sec"] > best.get(r["engine"], {}).get("tokens_per_sec", 0):
            best[r["engine"]] = r
    summary = {
        "kind": "summary",
        "peak_gflops": {k: round(v / 1e9, 1) for k, v in peaks.items()},
        "results": results,
        "best": best,
    }
    if inputs and "keras" in best:
        summary["input"] = inputs[0]
        summary["input_over_best_step"] = round(
            inputs[0]["tokens_per_sec"] / best["keras"]["tokens_per_sec"], 1
        )
    by_row: dict = {}
    for r in results:
        default_step = not (r["xla"] or r["jit_compile"] or r["grad_accumulation"] > 1)
        if r["engine"] == "keras" and default_step and r["steps_per_execution"] == 1:
            by_row.setdefault((r["source"], r["precision"]), []).append(r["seconds_per_step"])
    if any(source != "current" for source, _ in by_row):
        summary["median_seconds_per_step"] = {
            f"{source}/{precision}": round(statistics.median(v), 4)
            for (source, precision), v in by_row.items()
        }
        for (source, precision), v in by_row.items():
            if source != "current" and ("current", precision) in by_row:
                current = statistics.median(by_row[("current", precision)])
                summary[f"current_over_{source}_{precision}_speed"] = round(
                    statistics.median(v) / current, 3
                )
                # The same, paired: each round's baseline step over that round's own.
                paired = paired_ratios(results, source, precision)
                if paired:
                    summary[f"current_over_{source}_{precision}_paired"] = {
                        "median": round(statistics.median(paired), 3),
                        "per_round": [round(x, 3) for x in paired],
                    }
    if "keras" in best and "torch" in best:
        summary["ours_over_torch"] = round(
            best["keras"]["tokens_per_sec"] / best["torch"]["tokens_per_sec"], 2
        )
    # The same from each configuration's median step (less exposed to one slow step),
    # and our mixed_bfloat16 step against our float32 one.
    medians: dict = {}
    for r in results:
        if r["engine"] == "keras" and r["source"] != "current":
            continue
        # One configuration per thread count too: PyTorch's 1- and 2-thread rows differ.
        key = (r["engine"], r["precision"], r.get("threads"))
        key += (r["xla"], r["jit_compile"], r["torch_compile"])
        medians.setdefault(key, []).append(r["step_seconds_min_median_max"][1])
    fastest = {}
    for (engine, precision, _threads, *levers), v in medians.items():
        seconds = statistics.median(v)
        if not any(levers) or engine == "torch":
            fastest[engine] = min(fastest.get(engine, seconds), seconds)
        if engine == "keras" and not any(levers):
            summary[f"keras_median_step_seconds_{precision}"] = round(seconds, 4)
    if "keras" in fastest and "torch" in fastest:
        summary["ours_over_torch_by_median_step"] = round(fastest["torch"] / fastest["keras"], 2)
    f32 = summary.get("keras_median_step_seconds_float32")
    bf16 = summary.get("keras_median_step_seconds_mixed_bfloat16")
    if f32 and bf16:
        summary["keras_bf16_over_f32_by_median_step"] = round(f32 / bf16, 2)
    return summary


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--precisions", default="float32,mixed_bfloat16")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument(
        "--spe-row",
        type=int,
        default=4,
        help="steps_per_execution of our extra row per precision (<= 1: no row)",
    )
    p.add_argument("--no-xla", action="store_true", help="skip our --xla rows")
    p.add_argument("--no-input", action="store_true", help="skip the input pipeline line")
    p.add_argument(
        "--corpus",
        default=os.path.join(os.path.dirname(__file__), "..", "data", "sample", "shakespeare.txt"),
        help="text for the input pipeline line",
    )
    p.add_argument(
        "--torch-threads",
        default=f"1,{os.cpu_count()}",
        help="comma-separated PyTorch thread counts to try",
    )
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--try-levers", action="store_true", help="also XLA and torch.compile")
    p.add_argument(
        "--torch-compile-rows", action="store_true", help="also PyTorch with torch.compile"
    )
    p.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
    p.add_argument("--baseline", metavar="REF", help="also run our default step at commit REF")
    p.add_argument("--rounds", type=int, default=1, help="repeat every configuration N times")
    # Internal: one configuration in a subprocess.
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--engine", default="keras", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--jit-compile", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--xla", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--steps-per-execution", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--grad-accumulation", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--torch-compile", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--source", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args)
        return
    peaks = {r["dtype"]: r["flops"] for r in spawn(args, engine="peak") if r["kind"] == "peak"}
    inputs = (
        [] if args.no_input else [r for r in spawn(args, engine="input") if r["kind"] == "input"]
    )
    results = []
    defaults = {
        "jit_compile": False,
        "torch_compile": False,
        "xla": False,
        "steps_per_execution": 1,
        "grad_accumulation": 1,
    }
    with tempfile.TemporaryDirectory() as tmp:
        baseline = extract(args.baseline, tmp) if args.baseline else None
        for round_number in range(args.rounds):
            for overrides in configurations(args):
                sources = [None]
                if baseline and overrides["engine"] == "keras" and len(overrides) == 2:
                    # Today's first in even rounds, the baseline first in odd ones: a
                    # machine that drifts, or a first run that pays for a cold cache,
                    # does not favour either side.
                    sources = [None, baseline][:: -1 if round_number % 2 else 1]
                for source in sources:
                    extra = {"source": source} if source else {}
                    lines = spawn(args, **extra, **{**defaults, **overrides})
                    results += [dict(r, round=round_number) for r in lines if r["kind"] == "result"]
    print(json.dumps(summarize(peaks, results, inputs)))


if __name__ == "__main__":
    main()
