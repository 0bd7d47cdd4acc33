"""The ELECTRA-vs-MLM study's statistics, tables and figures, from its results file alone.

Reads ``benchmarks/results/electra_vs_mlm_labels.jsonl`` (written by
``electra_vs_mlm.py``) and answers the study's two questions per task, label budget and
compute: does ELECTRA beat masked-LM at equal compute (ELECTRA − MLM), and does the best
pretrained arm of the two beat no pretraining (best − none, the best arm chosen on
validation accuracy)? Beside them, where the Electric arm (1× by default) stands:
Electric − ELECTRA and Electric − MLM at equal compute.

**The unit is the pretraining seed.** A checkpoint's accuracy is the mean of its
fine-tunes (label draws × fine-tuning seeds); arms are paired by seed, because seed ``s``
of every arm fine-tunes on the same label draws. A difference is the mean over seeds of
the paired differences, with a 95% Student-t interval over seeds (``n − 1`` degrees of
freedom: three seeds give 2, so the interval is ±4.3 standard errors), and a two-sided
t-test whose p-values are Holm-corrected over all the comparisons of its question
(Electric's two differences are one question, corrected together). A difference *holds*
when its corrected p-value is below 0.05. The variance components
(between seeds, between draws within a seed, between fine-tuning seeds within a draw)
say where the spread comes from.

Usage:
    python benchmarks/electra_vs_mlm_table.py --markdown     # the tables
    python benchmarks/electra_vs_mlm_table.py --figures      # redraw the PNGs
    python benchmarks/electra_vs_mlm_table.py --write-docs   # regenerate the docs' blocks

The docs quote the study in blocks between ``<!-- study:NAME -->`` and
``<!-- /study:NAME -->`` (README.md, docs/benchmarks.md, the research page), made by
:func:`blocks`; ``benchmarks/doc_numbers.py`` writes and checks them with every other
number the docs quote (``--write-docs`` runs its ``--write``), and a test fails when a
block differs from what the committed results give.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import math
import statistics
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "electra_vs_mlm_labels.jsonl"
FIGURE = REPO / "docs" / "research" / "electra_vs_mlm_labels.png"
HEALTH_FIGURE = REPO / "docs" / "research" / "electra_vs_mlm_labels_health.png"
ARMS = ("none", "electra", "mlm", "electric")
QUESTIONS = {
    "electra_minus_mlm": "ELECTRA − MLM",
    "best_minus_none": "best pretrained − none",
    "electric_minus_electra": "Electric − ELECTRA",
    "electric_minus_mlm": "Electric − MLM",
}
# Holm's correction runs over a family: a question's comparisons; Electric's two
# differences answer one question (where does Electric stand?), so they are one family.
FAMILIES = {"electric_minus_electra": "electric", "electric_minus_mlm": "electric"}
# The questions asked at every compute (the figure's rows; the README's summary).
MAIN_QUESTIONS = ("electra_minus_mlm", "best_minus_none")
# The computes the driver runs Electric at by default (its --electric-compute).
ELECTRIC_COMPUTES = (1,)
# The whole study: 2 tasks x 3 seeds x (none + ELECTRA and MLM at 3 computes + Electric at 1x).
STUDY_CELLS = 48
NOT_YET = "not yet"
ALPHA = 0.05
HEALTH = ("disc_auc", "probe_auc", "context_auc", "rarity_auc", "mlm_accuracy", "cloze_accuracy")


# === Reading ===


def read_study(path: Path = RESULTS) -> list[dict]:
    """The lines of the newest study in ``path`` (the settings of its last ``data`` line),
    a cell run again superseding its earlier line."""
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a kill
    settings = next((r["settings"] for r in reversed(rows) if r.get("kind") == "data"), None)
    rows = [r for r in rows if r.get("settings") == settings]
    cells = {}
    for row in rows:
        if row.get("kind") == "cell":
            cells[(row["task"], row["compute"], row["objective"], row["seed"])] = row
    return [r for r in rows if r.get("kind") != "cell"] + list(cells.values())


# === Statistics ===


def t_quantile(df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(1 - ALPHA / 2, df))


def interval(values: list[float]) -> dict:
    """Mean, 95% Student-t interval (None for one value), n, and the two-sided p-value of
    a zero mean."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n, "p": None}
    from scipy.stats import t

    se = statistics.stdev(values) / math.sqrt(n)
    half = t_quantile(n - 1) * se
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * t.sf(abs(mean / se), n - 1))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n, "p": p}


def holm(pvalues: dict) -> dict:
    """Holm's step-down adjustment of ``{key: p}`` (family-wise error at any level)."""
    order = sorted(pvalues, key=lambda k: pvalues[k])
    adjusted, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * pvalues[key]))
        adjusted[key] = running
    return adjusted


def seed_means(rows: list[dict]) -> dict:
    """``{(task, compute, budget, arm): {seed: (test mean, valid mean)}}`` over each
    checkpoint's fine-tunes; no pretraining (compute 0) stands at every compute."""
    out: dict = collections.defaultdict(dict)
    for row in rows:
        if row.get("kind") != "cell":
            continue
        for n, runs in row["finetune"].items():
            test = statistics.fmean(r["accuracy"] for r in runs)
            valid = statistics.fmean(r["valid_accuracy"] for r in runs)
            out[(row["task"], row["compute"], int(n), row["objective"])][row["seed"]] = (
                test,
                valid,
            )
    return out


def components(rows: list[dict]) -> dict:
    """Standard deviations of test accuracy per (task, compute, budget, arm) at each
    level of the nesting: between pretraining seeds (of their means), between label draws
    within a seed (of their means), between fine-tuning seeds within a draw."""
    runs: dict = collections.defaultdict(lambda: collections.defaultdict(dict))
    for row in rows:
        if row.get("kind") != "cell":
            continue
        for n, results in row["finetune"].items():
            key = (row["task"], row["compute"], int(n), row["objective"])
            for r in results:
                draws = runs[key][row["seed"]]
                draws.setdefault(r["draw"], []).append(r["accuracy"])
    out = {}
    for key, seeds in runs.items():
        seed_level = [
            statistics.fmean(a for d in draws.values() for a in d) for draws in seeds.values()
        ]
        draw_sd = [
            statistics.stdev([statistics.fmean(d) for d in draws.values()])
            for draws in seeds.values()
            if len(draws) > 1
        ]
        finetune_sd = [
            statistics.stdev(d) for draws in seeds.values() for d in draws.values() if len(d) > 1
        ]
        out[key] = {
            "seeds": statistics.stdev(seed_level) if len(seed_level) > 1 else None,
            "draws": _pooled(draw_sd),
            "finetune_seeds": _pooled(finetune_sd),
        }
    return out


def _pooled(sds: list[float]) -> float | None:
    return math.sqrt(statistics.fmean(s * s for s in sds)) if sds else None


def summarize(rows: list[dict]) -> dict:
    """Everything the tables and figures show: per-arm accuracies, the questions'
    differences with intervals and Holm-corrected p-values, anchors, probes, variance
    components, run health and cost."""
    means = seed_means(rows)
    computes = sorted({c for (_, c, _, _) in means if c > 0})
    anchored = anchors(rows)
    tasks = sorted({t for (t, _, _, _) in means} | {k.split("|")[0] for k in anchored})
    budgets = sorted({n for (_, _, n, _) in means} | {int(k.split("|")[2]) for k in anchored})
    arms: dict = {}
    for (task, compute, n, arm), seeds in means.items():
        arms[f"{task}|{compute}|{n}|{arm}"] = {
            **interval([v[0] for v in seeds.values()]),
            "valid": statistics.fmean(v[1] for v in seeds.values()),
        }
    differences: dict = {}
    for task in tasks:
        for compute in computes:
            for n in budgets:
                none = means.get((task, 0, n, "none"), {})
                electra = means.get((task, compute, n, "electra"), {})
                mlm = means.get((task, compute, n, "mlm"), {})
                electric = means.get((task, compute, n, "electric"), {})
                key = f"{task}|{compute}|{n}"
                for question, arm, of, other in (
                    ("electra_minus_mlm", electra, "electra", mlm),
                    ("electric_minus_electra", electric, "electric", electra),
                    ("electric_minus_mlm", electric, "electric", mlm),
                ):
                    paired = sorted(set(arm) & set(other))
                    if paired:
                        differences.setdefault(question, {})[key] = {
                            **interval([arm[s][0] - other[s][0] for s in paired]),
                            "of": of,
                        }
                valid = {
                    arm: statistics.fmean(v[1] for v in seeds.values())
                    for arm, seeds in (("electra", electra), ("mlm", mlm))
                    if seeds
                }
                if valid and none:
                    best = max(valid, key=lambda a: (valid[a], a == "electra"))
                    chosen = electra if best == "electra" else mlm
                    paired = sorted(set(chosen) & set(none))
                    if paired:
                        differences.setdefault("best_minus_none", {})[key] = {
                            **interval([chosen[s][0] - none[s][0] for s in paired]),
                            "of": best,
                        }
    families: dict = collections.defaultdict(dict)
    for question, entries in differences.items():
        for key, entry in entries.items():
            families[FAMILIES.get(question, question)][(question, key)] = entry
    for members in families.values():
        tested = {k: e["p"] for k, e in members.items() if e["p"] is not None}
        adjusted = holm(tested)
        for key, entry in members.items():
            entry["p_holm"] = adjusted.get(key)
            entry["holds"] = entry["p_holm"] is not None and entry["p_holm"] < ALPHA
            entry["family"] = len(tested)
    return {
        "tasks": tasks,
        "computes": computes,
        "budgets": budgets,
        "arms": arms,
        "differences": differences,
        "anchors": anchored,
        "probes": probe_means(rows),
        "components": {"|".join(map(str, k)): v for k, v in components(rows).items()},
        "health": (healths := health(rows))[0],
        "health_seeds": healths[1],
        "cost": cost(rows),
        "data": next((r["tasks"] for r in rows if r.get("kind") == "data"), {}),
        "cells": sum(r.get("kind") == "cell" for r in rows),
        "unit_tflops": unit_tflops(rows),
    }


def unit_tflops(rows: list[dict]) -> float | None:
    """The pretraining TFLOPs of 1× compute: the median of the ELECTRA cells' FLOPs per
    compute multiple (the first ELECTRA cell's step was counted at 7.59 GFLOPs, the
    later ones' at 7.67)."""
    per_unit = [
        r["pretrain"]["flops"] / r["compute"] / 1e12
        for r in rows
        if r.get("kind") == "cell"
        and r.get("objective") == "electra"
        and (r.get("pretrain") or {}).get("flops")
    ]
    return statistics.median(per_unit) if per_unit else None


def anchors(rows: list[dict]) -> dict:
    """Per task, anchor and budget: mean, interval and spread over every label draw."""
    values: dict = collections.defaultdict(dict)
    for row in rows:
        if row.get("kind") != "anchor":
            continue
        for kind in ("ppmi", "tfidf"):
            for n, results in row[kind].items():
                for r in results:
                    values[(row["task"], kind, int(n))][r["draw"]] = r["accuracy"]
    out = {}
    for (task, kind, n), by_draw in values.items():
        accs = list(by_draw.values())
        sd = statistics.stdev(accs) if len(accs) > 1 else None
        out[f"{task}|{kind}|{n}"] = {**interval(accs), "sd": sd}
    return out


def probe_means(rows: list[dict]) -> dict:
    """Frozen-probe accuracy per task, compute, budget, arm and probe: mean over seeds of
    each checkpoint's mean over draws."""
    values: dict = collections.defaultdict(list)
    for row in rows:
        if row.get("kind") != "cell":
            continue
        for kind, budgets in row["probes"].items():
            for n, results in budgets.items():
                key = f"{row['task']}|{row['compute']}|{n}|{row['objective']}|{kind}"
                values[key].append(statistics.fmean(r["accuracy"] for r in results))
    return {k: interval(v) for k, v in values.items()}


def health(rows: list[dict]) -> tuple[dict, dict]:
    """The pretrained discriminators' run health at the end of pretraining, mean over seeds,
    and how many seeds recorded each metric (``probe_auc`` only from 2026-11-30 on)."""
    values: dict = collections.defaultdict(list)
    for row in rows:
        if row.get("kind") == "cell" and row["objective"] != "none":
            for metric, value in row["pretrain"].get("metrics", {}).items():
                values[f"{row['task']}|{row['compute']}|{row['objective']}|{metric}"].append(value)
    means = {k: statistics.fmean(v) for k, v in values.items()}
    return means, {k: len(v) for k, v in values.items()}


def cost(rows: list[dict]) -> dict:
    """Measured CPU time (all cores' seconds) per kind of CPU: per pretraining step of each
    objective, per fine-tuning run (all runs of the study's lines, selection included).
    Runs recorded without their CPU time (wall clock only, which grows when other work
    starves the study) are left out."""
    steps: dict = collections.defaultdict(lambda: [0.0, 0])
    runs: dict = collections.defaultdict(list)
    for row in rows:
        if row.get("kind") != "cell":
            continue
        cpu = row.get("cpu", "unknown")
        record = row["pretrain"]
        if record.get("steps") and not record.get("resumed") and "cpu_seconds" in record:
            total = steps[(cpu, row["objective"])]
            total[0] += record["cpu_seconds"]
            total[1] += record["steps"]
        for results in row["finetune"].values():
            runs[cpu] += [r["cpu_seconds"] for r in results if "cpu_seconds" in r]
    out: dict = {}
    for (cpu, objective), (seconds, count) in steps.items():
        out.setdefault(cpu, {})[f"{objective}_step_seconds"] = seconds / count
    for cpu, seconds in runs.items():
        if seconds:
            out.setdefault(cpu, {})["finetune_run_seconds"] = statistics.fmean(seconds)
    # The whole study's cost at these rates, from its plan (``electra_vs_mlm.py --plan``).
    plan = next((r for r in reversed(rows) if r.get("kind") == "plan"), None)
    if plan is None:
        return out
    finished = {
        (r["task"], r["compute"], r["objective"], r["seed"])
        for r in rows
        if r.get("kind") == "cell"
    }
    # Every objective the plan pretrains needs its rate measured first.
    pretrained = sorted({c["objective"] for c in plan["cells"] if c["pretrain_steps"]})
    needed = [f"{o}_step_seconds" for o in pretrained] + ["finetune_run_seconds"]
    for rates in out.values():
        if not all(k in rates for k in needed):
            continue
        hours = {"all": 0.0, "left": 0.0}
        for c in plan["cells"]:
            step = rates.get(f"{c['objective']}_step_seconds", 0.0)
            seconds = (
                c["pretrain_steps"] * step + c["finetune_runs"] * rates["finetune_run_seconds"]
            )
            hours["all"] += seconds / 3600
            key = (c["task"], c["compute"], c["objective"], c["seed"])
            hours["left"] += 0.0 if key in finished else seconds / 3600
        rates["study_hours"], rates["hours_left"] = hours["all"], hours["left"]
    return out


# === Text ===


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def _ci(entry: dict | None, signed: bool = False) -> str:
    """``0.612 [0.580, 0.644]`` (``+0.012 [...]`` when signed; ``(1 seed)`` without one)."""
    if not entry:
        return ""
    fmt = "{:+.3f}" if signed else "{:.3f}"
    if entry["low"] is None:
        return fmt.format(entry["mean"]) + f" ({entry['n']} seed)"
    return f"{fmt.format(entry['mean'])} [{fmt.format(entry['low'])}, {fmt.format(entry['high'])}]"


def _missing(arm: str, compute: int) -> str:
    """What a table shows for an arm with no cell in yet: "not yet" where the study runs
    it (every arm at every compute, Electric at its computes; compute 0 is the row shown
    before any pretrained cell), nothing where it does not."""
    planned = arm != "electric" or compute in (0, *ELECTRIC_COMPUTES)
    return NOT_YET if planned else ""


def _arm_key(task: str, compute: int, n: int, arm: str) -> str:
    """An arm's key in the summary (no pretraining stands at compute 0)."""
    return f"{task}|{0 if arm == 'none' else compute}|{n}|{arm}"


def accuracy_table(summary: dict) -> str:
    """Fine-tuned test accuracy per task, compute and label budget: each arm's mean over
    pretraining seeds with its 95% interval; the anchors' mean over draws."""
    header = ["task", "compute", "labels", "none", "ELECTRA", "MLM", "Electric"]
    header += ["PPMI probe", "TF-IDF"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    arms, anchor = summary["arms"], summary["anchors"]
    for task in summary["tasks"]:
        for compute in summary["computes"] or [0]:  # no pretraining alone, before any arm
            for n in summary["budgets"]:
                cells = [
                    _ci(arms.get(_arm_key(task, compute, n, a))) or _missing(a, compute)
                    for a in ARMS
                ]
                anchors_ = [_ci(anchor.get(f"{task}|{k}|{n}")) for k in ("ppmi", "tfidf")]
                lines.append(
                    f"| {task} | {compute}× | {n} | " + " | ".join(cells + anchors_) + " |"
                )
    return "\n".join(lines)


def questions_table(summary: dict) -> str:
    """The two questions per task, budget and compute: the difference, its 95% interval,
    the Holm-corrected p-value, and whether it holds."""
    header = [
        "question",
        "task",
        "labels",
        "compute",
        "difference [95% CI]",
        "seeds",
        "p (Holm)",
        "holds",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for question, title in QUESTIONS.items():
        entries = summary["differences"].get(question, {})
        for task in summary["tasks"]:
            for n in summary["budgets"]:
                for compute in summary["computes"]:
                    entry = entries.get(f"{task}|{compute}|{n}")
                    if not entry:
                        continue
                    name = title
                    if question == "best_minus_none":
                        name = f"{title} ({entry['of']})"
                    p = "" if entry["p_holm"] is None else f"{entry['p_holm']:.3f}"
                    lines.append(
                        f"| {name} | {task} | {n} | {compute}× | {_ci(entry, True)} | "
                        f"{entry['n']} | {p} | {'yes' if entry['holds'] else 'no'} |"
                    )
    return "\n".join(lines)


def components_table(summary: dict) -> str:
    """Where the spread comes from: standard deviations at each level of the nesting."""
    header = [
        "task",
        "compute",
        "labels",
        "arm",
        "between seeds",
        "between draws",
        "between fine-tuning seeds",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for key, sd in sorted(summary["components"].items(), key=_component_order):
        task, compute, n, arm = key.split("|")
        values = [_pct(sd[k]) for k in ("seeds", "draws", "finetune_seeds")]
        lines.append(f"| {task} | {compute}× | {n} | {arm} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def _component_order(item):
    task, compute, n, arm = item[0].split("|")
    return task, int(compute), int(n), ARMS.index(arm)


def probes_table(summary: dict) -> str:
    """Frozen probes (mean over seeds) beside the PPMI anchor (mean over draws)."""
    header = (
        ["task", "compute", "labels"]
        + [f"pooled {a}" for a in ARMS]
        + ["bag ELECTRA", "bag MLM", "bag Electric", "PPMI"]
    )
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    probes = summary["probes"]

    def mean(task, compute, n, arm, kind):
        entry = probes.get(f"{_arm_key(task, compute, n, arm)}|{kind}")
        return _pct(entry["mean"]) if entry else _missing(arm, compute)

    for task in summary["tasks"]:
        for compute in summary["computes"] or [0]:  # no pretraining alone, before any arm
            for n in summary["budgets"]:
                row = [mean(task, compute, n, a, "pooled") for a in ARMS]
                row += [mean(task, compute, n, a, "bag") for a in ("electra", "mlm", "electric")]
                row.append(_pct(summary["anchors"].get(f"{task}|ppmi|{n}", {}).get("mean")))
                lines.append(f"| {task} | {compute}× | {n} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def health_table(summary: dict) -> str:
    header = ["task", "compute", "arm", *HEALTH]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    keys = sorted(
        {tuple(k.split("|")[:3]) for k in summary["health"]},
        key=lambda k: (k[0], int(k[1]), ARMS.index(k[2])),
    )
    seeds = summary.get("health_seeds", {})
    for task, compute, arm in keys:
        counts = {m: seeds.get(f"{task}|{compute}|{arm}|{m}", 0) for m in HEALTH}
        values = []
        for m in HEALTH:
            value = _pct(summary["health"].get(f"{task}|{compute}|{arm}|{m}"))
            # A metric that only the later seeds recorded says over how many it is a mean.
            if value and counts[m] < max(counts.values()):
                value += f" ({counts[m]} seed{'s' * (counts[m] > 1)})"
            values.append(value)
        lines.append(f"| {task} | {compute}× | {arm} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def cost_table(summary: dict) -> str:
    """CPU seconds (all cores) per pretraining step and per fine-tuning run on each kind of
    CPU, and what the whole study and its cells left cost there, in CPU hours ("not yet"
    until a rate is measured)."""
    header = ["CPU", "ELECTRA CPU s/step", "MLM CPU s/step", "Electric CPU s/step"]
    header += ["CPU s per fine-tuning run", "whole study, CPU hours", "cells left, CPU hours"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    formats = {
        "electra_step_seconds": "{:.3f}",
        "mlm_step_seconds": "{:.3f}",
        "electric_step_seconds": "{:.3f}",
        "finetune_run_seconds": "{:.1f}",
        "study_hours": "{:.0f}",
        "hours_left": "{:.0f}",
    }
    for cpu, c in sorted(summary["cost"].items()):
        values = ["not yet" if c.get(k) is None else f.format(c[k]) for k, f in formats.items()]
        lines.append(f"| {cpu} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def data_table(summary: dict) -> str:
    """What the data fixes changed: near-duplicates dropped, the previous build's leaks
    and its unbalanced budgets."""
    header = [
        "task",
        "near-duplicates dropped",
        "pool / valid / test",
        "previous build: test texts near-duplicating its pool",
        "previous 32-label budget",
        "previous 128-label budget",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for task, info in sorted(summary["data"].items()):
        before = info.get("previous_split", {})
        budgets = before.get("budget_labels", {})
        counts = [
            ", ".join(f"{label} {k}" for label, k in budgets.get(n, {}).items())
            for n in ("32", "128")
        ]
        near = before.get("test_near_duplicating_pool")
        leaked = "" if near is None else f"{near} of {before.get('test')}"
        lines.append(
            f"| {task} | {info.get('near_duplicates_dropped', '')} | "
            f"{info.get('train', '')} / {info.get('valid', '')} / {info.get('test', '')} | "
            f"{leaked} | {counts[0]} | {counts[1]} |"
        )
    return "\n".join(lines)


def answers(summary: dict, questions=tuple(QUESTIONS)) -> list[str]:
    """One sentence per question: what the data support (Holm's family named where it is
    more than the question's own comparisons)."""
    out = []
    for question in questions:
        title = QUESTIONS[question]
        entries = summary["differences"].get(question, {})
        tested = [e for e in entries.values() if e["p"] is not None]
        if not tested:
            out.append(f"**{title}**: no comparison has two pretraining seeds yet.")
            continue
        holding = sorted((k, e) for k, e in entries.items() if e["holds"])
        family = tested[0]["family"]
        comparisons = f"{family} comparison{'s' * (family != 1)}"
        scope = "" if family == len(tested) else f" over {comparisons}"
        if not holding:
            out.append(
                f"**{title}**: no difference holds after correcting for {comparisons}"
                + (
                    "; every 95% interval with two or more seeds contains zero"
                    if all(e["low"] <= 0 <= e["high"] for e in tested)
                    else ""
                )
            )
            out[-1] += "."
            continue
        listed = "; ".join(
            f"{k.split('|')[0]} at {k.split('|')[2]} labels, {k.split('|')[1]}×: {_ci(e, True)}"
            + (f" ({e['of']})" if question == "best_minus_none" else "")
            for k, e in holding
        )
        noun = "difference" if len(tested) == 1 else "differences"
        verb = "holds" if len(holding) == 1 else "hold"
        out.append(
            f"**{title}**: {len(holding)} of {len(tested)} {noun} {verb} after Holm's "
            f"correction{scope}: {listed}."
        )
    return out


def blocks(summary: dict) -> dict[str, str]:
    """The docs' generated blocks, by name."""
    done = summary["cells"]
    are = "are" if done != 1 else "is"
    progress = f"{done} cell{'s' * (done != 1)} of the study's {STUDY_CELLS} {are} in"
    return {
        "readme": textwrap.fill(" ".join(answers(summary, MAIN_QUESTIONS)) + f" ({progress}.)", 88),
        "answers": "\n\n".join(answers(summary)) + f"\n\n{progress}.",
        "questions": questions_table(summary),
        "accuracy": accuracy_table(summary),
        "components": components_table(summary),
        "probes": probes_table(summary),
        "health": health_table(summary),
        "cost": cost_table(summary),
        "data": data_table(summary),
    }


# === Figures ===


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display here or in CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(summary: dict, path: Path) -> bool:
    """Both main questions along the compute axis (Electric, at one compute, is in the
    tables): one row per question, one column per task;
    each label budget a line of differences with 95% intervals (filled markers where the
    difference holds after Holm's correction), zero dotted."""
    plt = _pyplot()
    tasks, computes, budgets = summary["tasks"], summary["computes"], summary["budgets"]
    if not any(summary["differences"].get(q) for q in MAIN_QUESTIONS):
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.axis("off")
        text = f"No paired cells yet ({summary['cells']} of {STUDY_CELLS} in)."
        ax.text(0.5, 0.5, text, ha="center")
        _save(plt, fig, path)
        return False
    fig, axes = plt.subplots(2, len(tasks), figsize=(5.5 * len(tasks), 7), squeeze=False)
    colors = plt.get_cmap("viridis")([0.1, 0.5, 0.85, 0.3, 0.7][: len(budgets)])
    for row, question in enumerate(MAIN_QUESTIONS):
        title = QUESTIONS[question]
        entries = summary["differences"].get(question, {})
        for column, task in enumerate(tasks):
            ax = axes[row][column]
            for i, n in enumerate(budgets):
                points = [
                    (c, entries[f"{task}|{c}|{n}"])
                    for c in computes
                    if f"{task}|{c}|{n}" in entries
                ]
                if not points:
                    continue
                x = [c * (1 + 0.06 * (i - 1)) for c, _ in points]
                y = [e["mean"] for _, e in points]
                err = [
                    [0 if e["low"] is None else e["mean"] - e["low"] for _, e in points],
                    [0 if e["high"] is None else e["high"] - e["mean"] for _, e in points],
                ]
                ax.errorbar(x, y, yerr=err, color=colors[i], capsize=3, lw=1, label=f"{n} labels")
                for xi, (_, e) in zip(x, points, strict=True):
                    ax.plot(
                        xi,
                        e["mean"],
                        "o",
                        color=colors[i],
                        mfc=colors[i] if e["holds"] else "white",
                    )
            ax.axhline(0, color="gray", ls=":", lw=1)
            ax.set_xscale("log")
            ax.set_xticks(computes, [f"{c}×" for c in computes])
            # Room for the budgets' offsets (±6%) and their error bars' caps at both ends.
            ax.set_xlim(computes[0] / 1.15, computes[-1] * 1.15)
            ax.minorticks_off()
            ax.set_title(f"{task}: {title}", fontsize=10)
            unit = summary.get("unit_tflops")
            of = f" of {unit:.1f} TFLOPs" if unit else ""
            ax.set_xlabel(f"pretraining compute (multiples{of})")
            ax.set_ylabel("test accuracy difference")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[1]:
                ax.legend(fontsize=7)
            else:  # neither arm of the difference has a cell of this task yet
                ax.text(0.5, 0.5, "no comparison yet", ha="center", transform=ax.transAxes)
    fig.suptitle(
        "95% intervals over pretraining seeds; filled: holds after Holm's correction", fontsize=9
    )
    _save(plt, fig, path)
    return True


def plot_health(rows: list[dict], path: Path) -> bool:
    """The ELECTRA discriminators' disc/context/rarity AUC against pretraining compute
    spent, per task, one line per compute multiple (mean over seeds); a note when no
    ELECTRA cell is in yet (False)."""
    curves: dict = collections.defaultdict(list)
    for row in rows:
        record = row.get("pretrain") or {}
        if row.get("kind") == "cell" and row["objective"] == "electra" and record.get("curve"):
            curves[(row["task"], row["compute"])].append(record)
    import numpy as np

    plt = _pyplot()
    if not curves:
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, "No ELECTRA cell yet.", ha="center")
        _save(plt, fig, path)
        return False
    metrics = ("disc_auc", "context_auc", "rarity_auc")
    tasks = sorted({t for t, _ in curves})
    computes = sorted({c for _, c in curves})
    shades = plt.get_cmap("Blues")(np.linspace(0.45, 1.0, len(computes)))
    fig, axes = plt.subplots(
        len(metrics), len(tasks), figsize=(5 * len(tasks), 3 * len(metrics)), squeeze=False
    )
    for column, task in enumerate(tasks):
        for shade, compute in zip(shades, computes, strict=True):
            records = curves.get((task, compute))
            if not records:
                continue
            for r, metric in enumerate(metrics):
                by_step: dict = collections.defaultdict(list)
                for record in records:
                    for point in record["curve"]:
                        if metric in point:
                            by_step[point["step"]].append(point[metric])
                steps = sorted(by_step)
                tflops = [s * records[0]["step_flops"] / 1e12 for s in steps]
                axes[r][column].plot(
                    tflops,
                    [statistics.fmean(by_step[s]) for s in steps],
                    color=shade,
                    label=f"{compute}× ({len(records)} seed{'s' * (len(records) > 1)})",
                )
        for r, metric in enumerate(metrics):
            ax = axes[r][column]
            ax.axhline(0.5, color="gray", ls=":", lw=1)
            ax.set_title(f"{task}: ELECTRA {metric}", fontsize=9)
            ax.set_xlabel("pretraining TFLOPs")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    _save(plt, fig, path)
    return True


def _save(plt, fig, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# === Main ===


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--markdown", action="store_true", help="print every table as Markdown")
    parser.add_argument("--figures", action="store_true", help="redraw the two figures")
    parser.add_argument("--write-docs", action="store_true", help="regenerate the docs' blocks")
    parser.add_argument("--figure", type=Path, default=FIGURE)
    parser.add_argument("--health-figure", type=Path, default=HEALTH_FIGURE)
    args = parser.parse_args(argv)
    rows = read_study(args.results)
    summary = summarize(rows)
    made = blocks(summary)
    if args.figures:
        plot(summary, args.figure)
        plot_health(rows, args.health_figure)
    if args.write_docs:
        spec = importlib.util.spec_from_file_location(
            "doc_numbers", REPO / "benchmarks" / "doc_numbers.py"
        )
        numbers = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(numbers)
        numbers.main(["--write"])
    if args.markdown:
        print(
            "\n\n".join(
                made[k]
                for k in (
                    "answers",
                    "questions",
                    "accuracy",
                    "components",
                    "probes",
                    "health",
                    "cost",
                    "data",
                )
            )
        )
    else:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
