"""The ``electric`` objective: an energy-based cloze model (Clark, Luong, Le and Manning,
2020, "Pre-Training Transformers as Energy-Based Cloze Models").

The discriminator assigns every token an energy ``E(x)_t``, with
``p(x_t | x_{\\t}) = exp(-E(x)_t) / Z``, and is trained by noise-contrastive estimation
against a noise distribution ``q(x_t | x_{\\t})``:

1. the cloze generator (:class:`~keras_electra.layers.cloze.TwoTowerCloze`: a
   left-to-right and a right-to-left tower, shifted so position ``t`` never sees ``x_t``)
   gives ``q`` at every position of the original text, trained by cross-entropy on every
   candidate position (the real tokens that are not ``[CLS]`` or ``[SEP]``);
2. the masking step's positions (``mask_prob``, 15%) are resampled from ``q`` (at those
   positions only; the rest keep their token);
3. the discriminator reads the result; its logit for "resampled" is its head's output
   plus ``log q(x_t | x_{\\t})`` (no gradient) plus ``log(k)``, ``k = p / (1 - p)`` for the
   resampling rate ``p``, and its label is "resampled" at every resampled position, even
   where the sample equals the original.

With those labels, ``sigmoid(E + log q + log k) = k q / (k q + exp(-E))`` is NCE's
posterior of "noise", so the head's output is the energy ``E`` itself: high for a token
that does not fit its context. A sentence's score is ``-sum_t E(x)_t`` over its ordinary
tokens (:func:`sentence_scores`), an unnormalized pseudo-log-likelihood from one forward
pass (the paper's rescoring score): higher means more plausible.

The loss is ``mlm_weight x cloze + disc_weight x NCE`` (1 and 50, as the reference's
``gen_weight`` and ``disc_weight``). The reference allows no other generator with this
objective (its config forces the two-tower one), and neither does this plug-in. Sampling
must be from ``q`` itself for the ``log q`` term to be right, so the objective has no
``temperature`` or ``disallow_correct``, and no corrective LM (asking for one is refused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import keras
import tensorflow as tf

from keras_electra import kernels
from keras_electra.layers import DiscriminatorHead
from keras_electra.layers.cloze import TwoTowerCloze
from keras_electra.pretraining import masking
from keras_electra.pretraining.flops import tower_flops
from keras_electra.pretraining.memory import lm_logits, tower_activations
from keras_electra.pretraining.objectives import (
    Objective,
    ObjectiveOutput,
    detector_tokens,
    share,
    update_detector_metrics,
)
from keras_electra.pretraining.objectives.mlm import lm_head

LOGIT_THRESHOLDS = [float(1 / (1 + math.exp(-x / 8))) for x in range(-96, 97)]
"""``disc_auc``'s thresholds for Electric: probabilities at logits -12 to 12 in steps of
1/8."""


# === The objective's math, as pure functions ===


def all_positions(token_ids: tf.Tensor) -> tf.Tensor:
    """``[B, L]`` int32: each row ``0 .. L - 1`` (a head's positions for every token)."""
    shape = tf.shape(token_ids)
    return tf.broadcast_to(tf.range(shape[1])[tf.newaxis], shape)


def log_noise(cloze_logits: tf.Tensor, token_ids: tf.Tensor) -> tf.Tensor:
    """``log q(token_ids[b, t] | context)`` ``[B, L]`` float32 from the cloze logits
    ``[B, L, V]``, without gradient (the noise distribution is not trained through it): the
    negated cross-entropy at those tokens, by the loss's own kernel (no float32 ``[B, L, V]``
    log-softmax kept: 2 GB for ELECTRA-Small's batch of 128)."""
    return -kernels.table().sparse_cross_entropy(tf.stop_gradient(cloze_logits), token_ids)[0]


def noise_logits(energies: tf.Tensor, log_q: tf.Tensor, resample_rate: float) -> tf.Tensor:
    """The discriminator's "resampled" logits: ``E + log q + log(p / (1 - p))``."""
    prior = math.log(resample_rate / (1.0 - resample_rate))
    return tf.cast(energies, tf.float32) + tf.stop_gradient(log_q) + prior


def resampled_labels(token_ids: tf.Tensor, positions: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """``[B, L]`` float32: 1.0 at every resampled position, whatever was drawn there."""
    written = masking.scatter_tokens(
        tf.zeros_like(token_ids), positions, tf.ones_like(positions), weights > 0
    )
    return tf.cast(written, tf.float32)


def electric_losses(
    cloze_logits: tf.Tensor,
    energies: tf.Tensor,
    token_ids: tf.Tensor,
    noisy_ids: tf.Tensor,
    labels: tf.Tensor,
    candidates: tf.Tensor,
    padding_mask: tf.Tensor,
    resample_rate: float,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Electric's two losses on one batch, each a mean over its tokens.

    Args:
        cloze_logits: ``[B, L, V]`` the cloze model's logits at every position.
        energies: ``[B, L]`` the discriminator head's outputs on ``noisy_ids``.
        token_ids: ``[B, L]`` the original text; ``noisy_ids`` the discriminator's input.
        labels: ``[B, L]`` 1.0 where resampled (:func:`resampled_labels`).
        candidates: ``[B, L]`` 1.0 where the cloze model is trained.
        padding_mask: ``[B, L]`` 1 for real tokens (the NCE loss's tokens).
        resample_rate: ``p``, the fraction of positions resampled.

    Returns:
        ``(cloze_loss, nce_loss, nce_logits, cloze_argmax)``: the cloze model's
        cross-entropy over the candidates, the discriminator's sigmoid cross-entropy over
        the real tokens, its "resampled" logits ``[B, L]`` and the cloze model's most
        likely token per position ``[B, L]``.
    """
    cloze_loss, predicted = masking.mlm_loss_and_predictions(cloze_logits, token_ids, candidates)
    logits = noise_logits(energies, log_noise(cloze_logits, noisy_ids), resample_rate)
    return cloze_loss, masking.disc_loss(logits, labels, padding_mask), logits, predicted


def sentence_scores(energies: tf.Tensor, scored: tf.Tensor) -> tf.Tensor:
    """``[B]`` float32: ``-sum_t E(x)_t`` over the tokens where ``scored`` ``[B, L]`` is
    1: the sentence's unnormalized pseudo-log-likelihood (higher: more plausible)."""
    return -tf.reduce_sum(tf.cast(energies, tf.float32) * tf.cast(scored, tf.float32), axis=-1)


# === The plug-in ===


@dataclass(frozen=True)
class ElectricHyperparameters:
    """The ``electric`` objective's hyperparameters: the weights of its cloze loss and of
    its NCE loss."""

    mlm_weight: float = 1.0
    disc_weight: float = 50.0


class EnergyCloze(Objective):
    """Electric: NCE of a per-token energy against a two-tower cloze generator's noise."""

    name = "electric"
    Hyperparameters = ElectricHyperparameters

    def add_layers(self, model):
        c = model.config
        model.generator = TwoTowerCloze(c, embedding=model.embedding, dtype=model.dtype_policy)
        model.generator_head = lm_head(model, "cloze_predictions")
        # The energy: 0 everywhere at the start (the logit's prior is log(p / (1 - p))).
        model.discriminator_head = DiscriminatorHead(
            c.hidden_size, c.initializer_range, dtype=model.dtype_policy, name="energy"
        )
        return [
            (model.generator_head, model.generator.hidden_dim),
            (model.discriminator_head, c.hidden_size),
        ]

    def metrics(self, config):
        m = keras.metrics
        kinds = dict.fromkeys(["cloze_loss", "cloze_accuracy", "resampled_original"], m.Mean)
        kinds |= {"disc_loss": m.Mean, "disc_accuracy": m.Mean}
        metrics = {name: kind(name=name) for name, kind in kinds.items()}
        # The NCE probabilities of a young Electric model sit far below 0.01 (they add
        # log q), where AUC's default thresholds, evenly spaced in [0, 1], leave one bin and
        # read 0.5; thresholds even in the logit keep its ranking measured.
        metrics["disc_auc"] = m.AUC(name="disc_auc", thresholds=LOGIT_THRESHOLDS)
        return metrics

    def compute(self, model, prepared, totals, training):
        c = model.config
        token_ids, padding_mask, masked = prepared.token_ids, prepared.padding_mask, prepared.masked
        features = dict(segment_ids=prepared.segment_ids, padding_mask=padding_mask)
        candidates = masking.candidate_mask(token_ids, padding_mask, model.special_ids)

        # 1. The cloze model: q(x_t | x_{\t}) at every position of the original text
        #    (its loss, on every candidate, with the discriminator's below).
        hidden = model.generator({"token_ids": token_ids, **features}, training=training)
        logits = model.generator_head(
            hidden, all_positions(token_ids), float32_logits=False, training=training
        )

        # 2. Resample the masked positions from q (no gradient through the draw).
        at_masked = tf.gather(logits, masked.positions, batch_dims=1)
        sampled = masking.sample_tokens(at_masked, masked.labels, uniform=prepared.sample_uniforms)
        noisy_ids = masking.replace_tokens(token_ids, masked.positions, sampled, masked.weights)
        labels = resampled_labels(token_ids, masked.positions, masked.weights)

        # 3. The energies of the noisy text; NCE's logit of "resampled"; the losses.
        disc_inputs = dict(token_ids=noisy_ids, **features)
        disc_hidden = model.discriminator(disc_inputs, training=training)
        energies = model.discriminator_head(disc_hidden, training=training)
        cloze_loss, disc_loss, disc_logits, predicted = electric_losses(
            logits, energies, token_ids, noisy_ids, labels, candidates, padding_mask, c.mask_prob
        )
        cloze_loss *= share(tf.reduce_sum(candidates), totals.candidates)
        disc_loss *= share(tf.reduce_sum(tf.cast(padding_mask, tf.float32)), totals.real)

        h = self.hyperparameters
        loss = h.mlm_weight * cloze_loss + h.disc_weight * disc_loss
        losses = {"loss": loss, "cloze_loss": cloze_loss, "disc_loss": disc_loss}
        tokens = {
            "cloze_correct": tf.cast(tf.equal(predicted, token_ids), tf.float32),
            "candidates": candidates,
            "sampled_original": tf.cast(tf.equal(sampled, masked.labels), tf.float32),
            # "resampled" logits; labels 1.0 where the token was resampled
            **detector_tokens(disc_logits, labels, padding_mask),
        }
        return ObjectiveOutput(losses, masked, tokens)

    def update_metrics(self, metrics, out):
        t = out.tokens
        metrics["cloze_accuracy"].update_state(t["cloze_correct"], sample_weight=t["candidates"])
        metrics["resampled_original"].update_state(
            t["sampled_original"], sample_weight=out.masked.weights
        )
        update_detector_metrics(metrics, t, ("disc_auc",))

    def forward_flops(self, config, batch, length):
        disc, gen = config.discriminator_config(), config.generator_config()
        e, h, tokens = config.embedding_size, disc.hidden_size, batch * length
        tower = tower_flops(gen, e, batch, length)  # causal: the same matmuls, half unused
        return {
            "generator_left_to_right": tower,
            "generator_right_to_left": tower,
            # at every position: the 2 x hidden dense layer and the vocabulary projection
            "cloze_head": 2.0 * tokens * (2 * gen.hidden_size * e + e * config.vocab_size),
            "discriminator": tower_flops(disc, e, batch, length),
            "energy_head": 2.0 * tokens * (h * h + h),
        }

    def parameters(self, config):
        disc, gen = config.discriminator_config(), config.generator_config()
        h, tower = disc.hidden_size, config.tower_parameters(gen)
        return {
            "embeddings": config.shared_embedding_parameters(),
            "generator_left_to_right": tower,
            "generator_right_to_left": tower,
            "cloze_head": config.lm_head_parameters(2 * gen.hidden_size),
            "discriminator": config.tower_parameters(disc),
            "energy_head": h * h + h + h + 1,
        }

    def kept_activations(self, config, sequences, length, precision):
        gen, disc = config.generator_config(), config.discriminator_config()
        towers = 2 * tower_activations(gen, sequences, length, precision)
        towers += tower_activations(disc, sequences, length, precision)
        return {"activations": towers, "logits": lm_logits(config, sequences, length, length)}
