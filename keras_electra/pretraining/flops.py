"""Matmul FLOPs of a pretraining step, to compare objectives at equal compute.

One training step costs about three forward passes (the backward pass computes two
matmuls per forward matmul: one for the inputs' gradient, one for the weights'). Only
matrix multiplications are counted (2 FLOPs per multiply-add); embedding lookups,
LayerNorm, softmax, GELU and the optimizer are left out.

Per tower (generator or discriminator) over ``T = batch x length`` tokens:

- the projection from the embedding size ``E`` to the tower's hidden size ``H`` (when
  they differ): ``2·T·E·H``;
- per layer, the query, key, value and output projections ``2·T·4H²``, the feed-forward
  ``2·T·2·H·F``, and the attention scores and weighted values ``2·2·T·length·H``.

Heads:

- a masked-LM head (the generator's for ``electra``, the discriminator-sized tower's for
  ``mlm``) runs only at the ``batch x max_predictions(length)`` masked positions: dense
  ``H -> E`` then the tied output ``E -> vocab``;
- ELECTRA's replaced-token-detection head runs at every position: dense ``H -> H``, ``H -> 1``;
- the corrective LM head (``corrective_weight > 0``) is a masked-LM head on the
  discriminator.

So an ``electra`` step is generator + its LM head + discriminator + detection
head, and an ``mlm`` step is the discriminator-sized tower + its LM head. Each objective
adds up its own parts from these counts
(:meth:`~keras_electra.pretraining.objectives.Objective.forward_flops`, and
:meth:`~keras_electra.pretraining.objectives.Objective.step_flops` for a training step);
:func:`~keras_electra.pretraining.objectives.equal_compute_steps` compares two.
"""

from __future__ import annotations

from keras_electra.config import ElectraConfig, EncoderConfig

BACKWARD_FACTOR = 3.0
"""Training FLOPs per forward FLOP (forward + backward)."""


def tower_flops(encoder: EncoderConfig, embedding_size: int, batch: int, length: int) -> float:
    """Forward matmul FLOPs of one transformer tower over ``batch x length`` tokens.

    Examples:
        >>> from keras_electra.config import EncoderConfig
        >>> tower_flops(EncoderConfig(1, 1, 1, 1), 1, 1, 1)
        16.0
    """
    tokens = batch * length
    h, f = encoder.hidden_size, encoder.intermediate_size
    projection = 2.0 * tokens * embedding_size * h if embedding_size != h else 0.0
    dense = 2.0 * tokens * (4 * h * h + 2 * h * f)
    attention = 2.0 * 2.0 * tokens * length * h
    return projection + encoder.num_layers * (dense + attention)


def lm_head_flops(hidden: int, config: ElectraConfig, batch: int, length: int) -> float:
    """Forward FLOPs of a masked-LM head on a ``hidden``-wide tower, at the masked positions."""
    predictions = batch * config.max_predictions(length)
    e = config.embedding_size
    return 2.0 * predictions * (hidden * e + e * config.vocab_size)
