"""The tiny preset learns on the sample corpus in a couple of minutes of CPU time.

What this shows, measured (docs/research/tiny-recipe.md): the generator's masked-LM
accuracy ends well above the most-frequent-token baseline; the discriminator still detects the
generator's replacements at the last window (AUC >= 0.80, recall > 0, final-layer
cosine <= 0.5, with the tiny preset's temperature-2 sampling and GDES sharing),
separates out-of-context tokens in held-out text, and the exported model flags an
implanted word. What it has learned at this compute is mostly rarity: the health probe's
``context_auc`` (unigram replacements) stays near 0.5 (docs/run-health.md).

`make test` runs 100 steps of the demo's recipe (``make demo``: 600 steps, 100 of warm-up)
in float32, with 10 steps of warm-up (the schedule multiplies the linear decay by the
warm-up, as google-research/electra's does: a run as long as its warm-up would peak at a
quarter of the learning rate). The same checks on the same 100-step runs in mixed_bfloat16
and mixed_float16 are marked ``slow`` (``make test-all`` runs them): both precisions are
emulated on CPUs without bfloat16 or float16 instructions (AMD EPYC, Cascade Lake Xeons),
where each run costs two to three minutes; tests/test_precision.py checks a short run in
each in `make test`. The detector has learned by step 100 (measured on an AMD EPYC in
float32: disc_auc 0.891, recall 0.27, health probe AUC 0.886, held-out out-of-context AUC
0.926; at step 50 already 0.824, 0.21 and 0.889; mixed_bfloat16 and mixed_float16 at step
100: disc_auc 0.891 both, recall 0.26 and 0.27, probe AUC 0.883 and 0.887, held-out 0.926
both). Two checks are weaker on the short runs, with their bars from the same
measurement: the generator's held-out accuracy is at 0.9x the most-frequent-token
baseline rather than 1.5x (it has learned the commas: on the held-out plays 0.97x in
float32 at step 100, with evaluation's masks drawn from each text; 1.73x at step 600 with
the earlier schedule, whose warm-up replaced the decay), and the export flags the
implanted word in 10 of 20 sentences rather than 14 (15 at step 100; a word chosen at
random would be the top one in about 2). The final-layer cosine's bar applies to the
whole run only (see the test).
To run the demo's whole 600 steps in the three precisions with every check at its full bar,
by hand::

    KERAS_ELECTRA_LEARNING_STEPS=600 python -m pytest tests/test_learning.py
"""

import os
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf
from conftest import SAMPLE_CORPUS, SAMPLE_VALID  # noqa: I001
from tfserving_standin import SignatureRunner

from keras_electra.data import pretraining_dataset
from keras_electra.encoding import encode_texts
from keras_electra.export import export
from keras_electra.pretraining.run import load_run, pretrain
from keras_electra.serving.export_reader import read_token_scores

STEPS = 600  # the demo's run (make demo)
# The suite's runs: their first 100 steps, which keep it within its budget.
SHORT = int(os.environ.get("KERAS_ELECTRA_LEARNING_STEPS", "100"))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney), ties broken by order."""
    order = np.argsort(scores, kind="stable")
    ranked = labels[order]
    positives = ranked.sum()
    negatives = len(ranked) - positives
    ranks = np.arange(1, len(ranked) + 1)
    return float(
        (ranks[ranked == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)
    )


def train(precision: str, steps: int, tmp_path_factory):
    """The tiny preset on the sample corpus, ``steps`` steps in ``precision`` (the demo's
    warm-up of 100 steps for a run as long as the demo's, else a tenth of the run)."""
    return pretrain(
        [str(SAMPLE_CORPUS)],
        tmp_path_factory.mktemp("learn") / precision,
        preset="tiny",
        steps=steps,
        warmup_steps=100 if steps >= STEPS else steps // 10,
        log_every=50,
        progress=False,
        precision=precision,
        validation=[str(SAMPLE_VALID)],
    )


# Mixed precision is emulated on most CPUs: minutes per run (the module docstring).
PRECISIONS = [
    "float32",
    pytest.param("mixed_bfloat16", marks=pytest.mark.slow),
    pytest.param("mixed_float16", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module", params=PRECISIONS)
def trained(request, tmp_path_factory):
    return train(request.param, SHORT, tmp_path_factory)


def whole(trained) -> bool:
    """Whether ``trained`` is the demo's whole run (the full bars apply) or a short one."""
    return trained.history[-1]["step"] >= STEPS


def held_out_batches(tokenizer, n=4):
    data = pretraining_dataset(
        [str(SAMPLE_VALID)], tokenizer, batch_size=32, max_seq_length=128, seed=1
    )
    return list(data.take(n))


def test_generator_beats_the_most_frequent_token_baseline(trained):
    # Twelve held-out batches (384 examples, about 7,000 masked tokens): over four, eight
    # draws of the masks spread the short run's accuracy from 0.89x to 1.12x the baseline
    # (sd 0.07), over twelve from 0.95x to 1.10x (sd 0.04; float32, AMD EPYC).
    held = held_out_batches(trained.tokenizer, n=12)
    counts, total = Counter(), 0
    for batch in held:
        ids, mask = batch["token_ids"].numpy(), batch["padding_mask"].numpy().astype(bool)
        real = ids[mask & (ids > 4)]
        counts.update(real.tolist())
        total += real.size
    baseline = counts.most_common(1)[0][1] / total  # about 0.076 (",")
    bar = (1.5 if whole(trained) else 0.9) * baseline  # the module docstring's measurements
    final = trained.history[-1]
    assert final["step"] == SHORT
    assert final["mlm_accuracy"] >= bar, (final["mlm_accuracy"], baseline)
    # Held out: evaluation on unseen plays, masking in the graph as in training.
    model = trained.model
    results = model.evaluate(
        tf.data.Dataset.from_tensor_slices(
            {
                k: tf.concat([b[k] for b in held], 0)
                for k in ("token_ids", "padding_mask", "segment_ids")
            }
        ).batch(32),
        return_dict=True,
        verbose=0,
    )
    assert results["mlm_accuracy"] >= bar, (results["mlm_accuracy"], baseline)
    assert np.isfinite(results["loss"])


def test_discriminator_detects_out_of_context_tokens_in_held_out_text(trained):
    rng = np.random.default_rng(0)
    labels, scores = [], []
    for batch in held_out_batches(trained.tokenizer):
        ids, mask = batch["token_ids"].numpy(), batch["padding_mask"].numpy()
        chosen = (rng.random(ids.shape) < 0.15) & (mask == 1) & (ids > 4)
        fake = ids.copy()
        fake[chosen] = rng.integers(5, trained.tokenizer.vocab_size, chosen.sum())
        inputs = {
            "token_ids": fake,
            "segment_ids": batch["segment_ids"].numpy(),
            "padding_mask": mask,
        }
        logits = trained.model(inputs, training=False).numpy()
        labels.append((fake != ids)[mask == 1])
        scores.append(logits[mask == 1])
    probe_auc = auc(np.concatenate(labels).astype(int), np.concatenate(scores))
    assert probe_auc >= 0.80, probe_auc


def test_the_detector_still_works_at_the_last_window(trained):
    # The tiny preset samples at temperature 2 with GDES sharing; at temperature 1
    # this run collapses by step ~250.
    last = trained.history[-1]
    assert last["disc_auc"] >= 0.80, last
    assert last["disc_recall"] > 0, last
    # The health probe's own measure of the same task, on its fixed held-out batch.
    assert last["probe_auc"] >= 0.80, last
    # The final-layer cosine rises to a hump of about 0.5 at steps 150-250 (float32:
    # 0.502, 0.534, 0.509; mixed_bfloat16: 0.499, 0.493, 0.501; mixed_float16 at step
    # 200: 0.498 and 0.507 for two commits), then falls (0.35-0.37 at step 600). So
    # its bar applies to the whole runs; the short mixed-precision runs end on the way up to
    # the hump, and the health monitor's collapse warning below covers them.
    if whole(trained):
        assert last["disc_cosine_2"] <= 0.5, last
    assert not [r for r in trained.history if "warnings" in r]


def test_the_health_probe_sees_the_rarity_cue_learned(trained):
    # Rarity is the cue a discriminator learns first: uniform replacements are
    # mostly rare pieces. The probe is held-back text (the validation plays).
    first, last = trained.history[0], trained.history[-1]
    assert last["rarity_auc"] > 0.7, (first["rarity_auc"], last["rarity_auc"])
    assert last["rarity_auc"] > first["rarity_auc"]


def test_training_metrics_are_recorded_and_finite(trained):
    for record in trained.history:
        assert all(np.isfinite(v) for k, v in record.items() if k != "warnings")
        assert 0.0 <= record["disc_auc"] <= 1.0
    # A fifth to a seventh of the real tokens are replaced, as 15% masking implies.
    assert 0.10 <= trained.history[-1]["replaced_fraction"] <= 0.16


# Twenty sentences in the corpus' register, each with one word implanted that does not
# belong there (written for this test; none of the words occurs in the plays). The bar
# is 14 of 20 for the whole run (10 for the suite's short one: see the module docstring):
# the 600-step run is not bitwise reproducible across processes (weights
# differ by ~1e-9 after 20 steps, and 600 steps amplify it), and four runs of the same
# code flagged 15, 17, 17 and 17 (float32 in the suite, float32 twice alone, bf16); the
# first ten sentences alone gave 7 to 9, so the earlier 8-of-10 bar failed at random.
IMPLANTED = [
    ("the king is dead long live the {}", "banana"),
    ("my lord the {} is at the gate", "computer"),
    ("good morrow to you my sweet {}", "telephone"),
    ("the queen hath sent a {} for the prince", "helicopter"),
    ("come let us go to the {} and drink", "internet"),
    ("what say you to this {} my good lord", "electricity"),
    ("he is a noble {} and a true friend", "kangaroo"),
    ("we shall meet again in the {} of the night", "spaceship"),
    ("thou art a {} and a villain", "smartphone"),
    ("i will {} thee to the court tomorrow", "email"),
    ("the duke hath bought a new {} for his horse", "tractor"),
    ("bring me my {} and my sword", "laptop"),
    ("she doth love the {} above all things", "pizza"),
    ("o heavens the {} hath fallen on the town", "satellite"),
    ("give me thy hand and thy {} good sir", "password"),
    ("the soldiers march upon the {} at dawn", "supermarket"),
    ("my father sent me a {} from rome", "selfie"),
    ("let the {} speak for the dead", "robot"),
    ("fair lady thy {} is most sweet", "microwave"),
    ("we must to the {} ere the sun be set", "airport"),
]


def test_the_exported_demo_model_flags_the_implanted_word(trained, tmp_path):
    corpus = SAMPLE_CORPUS.read_text(encoding="utf-8").lower().split()
    assert not {word for _, word in IMPLANTED} & set(corpus)
    exported = export(trained.run_dir, tmp_path / "demo")
    texts = np.array([t.format(w).encode() for t, w in IMPLANTED], object)
    with SignatureRunner(str(exported)) as runner:
        outputs = runner.run("serving_default", {"text": texts})
    rows = read_token_scores(outputs)
    # Whatever the run's precision, the run restores and exports in float32, and the
    # export's probabilities are the restored model's.
    model, tokenizer, step = load_run(trained.run_dir)
    assert step == trained.history[-1]["step"] and model.compute_dtype == "float32"
    for a, b in zip(trained.model.trainable_variables, model.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    probs = outputs["replaced_prob"]
    assert probs.dtype == np.float32
    inputs = encode_texts(tokenizer, tf.constant(texts), max_length=probs.shape[1])
    expected = tf.sigmoid(model(inputs, training=False)).numpy() * inputs["padding_mask"].numpy()
    np.testing.assert_allclose(probs, expected, atol=1e-5)
    hits = []
    for (template, _), row in zip(IMPLANTED, rows, strict=True):
        target = template.split().index("{}")
        # Word pieces after the first ("##...") continue the word before them.
        word_index = np.cumsum([not token.startswith("##") for token, _ in row]) - 1
        probs = np.array([p for _, p in row])
        implanted = probs[word_index == target].max()
        others = probs[word_index != target].max()
        hits.append(implanted > others)
    bar = 14 if whole(trained) else 10
    assert sum(hits) >= bar, list(zip([w for _, w in IMPLANTED], hits, strict=True))
