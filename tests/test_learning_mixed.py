"""The tiny preset learns under mixed precision as it does in float32: the checks of
tests/test_learning.py, with the same thresholds, on the same 100-step runs in
mixed_bfloat16 and mixed_float16 (``KERAS_ELECTRA_LEARNING_STEPS=600`` runs them whole, by
hand, with the whole run's bars)."""

import pytest
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


@pytest.fixture(scope="module", params=["mixed_bfloat16", "mixed_float16"])
def trained(request, tmp_path_factory):
    return train(request.param, SHORT, tmp_path_factory)
