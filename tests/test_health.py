"""Run health: the probe's statistics, its yardsticks on a fresh model, collapse warnings."""

import itertools

import keras
import numpy as np
import pytest
from conftest import SAMPLE_VALID  # noqa: I001

from keras_electra.data import ElectraTokenizer, learn_vocab, pretraining_dataset
from keras_electra.pretraining import ElectraPretrainer
from keras_electra.pretraining.health import (
    HealthProbe,
    auc,
    collapse_warnings,
    effective_rank,
    identity_r2,
    mean_pairwise_cosine,
)


def test_mean_pairwise_cosine_equals_the_mean_over_all_pairs():
    v = np.random.default_rng(0).normal(size=(7, 5))
    pairs = [a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in itertools.combinations(v, 2)]
    assert mean_pairwise_cosine(v) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert mean_pairwise_cosine(np.ones((4, 3))) == pytest.approx(1.0)


def test_auc_counts_ties_as_half_and_matches_pair_counting():
    rng = np.random.default_rng(1)
    labels = rng.random(200) < 0.3
    scores = rng.integers(0, 5, 200).astype(float)  # many ties
    pos, neg = scores[labels], scores[~labels]
    expected = ((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean()
    assert auc(labels, scores) == pytest.approx(expected, abs=1e-12)
    assert auc(labels, np.where(labels, 1.0, 0.0)) == 1.0


def test_effective_rank_and_identity_r2_on_known_cases():
    rng = np.random.default_rng(2)
    # Points on a line have rank 1; isotropic points in 8 dimensions close to 8.
    assert effective_rank(np.outer(rng.normal(size=100), rng.normal(size=8))) == pytest.approx(
        1.0, abs=1e-6
    )
    assert effective_rank(rng.normal(size=(4000, 8))) > 7.5
    ids = np.repeat(np.arange(10), 20)
    assert identity_r2(ids, ids * 1.0) == pytest.approx(1.0)
    assert identity_r2(ids, rng.normal(size=200)) < 0.15


def collapsed_run():
    """Numbers of a collapsed run (the run-health issue's default tiny run)."""
    records = []
    for step in range(50, 650, 50):
        late = step >= 200
        records.append(
            {
                "step": step,
                "loss": 30.0 - step / 100,
                "disc_auc": 0.54 if late else 0.68,
                "disc_recall": 0.0,
                "probe_logit_std": 0.005,
                "disc_cosine_0": 0.2,
                "disc_cosine_2": 0.97,
            }
        )
    return records


def healthy_run():
    return [
        {
            "step": step,
            "disc_auc": 0.84,
            "disc_recall": 0.2,
            "probe_logit_std": 0.9,
            "disc_cosine_0": 0.2,
            "disc_cosine_2": 0.5,
        }
        for step in range(50, 650, 50)
    ]


def test_a_collapsed_run_raises_each_warning_once_and_a_healthy_one_none():
    warnings = collapse_warnings(collapsed_run())
    kinds = {w["kind"]: w for w in warnings}
    assert set(kinds) == {"dead_detector", "collapsed_representation"}
    # Recall 0 from the first window; the AUC rule needs three windows below 0.6.
    assert kinds["dead_detector"]["since"] == 200 and kinds["dead_detector"]["step"] == 300
    # Flat logits and one vector from the first window, for three windows.
    assert kinds["collapsed_representation"]["since"] == 50
    assert kinds["collapsed_representation"]["step"] == 150
    assert all("try" in w["message"] for w in warnings)
    assert kinds["dead_detector"]["message"].endswith(
        # A resumed run refuses another generator size: the remedy says it takes a new one.
        "try a lower --learning-rate, a higher --temperature or a smaller --generator-size "
        "(a new run)."
    )
    assert kinds["collapsed_representation"]["message"].endswith(
        "try a lower --learning-rate or a higher --temperature."
    )
    # An objective that samples at no temperature (Electric) is not told to raise it.
    for warning in collapse_warnings(collapsed_run(), temperature=False):
        assert (
            "--temperature" not in warning["message"]
            and "try a lower --learning-rate" in (warning["message"])
        )
    assert collapse_warnings(healthy_run()) == []


def test_a_resumed_run_warns_at_the_steps_the_report_does(tmp_path, capsys):
    """The logger of a resumed run started with no records: the dead-detector warning came
    three windows after the restart, not at step 300, and the collapsed-representation one,
    raised at step 150 before the restart, came again."""
    import json

    from keras_electra.training.callbacks import MetricsLogger

    records = collapsed_run()
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:5]), encoding="utf-8")
    logger = MetricsLogger(
        path, None, tokens_per_step=8, total_steps=600, initial_step=250, progress=False,
        warnings=collapse_warnings,
    )  # fmt: skip
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    logger.set_model(model)
    logger.on_train_begin()
    for epoch, record in enumerate(records[5:]):
        logger.on_epoch_begin(epoch)
        for batch in range(50):
            logger.on_train_batch_end(batch)
        logger.on_epoch_end(epoch, {k: v for k, v in record.items() if k != "step"})
    logger.close()
    written = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    warned = {r["step"]: len(r["warnings"]) for r in written if "warnings" in r}
    expected = {w["step"] for w in collapse_warnings(records) if w["step"] > 250}
    assert warned == {300: 1} and set(warned) == expected
    assert [r["step"] for r in logger.history] == list(range(50, 650, 50))
    assert capsys.readouterr().err.count("WARNING (step 300)") == 1


def test_a_state_a_run_passes_through_raises_no_warning():
    """An Electric run's energy head starts at zero: its first window has flat logits and
    one vector (final-layer cosine 0.97, spread 0.007 at step 50 of a tiny run), then
    spreads (0.066 at step 100, 2.5 at 150). One window, or two, is not a collapse."""
    electric = [
        {"step": 50, "probe_logit_std": 0.007, "disc_cosine_2": 0.97, "disc_auc": 0.5},
        {"step": 100, "probe_logit_std": 0.066, "disc_cosine_2": 0.998, "disc_auc": 0.42},
        {"step": 150, "probe_logit_std": 2.53, "disc_cosine_2": 0.89, "disc_auc": 0.53},
    ]
    assert collapse_warnings(electric, temperature=False) == []
    flat = {"probe_logit_std": 0.005, "disc_cosine_2": 0.97}
    twice = [{"step": 50, **flat}, {"step": 100, **flat}, {"step": 150, "disc_cosine_2": 0.3}]
    assert collapse_warnings(twice) == []


@pytest.fixture(scope="module")
def fresh_probe():
    vocab = learn_vocab([str(SAMPLE_VALID)], vocab_size=2000)
    tokenizer = ElectraTokenizer(vocab)
    # The model's seed is its masking and sampling streams'; its weights follow Keras' seed.
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer.from_preset("tiny", vocab_size=len(vocab), seed=0)
    data = pretraining_dataset(
        [str(SAMPLE_VALID)], tokenizer, batch_size=32, max_seq_length=128, seed=1
    )
    batch = {k: v.numpy() for k, v in next(iter(data)).items()}
    return HealthProbe(model, batch)


def test_a_fresh_model_is_healthy_and_knows_nothing(fresh_probe):
    health = fresh_probe.measure()
    assert health["disc_cosine_2"] < 0.5, health
    assert health["disc_effective_rank"] > 30, health
    # An untrained detector separates neither corruption.
    assert abs(health["context_auc"] - 0.5) < 0.05, health
    assert abs(health["rarity_auc"] - 0.5) < 0.05, health
    # Nor its generator's samples; this AUC varies more from one initialization to the
    # next (0.485-0.555 over five), as a token's score follows its random embedding.
    assert abs(health["probe_auc"] - 0.5) < 0.1, health
    # It starts at the base rate (the output bias is the prior logit).
    assert abs(health["probe_mean_prob"] - 0.15) < 0.03, health
    assert 0.10 < health["probe_replaced_fraction"] < 0.16, health


def test_the_probe_is_fixed_and_leaves_the_training_streams_alone(fresh_probe):
    step = int(fresh_probe.model.random_step.numpy())
    assert fresh_probe.measure() == fresh_probe.measure()
    assert int(fresh_probe.model.random_step.numpy()) == step


def test_a_detector_that_has_not_begun_is_not_called_dead_during_its_warm_up():
    # Every run starts at recall 0 and AUC 0.5: a tiny run was told at step 6, its learning
    # rate still climbing, that its discriminator "stopped detecting replacements".
    def window(step, rate, auc=0.47):
        return {"step": step, "disc_auc": auc, "disc_recall": 0.0, "learning_rate": rate}

    warming = [window(s, 1e-4 * s / 2) for s in (2, 4, 6, 8)]
    assert collapse_warnings(warming) == []
    after = warming + [window(s, 4e-4 - 1e-5 * s) for s in (10, 12, 14)]
    (warning,) = collapse_warnings(after)
    assert warning["step"] == 14 and warning["since"] == 10
    assert warning["message"].startswith(
        "The discriminator has not begun detecting replacements after its warm-up (from step "
        "10, recall 0, AUC 0.47 for 3 windows): it predicts the base rate everywhere; try "
    )
    # One that had begun (AUC 0.6 or more) and fell back stopped, warm-up or not.
    fell = [window(2, 1e-4, 0.7), *(window(s, 1e-4 * s) for s in (4, 6, 8))]
    (warning,) = collapse_warnings(fell)
    assert warning["message"].startswith(
        "The discriminator stopped detecting replacements at step 4"
    )
