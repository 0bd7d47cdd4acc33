"""The tiny preset learns under mixed precision as it does in float32: the checks of
tests/test_learning.py, with the same thresholds, on the same 100-step runs in
mixed_bfloat16 and mixed_float16 (``KERAS_ELECTRA_LEARNING_STEPS=600`` runs them whole, by
hand, with the whole run's bars). The same runs show what a mixed-precision run keeps in
float32 (tests/test_precision.py has the rest)."""

import json

import keras
import numpy as np
import pytest
from conftest import SAMPLE_CORPUS
from test_learning import (  # noqa: F401  (collected here again, with this file's runs)
    SHORT,
    test_discriminator_detects_out_of_context_tokens_in_held_out_text,
    test_generator_beats_the_most_frequent_token_baseline,
    test_the_detector_still_works_at_the_last_window,
    test_the_exported_demo_model_flags_the_implanted_word,
    test_the_health_probe_sees_the_rarity_cue_learned,
    test_training_metrics_are_recorded_and_finite,
    train,
)

from keras_electra.errors import ConfigError
from keras_electra.pretraining.run import pretrain


@pytest.fixture(scope="module", params=["mixed_bfloat16", "mixed_float16"])
def trained(request, tmp_path_factory):
    return train(request.param, SHORT, tmp_path_factory)


def test_the_run_keeps_float32_weights_and_scales_float16_losses(trained):
    model = trained.model
    policy = model.dtype_policy.name
    assert json.loads((trained.run_dir / "run.json").read_text())["precision"] == policy
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    for v in model.trainable_variables:
        assert np.isfinite(v.numpy()).all(), v.path
    # float16 needs dynamic loss scaling (bfloat16 has float32's range): overflowing
    # steps are skipped, not applied, and the updates went through.
    scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (policy == "mixed_float16")
    if scaled:
        assert np.isfinite(float(model.optimizer.dynamic_scale.numpy()))
    assert int(model.optimizer.iterations.numpy()) >= SHORT // 2


def test_resuming_with_another_precision_is_refused(trained):
    policy = trained.model.dtype_policy.name
    with pytest.raises(ConfigError, match=f"precision='{policy}'"):
        pretrain(
            [str(SAMPLE_CORPUS)],
            trained.run_dir,
            preset="tiny",
            steps=SHORT + 1,
            progress=False,
            precision="float32",
        )
    assert json.loads((trained.run_dir / "run.json").read_text())["precision"] == policy
