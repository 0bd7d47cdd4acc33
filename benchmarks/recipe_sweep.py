"""Which tiny-preset recipe keeps the discriminator learning? One run per recipe.

Each recipe is a ``pretrain`` of the tiny preset on the sample corpus with the
held-back plays as the health probe's text, run one at a time. After each run
one JSON line goes to the results file: the recipe, its settings and, at fixed
steps, ``disc_auc`` (on the generator's own samples), ``disc_recall``,
``context_auc`` (unigram corruption: context only), ``rarity_auc``, the final
layer's token cosine and the generator's MLM accuracy. Recipes already in the
results file are skipped, so the sweep resumes where it stopped.

Usage:
    python benchmarks/recipe_sweep.py --recipes paper t2 --steps 600 \
        --results benchmarks/results/recipe_sweep.jsonl
    python benchmarks/recipe_sweep.py --table benchmarks/results/recipe_sweep.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "sample" / "shakespeare.txt"
VALID = REPO / "data" / "sample" / "shakespeare_valid.txt"
AT_STEPS = (150, 300, 600, 1200, 2400, 4800)

# name -> (pretrain keyword arguments, overrides of the ElectraConfig and of the electra
# objective's hyperparameters)
RECIPES: dict[str, tuple[dict, dict]] = {
    "paper": ({"learning_rate": 5e-4}, {"temperature": 1.0}),
    "t2": ({"learning_rate": 5e-4}, {"temperature": 2.0}),
    "t1.5": ({"learning_rate": 5e-4}, {"temperature": 1.5}),
    "t1-lr2e-4": ({"learning_rate": 2e-4}, {"temperature": 1.0}),
    "t2-lr1e-3": ({"learning_rate": 1e-3}, {"temperature": 2.0}),
    # The discriminator also restores the masked tokens (corrective LM).
    "paper-clm1": ({"learning_rate": 5e-4}, {"temperature": 1.0, "corrective_weight": 1.0}),
    "t2-clm1": ({"learning_rate": 5e-4}, {"temperature": 2.0, "corrective_weight": 1.0}),
    "t2-clm5": ({"learning_rate": 5e-4}, {"temperature": 2.0, "corrective_weight": 5.0}),
    # Embedding sharing modes at temperature 2 ("t2" is "all").
    "gdes-t2": ({"learning_rate": 5e-4}, {"temperature": 2.0, "embedding_sharing": "gdes"}),
    "word-t2": ({"learning_rate": 5e-4}, {"temperature": 2.0, "embedding_sharing": "word"}),
    "none-t2": ({"learning_rate": 5e-4}, {"temperature": 2.0, "embedding_sharing": "none"}),
    "gdes-paper": ({"learning_rate": 5e-4}, {"temperature": 1.0, "embedding_sharing": "gdes"}),
    # Pre-LayerNorm towers (keras-hub's normalize_first) plus a final LayerNorm.
    "paper-prenorm": ({"learning_rate": 5e-4}, {"temperature": 1.0, "normalize_first": True}),
    "t2-prenorm": ({"learning_rate": 5e-4}, {"temperature": 2.0, "normalize_first": True}),
    # The tiny default learning language faster per CPU minute: a 4x learning rate; and
    # 64-token sequences with a 4,000-piece vocabulary at twice the learning rate (run it
    # with twice the steps for the same compute).
    "gdes-t2-lr2e-3": ({"learning_rate": 2e-3}, {"temperature": 2.0, "embedding_sharing": "gdes"}),
    "gdes-t2-short-v4k": (
        {"learning_rate": 1e-3, "max_seq_length": 64, "vocab_size": 4000},
        {"temperature": 2.0, "embedding_sharing": "gdes"},
    ),
    # A deeper, narrower discriminator at about the same compute.
    "t2-deep4": (
        {"learning_rate": 5e-4},
        {"temperature": 2.0, "num_layers": 4, "hidden_size": 96, "intermediate_size": 384},
    ),
}


def run_recipe(name: str, steps: int, out_root: Path) -> dict:
    from keras_electra.config import OBJECTIVE_FIELDS
    from keras_electra.pretraining.run import pretrain

    kwargs, overrides = RECIPES[name]
    own = {k: v for k, v in overrides.items() if k in OBJECTIVE_FIELDS}
    run_dir = out_root / name
    start = time.perf_counter()
    result = pretrain(
        [str(CORPUS)],
        run_dir,
        preset="tiny",
        steps=steps,
        log_every=50,
        validation=[str(VALID)],
        config_overrides={k: v for k, v in overrides.items() if k not in own},
        hyperparameters=own,
        progress=False,
        **kwargs,
    )
    seconds = time.perf_counter() - start
    history = {r["step"]: r for r in result.history}
    layers = max(int(k.rsplit("_", 1)[1]) for k in result.history[-1] if "disc_cosine_" in k)
    at = {}
    for step in sorted({s for s in AT_STEPS if s in history} | {max(history)}):
        r = history[step]
        at[str(step)] = {
            "disc_auc": r["disc_auc"],
            "disc_recall": r["disc_recall"],
            "context_auc": r["context_auc"],
            "rarity_auc": r["rarity_auc"],
            "cosine": r[f"disc_cosine_{layers}"],
            "mlm_accuracy": r["mlm_accuracy"],
        }
    last = result.history[-1]
    return {
        "recipe": name,
        "steps": steps,
        "settings": kwargs,
        "config": overrides,
        "seconds": round(seconds, 1),
        "at": at,
        "last": {k: v for k, v in last.items() if k != "warnings"},
        "warnings": [m for r in result.history for m in r.get("warnings", [])],
        "run_dir": str(run_dir),
    }


def table(results: Path) -> str:
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    head = (
        "| recipe | steps | step | disc_auc | recall | context_auc | rarity_auc | cosine "
        "| mlm_acc |"
    )
    lines = [head, "|" + " --- |" * 9]
    for row in rows:
        for step, m in row["at"].items():
            lines.append(
                f"| {row['recipe']} | {row['steps']} | {step} | {m['disc_auc']:.3f} | "
                f"{m['disc_recall']:.3f} | {m['context_auc']:.3f} | {m['rarity_auc']:.3f} | "
                f"{m['cosine']:.3f} | {m['mlm_accuracy']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", choices=sorted(RECIPES), default=["paper"])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks/results/sweep.jsonl")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "sweep")
    parser.add_argument("--table", type=Path, help="print the markdown table of a results file")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    args.results.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.results.exists():
        done = {
            (r["recipe"], r["steps"])
            for r in map(json.loads, args.results.read_text().splitlines())
        }
    for name in args.recipes:
        if (name, args.steps) in done:
            print(f"{name}: already in {args.results}", file=sys.stderr)
            continue
        row = run_recipe(name, args.steps, args.runs / str(args.steps))
        with args.results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
