"""Matmul FLOPs of a pretraining step (keras_electra.pretraining.flops, added up by each
objective) against a hand count."""

import pytest

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.pretraining.objectives import equal_compute_steps, get

# vocab 100, hidden 8, 1 layer, FF 16, embedding 4; generator: hidden 4, 1 layer, FF 16.
TOY = ElectraConfig(
    vocab_size=100,
    hidden_size=8,
    num_layers=1,
    num_heads=2,
    intermediate_size=16,
    embedding_size=4,
    generator_hidden_size=0.5,
    max_position_embeddings=16,
)


def test_flops_match_a_hand_count():
    # batch 2 x length 10 = 20 tokens; max_predictions(10) = int(0.155 * 10) = 1 per sequence.
    assert TOY.max_predictions(10) == 1
    gen = (
        2 * 20 * 4 * 4 * 0  # embedding 4 -> generator hidden 4: no projection
        + 2 * 20 * (4 * 4 * 4 + 2 * 4 * 16)  # QKVO 4*H^2, feed-forward 2*H*F
        + 4 * 20 * 10 * 4  # scores and weighted values: 2 * 2 * T * length * H
    )
    disc = 2 * 20 * 4 * 8 + 2 * 20 * (4 * 8 * 8 + 2 * 8 * 16) + 4 * 20 * 10 * 8
    gen_head = 2 * 2 * (4 * 4 + 4 * 100)  # 2 predictions: dense H -> E, tied E -> vocab
    rtd_head = 2 * 20 * (8 * 8 + 8)  # every position: dense H -> H, then H -> 1
    mlm_head = 2 * 2 * (8 * 4 + 4 * 100)
    assert (gen, disc, gen_head, rtd_head, mlm_head) == (10880, 28160, 1664, 2880, 1728)
    electra, mlm = get("electra"), get("mlm")
    assert electra.forward_flops(TOY, 2, 10) == {
        "generator": gen,
        "generator_head": gen_head,
        "discriminator": disc,
        "discriminator_head": rtd_head,
    }
    assert electra.step_flops(TOY, 2, 10) == 3 * (gen + gen_head + disc + rtd_head)
    assert mlm.step_flops(TOY, 2, 10) == 3 * (disc + mlm_head)
    # MLM's step is cheaper (no generator), so it gets more steps for the same budget.
    ratio = (gen + gen_head + disc + rtd_head) / (disc + mlm_head)
    assert equal_compute_steps(TOY, 2, 10, 1000) == round(1000 * ratio) == 1458
    with pytest.raises(ConfigError, match="Unknown objective 'none'"):
        equal_compute_steps(TOY, 2, 10, 1000, "none")


def test_corrective_head_is_counted():
    parts = get("electra", corrective_weight=1.0).forward_flops(TOY, 2, 10)
    assert parts["corrective_head"] == 2 * 2 * (8 * 4 + 4 * 100)
