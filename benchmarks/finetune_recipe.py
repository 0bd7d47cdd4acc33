"""Which fine-tuning recipe lets a pretrained tiny tower beat random weights?

Fine-tunes the same sources (pretraining runs of ``benchmarks/electra_vs_mlm.py``, and
its random-weights source) on one task with each recipe, one after the other, and
appends one JSON line per (source, recipe) to ``benchmarks/results/finetune_recipe.jsonl``
(finished pairs are skipped on a rerun). Recipes:

- ``paper``: the library's defaults for the tiny preset, as the paper fine-tunes
  (3 epochs, learning rate 1e-3, layer-wise decay 0.8, the ``[CLS]`` vector);
- ``long-cls``: 10 epochs, no layer-wise decay, the ``[CLS]`` vector;
- ``long-mean``: 10 epochs, no layer-wise decay, the mean of the token vectors
  (the benchmark's recipe);
- ``long-mean-lr3e-4``: the same at a third of the learning rate (is the pretrained
  tower overwritten?);
- ``top-only``: the same with layer-wise decay 1e-3 (the lower layer and the
  embeddings barely move: how good are the pretrained features as they are?).

Usage:
    python benchmarks/finetune_recipe.py --task bbc_topic \\
        --source electra=benchmarks/cache/electra_vs_mlm/electra-seed0/run \\
        --source mlm=benchmarks/cache/electra_vs_mlm/mlm-seed0/run \\
        --source none=benchmarks/cache/electra_vs_mlm/none-seed0/random
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "finetune_recipe.jsonl"
RECIPES = {
    "paper": {},
    "long-cls": {"epochs": 10, "layer_decay": 1.0, "pooling": "cls"},
    "long-mean": {"epochs": 10, "layer_decay": 1.0, "pooling": "mean"},
    "long-mean-lr3e-4": {
        "epochs": 10,
        "layer_decay": 1.0,
        "pooling": "mean",
        "learning_rate": 3e-4,
    },
    "top-only": {"epochs": 10, "layer_decay": 1e-3, "pooling": "mean"},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="bbc_topic")
    parser.add_argument("--source", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=REPO / "benchmarks" / "cache")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from keras_electra.finetuning import finetune

    task_dir = args.cache / "tasks" / args.task
    done = set()
    if args.results.is_file():
        for line in args.results.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            done.add((row["source"], row["recipe"], row["task"], row["seed"]))
    for item in args.source:
        name, _, directory = item.partition("=")
        for recipe in args.recipes:
            if (name, recipe, args.task, args.seed) in done:
                continue
            started = time.perf_counter()
            out = Path(tempfile.mkdtemp())
            try:
                result = finetune(
                    directory,
                    "classify",
                    task_dir / "train.csv",
                    task_dir / "test.csv",
                    out / "model",
                    max_seq_length=args.max_seq_length,
                    seed=args.seed,
                    progress=False,
                    **RECIPES[recipe],
                )
            finally:
                shutil.rmtree(out, ignore_errors=True)
            row = {
                "source": name,
                "directory": directory,
                "recipe": recipe,
                "settings": result.settings.training | {"pooling": result.settings.pooling},
                "task": args.task,
                "seed": args.seed,
                "accuracy": result.metrics["accuracy"],
                "macro_f1": result.metrics.get("macro_f1"),
                "seconds": round(time.perf_counter() - started, 1),
            }
            args.results.parent.mkdir(parents=True, exist_ok=True)
            with args.results.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
