"""An estimate of the memory one device holds at a training step's peak, from the config.

A dry run prints it so that a GPU or TPU job can be sized before it starts. It is
an estimate, counted from the sizes, not measured:

- **the state**: every trained weight in float32 (mixed precision keeps variables in
  float32 too), its gradient, and the optimizer's two slots (AdamW's and LAMB's first
  and second moments): :data:`STATE_BYTES` per parameter, on every replica;
- **the activations** the backward pass keeps, per transformer layer over ``T`` tokens
  of width ``H`` with ``a`` heads and sequences of length ``s``:
  ``T * (34 * H + 5 * a * s)`` bytes at 16 bits (Korthikanti et al., 2022, *Reducing
  Activation Recomputation in Large Transformer Models*, eq. 2: the layer inputs,
  projections, attention scores and probabilities, feed-forward and dropout masks),
  twice that in float32; ``T`` is a replica's micro-batch
  (``batch / replicas / grad_accumulation`` sequences);
- **the masked-LM logits** in float32 at the masked positions, with their gradient.

TensorFlow's own memory (its runtime, the input pipeline, about 0.5 GB on a CPU) is not
included. On a 2-core Xeon, ELECTRA-Small's step at batch 32 x 128 peaked at 2.1 GB of
resident memory in float32 and 1.4 GB in mixed_bfloat16 (docs/benchmarks.md), where this
estimate says 1.8 GB and 1.1 GB plus that runtime. Each objective adds up its own
parts from these counts (:meth:`~keras_electra.pretraining.objectives.Objective.step_memory`).
"""

from __future__ import annotations

from keras_electra.config import ElectraConfig, EncoderConfig

STATE_BYTES = 16
"""Bytes per trained parameter: a float32 weight, its gradient and two optimizer slots."""


def activation_bytes(precision: str) -> int:
    """Bytes per activation: 2 under a mixed (16-bit) precision, else 4.

    Examples:
        >>> activation_bytes("mixed_bfloat16"), activation_bytes("float32")
        (2, 4)
    """
    return 2 if precision.startswith("mixed") else 4


def tower_activations(encoder: EncoderConfig, sequences: int, length: int, precision: str) -> float:
    """Bytes of activations one transformer tower keeps for its backward pass."""
    h, heads, tokens = encoder.hidden_size, encoder.num_heads, sequences * length
    per_layer = tokens * (34 * h + 5 * heads * length) * activation_bytes(precision) / 2
    return encoder.num_layers * per_layer


def lm_logits(
    config: ElectraConfig, sequences: int, length: int, positions: int | None = None
) -> float:
    """Bytes of one masked-LM head's float32 logits at the masked positions (or at
    ``positions`` per sequence), and their gradient."""
    positions = config.max_predictions(length) if positions is None else positions
    return 2 * 4.0 * sequences * positions * config.vocab_size
