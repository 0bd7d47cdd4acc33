"""The steps the pretraining objectives share, as pure functions: masking, sampling,
labels, losses (the objectives themselves are the plug-ins of
:mod:`keras_electra.pretraining.objectives`).

Each step of replaced-token detection (Clark et al., 2020, section 2) lives here once,
in the order the pretrainer calls them:

1. :func:`mask_tokens`: choose ~15% of the real tokens per sequence; 85% of those
   become ``[MASK]``, the rest keep their token (no random-token branch).
2. the generator predicts the original tokens at the chosen positions; :func:`mlm_loss`
   scores it.
3. :func:`sample_tokens`: draw replacements from the generator's softmax (inverse CDF:
   one uniform number per position), without gradient.
4. :func:`replace_tokens` builds the discriminator input and :func:`replaced_labels` its
   labels: 1 where the token differs from the original (a correct sample is original).
5. :func:`disc_loss`: sigmoid cross-entropy over all non-padding tokens.

All functions take and return TensorFlow tensors and work inside ``tf.function`` and XLA
(no data-dependent shapes). The random ones take a stateless seed or the uniform draws
themselves, so a caller can draw them for a whole global batch at once and give each
example its own rows (see ``ElectraPretrainer``).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_electra import kernels


class MaskedBatch(NamedTuple):
    """The output of :func:`mask_tokens`.

    Attributes:
        token_ids: ``[B, L]`` the generator's input, ``[MASK]`` at most chosen positions.
        positions: ``[B, P]`` int32 chosen positions; 0 where ``weights`` is 0.
        labels: ``[B, P]`` int32 original token ids at ``positions``; 0 where unused.
        weights: ``[B, P]`` float32, 1 for a chosen position, 0 for padding of ``P``.
    """

    token_ids: tf.Tensor
    positions: tf.Tensor
    labels: tf.Tensor
    weights: tf.Tensor


def mask_tokens(
    token_ids: tf.Tensor,
    padding_mask: tf.Tensor,
    *,
    special_ids: tuple[int, ...],
    mask_token_id: int,
    mask_prob: float = 0.15,
    mask_token_prob: float = 0.85,
    max_predictions: int,
    seeds: tuple[tf.Tensor, tf.Tensor] | None = None,
    uniforms: tuple[tf.Tensor, tf.Tensor] | None = None,
) -> MaskedBatch:
    """Choose positions to predict and mask them, per sequence.

    A sequence with ``n`` candidate tokens (real tokens that are not special)
    gets ``clip(round(mask_prob * n), 1, max_predictions)`` positions, drawn
    uniformly without replacement (capped at ``n``).

    Args:
        token_ids: ``[B, L]`` int32 token ids.
        padding_mask: ``[B, L]`` 1 for real tokens, 0 for padding.
        special_ids: ids never chosen (``[CLS]``, ``[SEP]``, ``[PAD]``, ...).
        mask_token_id: id of ``[MASK]``.
        mask_prob: fraction of candidates to choose.
        mask_token_prob: fraction of chosen positions set to ``[MASK]``.
        max_predictions: ``P``, the most positions per sequence.
        seeds: two stateless seeds (shape ``[2]`` each): choice and mask/keep.
        uniforms: instead of ``seeds``, the draws in [0, 1) themselves: ``[B, L]``
            for the choice and ``[B, max_predictions]`` for mask/keep.

    Returns:
        A :class:`MaskedBatch`.
    """
    token_ids = tf.convert_to_tensor(token_ids, tf.int32)
    if (seeds is None) == (uniforms is None):
        raise ValueError("Pass exactly one of seeds and uniforms.")
    if uniforms is None:
        batch = tf.shape(token_ids)[0]
        uniforms = (
            tf.random.stateless_uniform(tf.shape(token_ids), seed=seeds[0]),
            tf.random.stateless_uniform([batch, max_predictions], seed=seeds[1]),
        )
    candidates = candidate_mask(token_ids, padding_mask, special_ids) > 0
    num_candidates = tf.reduce_sum(tf.cast(candidates, tf.int32), axis=1)
    num_to_predict = tf.cast(tf.round(tf.cast(num_candidates, tf.float32) * mask_prob), tf.int32)
    num_to_predict = tf.clip_by_value(num_to_predict, 1, max_predictions)
    num_to_predict = tf.minimum(num_to_predict, num_candidates)

    # A uniform random order of the candidates: top-k of random scores, with
    # non-candidates scored below every candidate.
    scores = tf.where(candidates, tf.cast(uniforms[0], tf.float32), -1.0)
    _, positions = tf.math.top_k(scores, k=max_predictions)
    rank = tf.range(max_predictions)[tf.newaxis, :]
    chosen = (rank < num_to_predict[:, tf.newaxis]) & tf.gather(candidates, positions, batch_dims=1)
    positions = tf.where(chosen, positions, 0)
    weights = tf.cast(chosen, tf.float32)
    labels = tf.where(chosen, tf.gather(token_ids, positions, batch_dims=1), 0)

    use_mask = tf.cast(uniforms[1], tf.float32) < mask_token_prob
    masked_ids = scatter_tokens(
        token_ids, positions, tf.fill(tf.shape(positions), mask_token_id), chosen & use_mask
    )
    return MaskedBatch(masked_ids, positions, labels, weights)


def candidate_mask(
    token_ids: tf.Tensor, padding_mask: tf.Tensor, special_ids: tuple[int, ...]
) -> tf.Tensor:
    """``[B, L]`` float32: 1 for a real token that is not one of ``special_ids`` (the
    positions masking may choose and a cloze model predicts)."""
    keep = tf.cast(padding_mask, tf.bool)
    for token_id in special_ids:
        keep &= tf.not_equal(token_ids, token_id)
    return tf.cast(keep, tf.float32)


def scatter_tokens(
    token_ids: tf.Tensor, positions: tf.Tensor, tokens: tf.Tensor, where: tf.Tensor
) -> tf.Tensor:
    """Write ``tokens[b, p]`` at ``token_ids[b, positions[b, p]]`` where ``where[b, p]``.

    Positions written must be distinct per row (as :func:`mask_tokens` makes them).
    """
    length = tf.shape(token_ids)[1]
    onehot = tf.one_hot(positions, length, dtype=tf.int32) * tf.cast(where, tf.int32)[..., None]
    written = tf.reduce_max(onehot, axis=1) > 0
    values = tf.reduce_sum(onehot * tf.cast(tokens, tf.int32)[..., None], axis=1)
    return tf.where(written, values, token_ids)


def sample_tokens(
    logits: tf.Tensor,
    labels: tf.Tensor,
    *,
    seed: tf.Tensor | None = None,
    uniform: tf.Tensor | None = None,
    temperature: float = 1.0,
    disallow_correct: bool = False,
    block: int = 128,
) -> tf.Tensor:
    """Sample one token per position from ``softmax(logits / temperature)``.

    Inverse-CDF sampling: the token is the first whose cumulative probability
    exceeds ``u`` times the total, for one uniform ``u`` per position. That is an
    exact draw from the softmax (the Gumbel-max trick would need one uniform per
    position and vocabulary entry). No gradient flows through the sample.

    Args:
        logits: ``[B, P, V]`` generator logits.
        labels: ``[B, P]`` original tokens (used by ``disallow_correct``).
        seed: a stateless seed, shape ``[2]``; or give ``uniform``.
        uniform: ``[B, P]`` draws in [0, 1), instead of ``seed``.
        temperature: softmax temperature.
        disallow_correct: give the original token zero probability.
        block: vocabulary entries per block of the two-level search (the kernel
            table's ``inverse_cdf``, :mod:`keras_electra.kernels`).

    Returns:
        ``[B, P]`` int32 sampled token ids.
    """
    if (seed is None) == (uniform is None):
        raise ValueError("Pass exactly one of seed and uniform.")
    logits = tf.stop_gradient(tf.cast(logits, tf.float32)) / temperature
    vocab = tf.shape(logits)[-1]
    if disallow_correct:
        logits -= 1000.0 * tf.one_hot(labels, vocab, dtype=tf.float32)
    if uniform is None:
        uniform = tf.random.stateless_uniform(tf.shape(labels), seed=seed)
    probs = tf.nn.softmax(logits, axis=-1)
    return kernels.table().inverse_cdf(probs, tf.cast(uniform, tf.float32), block=block)


def replace_tokens(
    token_ids: tf.Tensor, positions: tf.Tensor, sampled: tf.Tensor, weights: tf.Tensor
) -> tf.Tensor:
    """The discriminator's input: the original ids with samples at the chosen positions."""
    return scatter_tokens(token_ids, positions, sampled, weights > 0)


def replaced_labels(
    fake_ids: tf.Tensor, token_ids: tf.Tensor, padding_mask: tf.Tensor
) -> tf.Tensor:
    """1.0 where the discriminator input differs from the original, on real tokens."""
    differs = tf.not_equal(fake_ids, tf.cast(token_ids, fake_ids.dtype))
    return tf.cast(differs, tf.float32) * tf.cast(padding_mask, tf.float32)


def mlm_loss(logits: tf.Tensor, labels: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy of the masked-LM logits over the chosen positions."""
    return mlm_loss_and_predictions(logits, labels, weights)[0]


def mlm_loss_and_predictions(
    logits: tf.Tensor,
    labels: tf.Tensor,
    weights: tf.Tensor,
    *,
    probabilities: bool = False,
    uniform: tf.Tensor | None = None,
) -> tuple[tf.Tensor, ...]:
    """:func:`mlm_loss` and the most likely token per position (int32 ``[B, P]``); with
    ``probabilities``, also the float32 softmax ``[B, P, V]``; with ``uniform`` (``[B, P]``
    draws in [0, 1)), also a sample per position from it (an inverse-CDF draw), as the
    step draws replacements at temperature 1 (neither has a gradient). All come from one
    softmax (the kernel table's ``sparse_cross_entropy``, :mod:`keras_electra.kernels`;
    the compiled kernel writes no float32 one): float32 math on logits of any float
    dtype, whose gradient keeps their dtype.
    """
    if uniform is not None:
        uniform = tf.cast(uniform, tf.float32)
    per_position, predicted, *extra = kernels.table().sparse_cross_entropy(
        logits, labels, probabilities=probabilities, uniform=uniform
    )
    loss = tf.reduce_sum(per_position * weights) / (tf.reduce_sum(weights) + 1e-6)
    return (loss, predicted, *extra)


def disc_loss(logits: tf.Tensor, labels: tf.Tensor, padding_mask: tf.Tensor) -> tf.Tensor:
    """Mean sigmoid cross-entropy of the discriminator over all non-padding tokens."""
    weights = tf.cast(padding_mask, tf.float32)
    per_token = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32)
    )
    return tf.reduce_sum(per_token * weights) / (tf.reduce_sum(weights) + 1e-6)
