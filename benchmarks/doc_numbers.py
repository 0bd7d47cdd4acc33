"""Every measured number the README and the documentation quote, from benchmarks/results/.

The pages mark what this script owns, and it rewrites (``--write``) or checks (``--check``)
exactly those places:

- a block, on lines of its own: ``<!-- numbers:NAME -->`` ... ``<!-- /numbers:NAME -->``
  (a table, a list); the ELECTRA-vs-MLM study's ``<!-- study:NAME -->`` blocks are made by
  ``electra_vs_mlm_table.py``'s renderers, through this script;
- a number in a sentence: ``<!-- n:NAME -->2.19<!-- /n -->``.

Each name renders from its results files in ``benchmarks/results/`` (``SOURCES`` says
which). ``tests/test_benchmarks.py`` runs the check, so a page that drifts from its results
file, a name this script does not know, or one no page quotes, fails the suite.

**The results files.** ``benchmarks/results/index.json`` describes every file there, in one
schema: ``{"FILE": {"date": ..., "machine": ..., "command": ..., "written_by": ...}}``
(``written_by``: the script that wrote it, or, for a figure measured before its script kept
a file, where it was transcribed from). Files written by hand from such a record hold
``{"runs": [{"date", "machine", "command", ..., the results}]}``. A file not in the index, or
an index entry without its file, fails the check too.

Usage:
    python benchmarks/doc_numbers.py --check    # exit 1 and name each drift
    python benchmarks/doc_numbers.py --write    # rewrite every block from the results
    python benchmarks/doc_numbers.py --list     # every name, its source and its text
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from functools import cache, partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
INDEX = RESULTS / "index.json"
INDEX_FIELDS = ("date", "machine", "command", "written_by")
# The pretraining step against the PyTorch reference, two runs on the same machine.
SPEED_RUNS = (
    "pretrain_throughput_2026-11-26h_amx_vs_torch.jsonl",
    "pretrain_throughput_2026-11-26h_amx_vs_torch_2.jsonl",
)
# mixed_bfloat16 and float32 on a CPU with avx512_bf16 and no AMX.
EPYC_RUNS = (
    "pretrain_throughput_2026-11-25_fused_kernels.jsonl",
    "pretrain_throughput_2026-11-25_fused_kernels_float32.jsonl",
)

# The compiled kernels against XLA's, one kernel at a time.
KERNEL_TIMES = "kernel_times_2026-11-26h_amx.jsonl"

BLOCK = re.compile(
    r"^([ \t]*)<!-- (study|numbers):([\w.-]+) -->\n(.*?)^\1<!-- /\2:\3 -->", re.S | re.M
)
INLINE = re.compile(r"<!-- n:([\w.-]+) -->(.*?)<!-- /n -->")


# === Reading ===


def read_lines(name: str) -> list[dict]:
    """The JSON lines of a results file (a line cut short by a kill skipped)."""
    rows = []
    for line in (RESULTS / name).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def read_json(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _table_module():
    """``electra_vs_mlm_table.py``, imported from its file (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "electra_vs_mlm_table", REPO / "benchmarks" / "electra_vs_mlm_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def study_blocks() -> dict[str, str]:
    table = _table_module()
    return table.blocks(table.summarize(table.read_study(table.RESULTS)))


# === Formats ===


def _n(x: float, digits: int = 0) -> str:
    """``6,281`` or ``2.19``: thousands separated, ``digits`` decimals, a half rounded up
    (a mean of 0.6205 reads 0.621, whatever its binary form's last digit)."""
    exact = Decimal(repr(round(x, 9))).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)
    return f"{exact:,.{digits}f}"


def _range(values: list[float], digits: int = 2, unit: str = "") -> str:
    """``2.02–2.19`` (one value when they agree at that precision)."""
    low, high = _n(min(values), digits), _n(max(values), digits)
    return (low if low == high else f"{low}–{high}") + unit


def _minutes(seconds: float) -> str:
    whole = round(seconds)  # 1,739.9 s is 29 min 0 s, not 28 min 60 s
    return f"{whole // 60} min {whole % 60} s"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


# === Pretraining speed ===


def _summary(name: str) -> dict:
    return next(r for r in read_lines(name) if r.get("kind") == "summary")


def _results(name: str) -> list[dict]:
    return [r for r in read_lines(name) if r.get("kind") == "result" and r["source"] == "current"]


def _ours_bf16(name: str) -> list[dict]:
    return [r for r in _results(name) if r["engine"] == "keras" and r["precision"] != "float32"]


def _compiled_torch_bf16(name: str) -> list[dict]:
    return [
        r
        for r in _results(name)
        if r["engine"] == "torch" and r["torch_compile"] and r["precision"] != "float32"
    ]


def speed_over_torch() -> str:
    """Our best round over the reference's best (``ours_over_torch``), over the runs."""
    return _range([_summary(f)["ours_over_torch"] for f in SPEED_RUNS]) + "×"


def speed_over_torch_by_median() -> str:
    return _range([_summary(f)["ours_over_torch_by_median_step"] for f in SPEED_RUNS]) + "×"


def speed_tokens() -> str:
    """Our mixed_bfloat16 tokens/s over every round of the runs."""
    return _range([r["tokens_per_sec"] for f in SPEED_RUNS for r in _ours_bf16(f)], 0)


def speed_bf16_over_float32() -> str:
    """Our mixed_bfloat16 step against our float32 step, by median step, over the runs."""
    return _range([_summary(f)["keras_bf16_over_f32_by_median_step"] for f in SPEED_RUNS]) + "×"


def speed_memory_ratio() -> str:
    """Our peak resident memory over ``torch.compile``'s (the higher round of each), per run."""
    ratios = [
        max(r["peak_rss_mb"] for r in _ours_bf16(f))
        / max(r["peak_rss_mb"] for r in _compiled_torch_bf16(f))
        for f in SPEED_RUNS
    ]
    return _range(ratios) + "×"


def speed_peak_gb(precision: str = "mixed_bfloat16") -> str:
    """Our peak resident memory in ``precision`` over every round of the runs."""
    peaks = [
        r["peak_rss_mb"] / 1000
        for f in SPEED_RUNS
        for r in _results(f)
        if r["engine"] == "keras" and r["precision"] == precision
    ]
    return _range(peaks, unit=" GB")


def epyc_bf16_over_float32() -> str:
    """On the EPYC: the median of our mixed_bfloat16 steps (its run) against the median of
    our float32 steps (the float32 run)."""
    bf16 = _summary(EPYC_RUNS[0])["median_seconds_per_step"]["current/mixed_bfloat16"]
    f32 = _summary(EPYC_RUNS[1])["median_seconds_per_step"]["current/float32"]
    return f"{f32 / bf16:.2f}×"


ENGINES = (
    ("keras", "mixed_bfloat16", False, "**keras-electra, mixed_bfloat16**"),
    ("torch", "mixed_bfloat16", True, "PyTorch bf16 autocast, `torch.compile`"),
    ("torch", "mixed_bfloat16", False, "PyTorch bf16 autocast, eager"),
    ("keras", "float32", False, "keras-electra, float32"),
    ("torch", "float32", True, "PyTorch float32, `torch.compile`"),
    ("torch", "float32", False, "PyTorch float32, eager"),
)


def speed_table() -> str:
    """Each configuration's rounds in each run: tokens/s, median step, peak RSS."""
    rows = []
    for i, name in enumerate(SPEED_RUNS, 1):
        results = _results(name)
        for engine, precision, compiled, label in ENGINES:
            rounds = [
                r
                for r in results
                if r["engine"] == engine
                and r["precision"] == precision
                and bool(r["torch_compile"]) == compiled
            ]
            rows.append(
                [
                    str(i),
                    label,
                    " / ".join(_n(r["tokens_per_sec"]) for r in rounds),
                    " / ".join(f"{r['step_seconds_min_median_max'][1]:.3f}" for r in rounds),
                    " / ".join(_n(r["peak_rss_mb"]) for r in rounds),
                ]
            )
    header = ["run", "engine", "tokens/s, round 1 / 2", "median step s", "peak RSS MB"]
    return _table(header, rows)


def speed_runs() -> str:
    """Per run: the machine's matmul peaks and the ratios its summary gives."""
    lines = []
    for i, name in enumerate(SPEED_RUNS, 1):
        s = _summary(name)
        lines.append(
            f"- Run {i} (`benchmarks/results/{name}`; matmul peaks in the run: bf16 "
            f"{_n(s['peak_gflops']['bfloat16'])} GFLOP/s, "
            f"float32 {_n(s['peak_gflops']['float32'])}): "
            f"our best round {s['ours_over_torch']:.2f}× the reference's best, "
            f"{s['ours_over_torch_by_median_step']:.2f}× by median step; our mixed_bfloat16 "
            f"step {s['keras_bf16_over_f32_by_median_step']:.2f}× our float32 step."
        )
    return "\n".join(lines)


def compiled_speedup() -> str:
    """XLA's time per call over the compiled kernel's, per fused kernel, on two threads."""
    rows = [r for r in read_lines(KERNEL_TIMES) if r["kind"] == "kernel" and r["threads"] == 2]
    ms = {(r["name"], r["engine"]): r["ms_per_call"] for r in rows}
    ratios = [ms[(n, "xla")] / ms[(n, "compiled")] for n, e in ms if e == "compiled"]
    return _range(ratios, 1) + "×"


# === Serving, the demo, the suite, the probe, the research pages ===


def _serving(batch: int, engine: str = "savedmodel") -> dict:
    rows = read_json("serving_throughput.json")["runs"][0]["results"]
    return next(r for r in rows if r["batch"] == batch and r["engine"] == engine)


SERVING_ENGINES = {
    "savedmodel": "SavedModel, TF Serving's TF1 graph loader",
    "keras": "Keras model in process",
}


def serving_table() -> str:
    rows = read_json("serving_throughput.json")["runs"][0]["results"]
    return _table(
        ["engine", "batch", "sentences/s", "p50 ms", "p99 ms"],
        [
            [
                SERVING_ENGINES[r["engine"]],
                str(r["batch"]),
                _n(r["sentences_per_sec"]),
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
            ]
            for r in sorted(rows, key=lambda r: (r["batch"], r["engine"] != "savedmodel"))
        ],
    )


def vocab_table() -> str:
    """Our WordPiece learner beside tensorflow-text's, per size (benchmarks/vocab_learning.py)."""
    return _table(
        [
            "distinct words",
            "pieces learned",
            "ours, s",
            "tensorflow-text, s",
            "speed-up",
            "same pieces",
        ],
        [
            [
                _n(r["distinct_words"]),
                _n(r["tokens"]),
                f"{r['seconds']:.1f}",
                f"{r['reference_seconds']:.1f}",
                f"{r['speedup']:.1f}×",
                "yes" if r["identical"] else "no",
            ]
            for r in read_json("vocab_learning.json")["runs"]
        ],
    )


def _vocab_run(distinct: int) -> dict:
    (run,) = [
        r for r in read_json("vocab_learning.json")["runs"] if r["distinct_words"] == distinct
    ]
    return run


def _demo() -> dict:
    """The run whose scores the README shows: the latest with its printed lines."""
    return [r for r in read_json("demo.json")["runs"] if r.get("output")][-1]


def _demo_scores() -> list[list[tuple[str, float]]]:
    """Each scored sentence as (piece, probability) pairs."""
    out = []
    for line in _demo()["output"]:
        pairs = re.findall(r"(\S+?)\((\d\.\d+)\)", line)
        out.append([(piece, float(p)) for piece, p in pairs])
    return out


def _word_max(pieces: list[tuple[str, float]], start: int) -> tuple[int, float]:
    """The end of the word starting at ``start`` and its highest piece."""
    end = start + 1
    while end < len(pieces) and pieces[end][0].startswith("##"):
        end += 1
    return end, max(p for _, p in pieces[start:end])


def _words(pieces: list[tuple[str, float]]) -> list[tuple[str, list[float]]]:
    words, i = [], 0
    while i < len(pieces):
        end, _ = _word_max(pieces, i)
        words.append(
            ("".join(t.removeprefix("##") for t, _ in pieces[i:end]), [p for _, p in pieces[i:end]])
        )
        i = end
    return words


def _score(sentence: int, word: str) -> list[float]:
    return next(ps for w, ps in _words(_demo_scores()[sentence]) if w == word)


def demo_output() -> str:
    return "```\n" + "\n".join(_demo()["output"]) + "\n```"


def demo_others() -> str:
    """The highest piece of the banana sentence's other words."""
    return f"{max(max(ps) for w, ps in _words(_demo_scores()[1]) if w != 'banana'):.2f}"


def demo_time() -> str:
    """The latest clean-clone demo on an otherwise idle machine, the install included."""
    return _minutes(_idle_demo()["seconds"])


def _idle_demo() -> dict:
    return [r for r in read_json("demo.json")["runs"] if r["conditions"].startswith("idle")][-1]


def _workers(run: dict) -> re.Match | None:
    """The worker count a run chose with ``PYTEST_ARGS="-n N"``, where it did."""
    return re.search(r"(?:^|\s)-n\s*(\d+)", run.get("pytest_args", ""))


def suite_table() -> str:
    rows = [
        [
            r["machine"],
            # Before the slow mark, `make test` ran what `make test-all` runs now.
            f"make {r.get('target', 'test-all')}",
            f"{r['passed']} passed, {r['skipped']} skipped"
            + (f" (without {', '.join(r['without'])})" if r.get("without") else "")
            + (f" ({m.group(1)} workers)" if (m := _workers(r)) else ""),
            _minutes(r["seconds"]),
            _minutes(r["seconds_with_install"]),
        ]
        for r in read_json("test_suite.json")["runs"]
        if not r.get("failed") and not r.get("errors") and r["conditions"].startswith("idle")
    ]
    header = ["machine (2 cores, idle)", "suite", "tests", "time", "with the install"]
    return _table(header, rows)


def _wheel() -> dict:
    """The latest wheel built in a clean clone and used from a new virtualenv."""
    return read_json("wheel_install.json")["runs"][-1]


def _health() -> dict:
    return read_json("health_overhead.json")


def _first_study() -> dict[tuple[str, str], float]:
    """The first ELECTRA-vs-MLM run: mean test accuracy over seeds at the full budget."""
    values: dict = {}
    for row in read_lines("electra_vs_mlm.jsonl"):
        for task, result in row["points"][-1]["tasks"].items():
            values.setdefault((row["objective"], task), []).append(result["accuracy"])
    return {k: statistics.fmean(v) for k, v in values.items()}


def first_study_tflops() -> str:
    """The first study's pretraining TFLOPs per arm: ELECTRA's steps times its step's."""
    electra = [r for r in read_lines("electra_vs_mlm.jsonl") if r["objective"] == "electra"]
    return f"{statistics.median(r['steps'] * r['step_flops'] for r in electra) / 1e12:.1f}"


def study_unit_tflops() -> str:
    """The pretraining TFLOPs of the scarce-label study's 1× compute."""
    table = _table_module()
    return f"{table.unit_tflops(table.read_study(table.RESULTS)):.1f}"


def first_study_table() -> str:
    """Per objective and fine-tuning point: test accuracy, mean ± standard deviation over
    seeds, and the pretraining's last-window health at the full budget (mean over seeds)."""
    rows = read_lines("electra_vs_mlm.jsonl")
    points: dict = {}
    for row in rows:
        for i, point in enumerate(row["points"]):
            points.setdefault((row["objective"], i), []).append((row, point))
    out = []
    for (objective, i), cells in sorted(points.items()):
        tflops = statistics.fmean(p["flops"] for _, p in cells) / 1e12
        line = [objective, str(len(cells)), f"{tflops:.1f}"]
        for task in ("bbc_topic", "tweet_sentiment"):
            accs = [p["tasks"][task]["accuracy"] for _, p in cells]
            line.append(f"{_n(statistics.fmean(accs), 3)} ± {_n(statistics.stdev(accs), 3)}")
        last = i == len(cells[0][0]["points"]) - 1
        for metric in ("disc_auc", "context_auc", "mlm_accuracy"):
            values = [r["pretrain"][metric] for r, _ in cells if metric in r.get("pretrain", {})]
            line.append(_n(statistics.fmean(values), 3) if values and last else "")
        out.append(line)
    header = ["objective", "seeds", "pretraining TFLOPs", "bbc_topic", "tweet_sentiment"]
    return _table(header + ["disc_auc", "context_auc", "MLM accuracy"], out)


def first_study_accuracies() -> str:
    acc = _first_study()
    names = (("none", "no pretraining"), ("mlm", "MLM"), ("electra", "ELECTRA"))
    return ", ".join(
        f"{label} {_n(acc[(arm, 'bbc_topic')], 3)} / {_n(acc[(arm, 'tweet_sentiment')], 3)}"
        for arm, label in names
    )


def finetune_real_table() -> str:
    """The tweet-sentiment example: accuracy and macro-F1 per model."""
    rows = read_json("finetune_real_dataset.json")["runs"][0]["results"]
    return _table(
        ["", "accuracy", "macro-F1"],
        [
            [
                r["model"],
                f"{r['accuracy']:.3f}",
                "" if "macro_f1" not in r else f"{r['macro_f1']:.3f}",
            ]
            for r in rows
        ],
    )


def _sigterm() -> dict:
    return read_json("sigterm_trials.json")["runs"][0]["results"]


def sigterm_count() -> str:
    r = _sigterm()
    return f"{r['exited_75']} of {r['trials']}"


def sigterm_seconds() -> str:
    s = _sigterm()["seconds_to_exit"]
    return f"{s['min']:.1f}–{s['max']:.1f}"


def _sweep(recipe: str, step: int | None = None) -> dict:
    """A recipe's health at ``step``, or its last window's metrics (``None``)."""
    row = next(r for r in read_lines("recipe_sweep.jsonl") if r["recipe"] == recipe)
    return row["last"] if step is None else row["at"][str(step)]


def _sweep_number(recipe: str, metric: str, step: int | None = None) -> tuple:
    """A source for a recipe's metric at ``step`` (its last window's: ``None``), 2 decimals."""
    return "recipe_sweep.jsonl", field(partial(_sweep, recipe, step), metric, spec=".2f")


def _paper_warning() -> str:
    """The health warning of the temperature-1 run."""
    row = next(r for r in read_lines("recipe_sweep.jsonl") if r["recipe"] == "paper")
    return row["warnings"][0]


def _sweep_range(metric: str, recipes: tuple[str, ...] = ("paper", "t2")) -> str:
    """The range of ``metric`` over the recipes' windows at steps 150, 300 and 600."""
    values = [_sweep(r, step)[metric] for r in recipes for step in (150, 300, 600)]
    return f"{min(values):.2f}–{max(values):.2f}"


# The tiny-recipe sweep's rows: recipe, its steps, the page's label, the three windows.
RECIPE_ROWS = (
    ("paper", 600, "the paper: temperature 1, `all` sharing"),
    ("t2", 600, "temperature 2"),
    ("t2-clm1", 600, "temperature 2 + corrective LM, weight 1"),
    ("paper-clm1", 600, "temperature 1 + corrective LM, weight 1"),
    ("t2-clm5", 600, "temperature 2 + corrective LM, weight 5"),
    ("t2-prenorm", 600, "temperature 2 + pre-LayerNorm towers"),
    ("t2-deep4", 600, "temperature 2 + 4 × 96 discriminator (≈ same encoder FLOPs)"),
    ("paper-prenorm", 600, "temperature 1 + pre-LayerNorm towers"),
    ("gdes-t2", 600, "temperature 2 + `gdes` sharing (**the tiny default**)"),
    ("word-t2", 600, "temperature 2 + `word` sharing"),
    ("none-t2", 600, "temperature 2 + `none` sharing"),
    ("gdes-t2-lr2e-3", 600, "the tiny default at learning rate 2e-3"),
    (
        "gdes-t2-short-v4k",
        1200,
        "the tiny default at lr 1e-3, 64-token sequences, 4,000-piece vocabulary, 1,200 "
        "steps (same tokens)",
    ),
)


def recipe_table() -> str:
    """Every lever of the tiny-recipe sweep: `disc_auc` at three windows, the rest at the
    last; the highest MLM accuracy of the 600-step runs in bold, a run at other steps
    marked †."""
    runs = {(r["recipe"], r["steps"]): r for r in read_lines("recipe_sweep.jsonl")}
    rows, best = [], max(runs[k[:2]]["last"]["mlm_accuracy"] for k in RECIPE_ROWS if k[1] == 600)
    for recipe, steps, label in RECIPE_ROWS:
        at = runs[(recipe, steps)]["at"]
        windows = sorted(at, key=int)[-3:]
        last = at[windows[-1]]
        mlm = f"{last['mlm_accuracy']:.3f}"
        aucs = " / ".join(f"{at[w]['disc_auc']:.2f}" for w in windows)
        rows.append(
            [
                label,
                aucs + (" †" if steps != 600 else ""),
                f"{last['disc_recall']:.2f}",
                f"{last['context_auc']:.3f}",
                f"{last['rarity_auc']:.2f}",
                f"{last['cosine']:.2f}",
                f"**{mlm}**" if last["mlm_accuracy"] == best and steps == 600 else mlm,
            ]
        )
    header = ["recipe (600 steps, lr 5e-4)", "disc_auc @150 / 300 / 600", "recall @600"]
    header += ["context_auc @600", "rarity_auc @600", "cosine @600", "MLM acc @600"]
    return _table(header, rows)


# === Corpus preparation ===

PREPARE = "prepare_throughput_2026-11-30.json"
PREPARE_ROWS = (
    ("`prepare`, in process", "prepare_in_process"),
    ("`prepare` on Beam, DirectRunner, 1 worker", "prepare_beam_1"),
    ("`prepare` on Beam, DirectRunner, 2 workers", "prepare_beam_2"),
    ("peer", "best peer"),  # the peer at its fastest batch size, named in the row
    ("vocabulary: `learn_vocab`", "vocab_ours"),
    ("vocabulary: Beam word count (2 workers) + the learner", "vocab_beam_2"),
    ("vocabulary: `tokenizers`' WordPiece trainer", "vocab_peer"),
)


def prepare_table() -> str:
    """``prepare`` and vocabulary learning against the ``tokenizers`` peer, one run."""
    run = read_json(PREPARE)
    head = (
        f"{run['corpus_mb']:.0f} MB, {run['vocab_size']:,} pieces, {run['max_seq_length']} tokens"
    )
    rows = []
    for label, key in PREPARE_ROWS:
        if key == "best peer":
            peers = [k for k in run["mb_per_s"] if k.startswith("prepare_peer_batch_")]
            key = max(peers, key=run["mb_per_s"].get)
            label = f"peer (`tokenizers`, {int(key.rsplit('_', 1)[1]):,} lines a batch: its best)"
        rate = run["mb_per_s"].get(key)
        rows.append([label, f"{run['seconds'][key]:.2f}", "" if rate is None else f"{rate:.2f}"])
    return _table([head, "seconds", "MB/s"], rows)


def prepare_large(key: str) -> str:
    """One writer on the corpus repeated to 100 MB: seconds (MB/s)."""
    run = read_json(PREPARE)["large_corpus"][key]
    return f"{run['seconds']:.1f} s ({run['mb_per_s']:.2f} MB/s)"


def rerank_table() -> str:
    """Per kind of list and scorer: how often the original came first and the word error
    rate, with picking at random beside them (``rerank_electric.py``)."""
    run = read_json("rerank_electric.json")
    rows = []
    for kind, result in run["kinds"].items():
        scorers = [
            ("Electric sentence score", result["electric"]),
            ("unigram LM of the pretraining corpus", result["unigram"]),
            ("a hypothesis at random", {"original_first": result["chance_original_first"],
                                        "wer": result["chance_wer"]}),
        ]  # fmt: skip
        for label, got in scorers:
            first, wer = 100 * got["original_first"], 100 * got["wer"]
            rows.append(
                [f"{kind} ({result['lists']} lists)", label, f"{first:.1f}%", f"{wer:.2f}%"]
            )
    return _table(["lists", "ranked by", "original first", "word error rate"], rows)


# === The registry: name -> (results file, renderer) ===


def field(getter: Callable[[], dict], *keys: str, spec: str = "") -> Callable[[], str]:
    """A number's text: ``getter()``'s value at ``keys`` (nested), formatted by ``spec``."""

    def text() -> str:
        value = getter()
        for key in keys:
            value = value[key]
        return format(value, spec)

    return text


SOURCES: dict[str, tuple[str | tuple[str, ...], Callable[[], str]]] = {
    "speed.over_torch": (SPEED_RUNS, speed_over_torch),
    "speed.over_torch_median": (SPEED_RUNS, speed_over_torch_by_median),
    "speed.tokens": (SPEED_RUNS, speed_tokens),
    "speed.bf16_over_float32": (SPEED_RUNS, speed_bf16_over_float32),
    "speed.memory_ratio": (SPEED_RUNS, speed_memory_ratio),
    "speed.peak_gb": (SPEED_RUNS, speed_peak_gb),
    "speed.peak_gb_float32": (SPEED_RUNS, lambda: speed_peak_gb("float32")),
    "speed.epyc_bf16_over_float32": (EPYC_RUNS, epyc_bf16_over_float32),
    "kernels.compiled_over_xla": (KERNEL_TIMES, compiled_speedup),
    "speed-table": (SPEED_RUNS, speed_table),
    "speed-runs": (SPEED_RUNS, speed_runs),
    "serving.batch1": ("serving_throughput.json", lambda: _n(_serving(1)["sentences_per_sec"])),
    "serving.batch1_p50": (
        "serving_throughput.json",
        field(partial(_serving, 1), "p50_ms", spec=".1f"),
    ),
    "serving.batch32": ("serving_throughput.json", lambda: _n(_serving(32)["sentences_per_sec"])),
    "serving-table": ("serving_throughput.json", serving_table),
    "demo-output": ("demo.json", demo_output),
    "demo.disc_auc": ("demo.json", field(_demo, "disc_auc", spec=".2f")),
    "demo.recall": ("demo.json", field(_demo, "disc_recall", spec=".2f")),
    "demo.banana": ("demo.json", lambda: _range(_score(1, "banana"))),
    "demo.others": ("demo.json", demo_others),
    "demo.computer": ("demo.json", lambda: f"{max(_score(2, 'computer')):.2f}"),
    "demo.long": ("demo.json", lambda: f"{max(_score(0, 'long')):.2f}"),
    "demo.gate": ("demo.json", lambda: f"{max(_score(2, 'gate')):.2f}"),
    "demo.time": ("demo.json", demo_time),
    "demo.machine": ("demo.json", field(_idle_demo, "machine")),
    "suite-table": ("test_suite.json", suite_table),
    "wheel.install": ("wheel_install.json", lambda: _minutes(_wheel()["install_seconds"])),
    "wheel.commands": ("wheel_install.json", lambda: _minutes(_wheel()["commands_seconds"])),
    "wheel.machine": ("wheel_install.json", field(_wheel, "machine")),
    "health.overhead": ("health_overhead.json", field(_health, "overhead_median", spec=".1%")),
    "health.overhead_max": ("health_overhead.json", field(_health, "overhead_max", spec=".1%")),
    "health.probe_seconds": (
        "health_overhead.json",
        field(_health, "health_seconds_median", spec=".2f"),
    ),
    "health.window_seconds": (
        "health_overhead.json",
        field(_health, "window_seconds_median", spec=".1f"),
    ),
    "health.trace_seconds": (
        "health_overhead.json",
        field(_health, "first_window", "health_seconds", spec=".1f"),
    ),
    "finetune-real-table": ("finetune_real_dataset.json", finetune_real_table),
    "sigterm.count": ("sigterm_trials.json", sigterm_count),
    "sigterm.seconds": ("sigterm_trials.json", sigterm_seconds),
    "sigterm.mean": ("sigterm_trials.json", field(_sigterm, "seconds_to_exit", "mean", spec=".1f")),
    "sigterm.steps": (
        "sigterm_trials.json",
        lambda: ", ".join(map(str, _sigterm()["stopped_at_steps"])),
    ),
    "sigterm.weight_difference": (
        "sigterm_trials.json",
        field(_sigterm, "largest_weight_difference_from_an_uninterrupted_run"),
    ),
    "study.unit_tflops": ("electra_vs_mlm_labels.jsonl", study_unit_tflops),
    "first_study.accuracies": ("electra_vs_mlm.jsonl", first_study_accuracies),
    "first_study.tflops": ("electra_vs_mlm.jsonl", first_study_tflops),
    "first-study-table": ("electra_vs_mlm.jsonl", first_study_table),
    "rerank-table": ("rerank_electric.json", rerank_table),
    "rerank.steps": (
        "rerank_electric.json",
        field(partial(read_json, "rerank_electric.json"), "pretrain_steps", spec=","),
    ),
    "recipe-table": ("recipe_sweep.jsonl", recipe_table),
    "vocab-table": ("vocab_learning.json", vocab_table),
    "vocab.million_seconds": (
        "vocab_learning.json",
        lambda: f"{_vocab_run(1_000_000)['seconds']:.0f}",
    ),
    "vocab.million_reference_seconds": (
        "vocab_learning.json",
        lambda: f"{_vocab_run(1_000_000)['reference_seconds']:.0f}",
    ),
    "prepare-table": (PREPARE, prepare_table),
    "prepare.ours_over_peer": (
        PREPARE,
        field(partial(read_json, PREPARE), "ours_over_peer", spec=".1f"),
    ),
    "prepare.vocab_over_peer": (
        PREPARE,
        field(partial(read_json, PREPARE), "vocab_speed_over_peer", spec=".2f"),
    ),
    "prepare.large_in_process": (PREPARE, lambda: prepare_large("in_process")),
    "prepare.large_beam_1": (PREPARE, lambda: prepare_large("beam_1")),
    "prepare.large_beam_2": (PREPARE, lambda: prepare_large("beam_2")),
    "prepare.large_scaling": (
        PREPARE,
        field(partial(read_json, PREPARE), "large_corpus", "beam_scaling", spec=".2f"),
    ),
    "recipe.tiny_auc": _sweep_number("gdes-t2", "disc_auc", 600),
    "recipe.tiny_recall": _sweep_number("gdes-t2", "disc_recall", 600),
    "recipe.t2_auc": _sweep_number("t2", "disc_auc"),
    "recipe.t2_recall": _sweep_number("t2", "disc_recall"),
    "recipe.t2_cosine": _sweep_number("t2", "disc_cosine_2"),
    "recipe.t2_logit_std": _sweep_number("t2", "probe_logit_std"),
    "recipe.paper_logit_std": _sweep_number("paper", "probe_logit_std"),
    "recipe.paper_auc_150": _sweep_number("paper", "disc_auc", 150),
    "recipe.paper_cosine": _sweep_number("paper", "disc_cosine_2"),
    "recipe.paper_warning_step": (
        "recipe_sweep.jsonl",
        lambda: re.search(r"at step (\d+)", _paper_warning()).group(1),
    ),
    "recipe.rarity_range": ("recipe_sweep.jsonl", lambda: _sweep_range("rarity_auc")),
    "recipe.context_range": ("recipe_sweep.jsonl", lambda: _sweep_range("context_auc")),
    "recipe.paper_auc_300": _sweep_number("paper", "disc_auc", 300),
}


def render(kind: str, name: str) -> str:
    """The text of a block or number; a name this script does not own stops with one sentence."""
    if kind == "study":
        made = study_blocks()
        if name not in made:
            raise KeyError(f"No study block is called {name!r}.")
        return made[name]
    if name not in SOURCES:
        raise KeyError(f"No results file gives {name!r}: add it to SOURCES in doc_numbers.py.")
    return SOURCES[name][1]()


# === Pages ===


def pages(root: Path = REPO) -> list[Path]:
    """README.md and every Markdown page of the documentation."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def fill(text: str) -> str:
    """``text`` with every block and number rendered from the results files, a block's
    lines indented as its marker is (a block inside a list item stays in it)."""

    def block(m: re.Match) -> str:
        indent, kind, name = m.group(1), m.group(2), m.group(3)
        body = "".join(
            f"{indent}{line}\n" if line else "\n" for line in render(kind, name).splitlines()
        )
        return f"{indent}<!-- {kind}:{name} -->\n{body}{indent}<!-- /{kind}:{name} -->"

    text = BLOCK.sub(block, text)
    return INLINE.sub(
        lambda m: f"<!-- n:{m.group(1)} -->{render('n', m.group(1))}<!-- /n -->", text
    )


def drift(root: Path = REPO) -> list[str]:
    """One sentence per place where a page differs from its results file, per unknown
    name, and per results file the index does not describe (an empty list: none)."""
    problems, quoted = [], set()
    for path in pages(root):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root)
        for m in BLOCK.finditer(text):
            indent, kind, name = m.group(1), m.group(2), m.group(3)
            quoted.add(name)
            found = "\n".join(line[len(indent) :] for line in m.group(4).splitlines())
            try:
                made = render(kind, name)
            except KeyError as error:
                problems.append(f"{where}: {error.args[0]}")
                continue
            if found != made:
                problems.append(
                    f"{where}: block {kind}:{name} differs from what its results file gives."
                )
        for m in INLINE.finditer(text):
            quoted.add(m.group(1))
            try:
                made = render("n", m.group(1))
            except KeyError as error:
                problems.append(f"{where}: {error.args[0]}")
                continue
            if m.group(2) != made:
                problems.append(
                    f"{where}: {m.group(1)} says {m.group(2)!r}, its results file gives {made!r}."
                )
    problems += [
        f"{name} in SOURCES is quoted by no page." for name in SOURCES if name not in quoted
    ]
    return problems + index_problems()


def index_problems() -> list[str]:
    """Results files without their index entry, entries without their file or fields."""
    index = json.loads(INDEX.read_text(encoding="utf-8"))
    files = {p.name for p in RESULTS.iterdir() if p.is_file() and p != INDEX}
    problems = [
        f"benchmarks/results/{f} is not described in index.json."
        for f in sorted(files - set(index))
    ]
    problems += [
        f"index.json describes {f}, which is not in benchmarks/results/."
        for f in sorted(set(index) - files)
    ]
    for name, entry in sorted(index.items()):
        missing = [k for k in INDEX_FIELDS if not entry.get(k)]
        if missing:
            problems.append(f"index.json's entry for {name} has no {', '.join(missing)}.")
    sources = {"electra_vs_mlm_labels.jsonl"}
    for files, _ in SOURCES.values():
        sources.update((files,) if isinstance(files, str) else files)
    problems += [
        f"{s}, a source of the docs' numbers, is not in index.json."
        for s in sorted(sources - set(index))
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="name every drift; exit 1 if any")
    action.add_argument("--write", action="store_true", help="rewrite the pages' blocks")
    action.add_argument("--list", action="store_true", help="print every name and its text")
    args = parser.parse_args(argv)
    if args.list:
        for name, (files, _) in SOURCES.items():
            source = files if isinstance(files, str) else ", ".join(files)
            print(f"{name} ({source}): {render('n', name)}")
        return 0
    if args.write:
        for path in pages():
            text = path.read_text(encoding="utf-8")
            filled = fill(text)
            if filled != text:
                path.write_text(filled, encoding="utf-8")
                print(f"rewrote {path.relative_to(REPO)}")
    problems = drift()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
