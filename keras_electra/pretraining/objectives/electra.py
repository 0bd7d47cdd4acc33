"""The ``electra`` objective: replaced-token detection (Clark et al., 2020).

A small generator (a masked LM on a narrower tower that shares the embeddings)
fills the masked positions with samples from its softmax, and the discriminator
labels every token as original or replaced. The loss is
``mlm_weight x MLM + disc_weight x detection`` (50 in the paper), plus, with
``corrective_weight > 0``, a corrective LM: the discriminator also restores the
original tokens at the masked positions from the corrupted input (as in COCO-LM).
"""

from __future__ import annotations

from dataclasses import dataclass

import keras
import tensorflow as tf

from keras_electra.errors import ConfigError
from keras_electra.layers import DiscriminatorHead, ElectraBackbone
from keras_electra.pretraining import masking
from keras_electra.pretraining.flops import lm_head_flops, tower_flops
from keras_electra.pretraining.memory import lm_logits, tower_activations
from keras_electra.pretraining.objectives import (
    Objective,
    ObjectiveOutput,
    detector_tokens,
    share,
    update_detector_metrics,
)
from keras_electra.pretraining.objectives.mlm import lm_head, predict_masked


@dataclass(frozen=True)
class ElectraHyperparameters:
    """The ``electra`` objective's hyperparameters.

    Args:
        mlm_weight: weight of the generator's masked-LM loss.
        disc_weight: weight of the replaced-token-detection loss (50 in the paper).
        corrective_weight: weight of a corrective LM loss: the discriminator also
            predicts the original token at the masked positions from the corrupted
            input, through a head tied to the word embeddings (COCO-LM's corrective
            LM, Meng et al., 2021, restricted to the masked positions). 0 (the
            paper's ELECTRA) leaves the head out.
        temperature: temperature of the generator softmax when sampling.
        disallow_correct: never sample the original token.
    """

    mlm_weight: float = 1.0
    disc_weight: float = 50.0
    corrective_weight: float = 0.0
    temperature: float = 1.0
    disallow_correct: bool = False

    def __post_init__(self) -> None:
        if self.corrective_weight < 0:
            raise ConfigError("The electra objective's corrective_weight must be >= 0.")
        if not self.temperature > 0:
            raise ConfigError("The electra objective's temperature must be > 0.")


class ReplacedTokenDetection(Objective):
    """ELECTRA: a generator's samples, and a discriminator that spots them."""

    name = "electra"
    Hyperparameters = ElectraHyperparameters
    # The recipe that keeps the tiny preset's small discriminator detecting to the end of
    # a CPU-sized run (docs/research/tiny-recipe.md): sampling at temperature 2 (at 1, the
    # paper's, it collapses to the base rate by step ~250). The larger presets keep 1.
    preset_hyperparameters = {"tiny": {"temperature": 2.0}}

    def sampling(self):
        h = self.hyperparameters
        return {"temperature": h.temperature, "disallow_correct": h.disallow_correct}

    def add_layers(self, model):
        c = model.config
        model.generator = ElectraBackbone(
            c, "generator", embedding=model.embedding, dtype=model.dtype_policy, name="generator"
        )
        model.generator_head = lm_head(model, "generator_predictions")
        model.discriminator_head = DiscriminatorHead(
            c.hidden_size,
            c.initializer_range,
            output_bias=c.replaced_prior_logit(),
            dtype=model.dtype_policy,
            name="discriminator_predictions",
        )
        heads = [
            (model.generator_head, model.generator.hidden_dim),
            (model.discriminator_head, c.hidden_size),
        ]
        if self.hyperparameters.corrective_weight > 0:
            model.corrective_head = lm_head(model, "corrective_predictions")
            heads.append((model.corrective_head, c.hidden_size))
        return heads

    def metrics(self, config):
        m = keras.metrics
        kinds = dict.fromkeys(["mlm_loss", "mlm_accuracy", "sampled_mlm_accuracy"], m.Mean)
        kinds |= {"disc_loss": m.Mean, "disc_accuracy": m.Mean, "disc_precision": m.Precision}
        kinds |= {"disc_recall": m.Recall, "disc_auc": m.AUC, "replaced_fraction": m.Mean}
        if self.hyperparameters.corrective_weight > 0:
            kinds["corrective_loss"] = m.Mean
        return {name: kind(name=name) for name, kind in kinds.items()}

    def compute(self, model, prepared, totals, training):
        h = self.hyperparameters
        token_ids, padding_mask, masked = prepared.token_ids, prepared.padding_mask, prepared.masked

        # 2-3. The generator predicts the masked tokens and replacements are sampled
        #      from its softmax (no gradient through the sample). At temperature 1, with
        #      the original token allowed, that is the loss's own softmax.
        shared = h.temperature == 1.0 and not h.disallow_correct

        def sampler(logits):
            return masking.sample_tokens(
                logits, masked.labels, uniform=prepared.sample_uniforms, **self.sampling()
            )

        mlm_loss, mlm_correct, sampled = predict_masked(
            model.generator,
            model.generator_head,
            prepared,
            totals,
            training,
            sample=shared,
            sampler=None if shared else sampler,
        )
        fake_ids = masking.replace_tokens(token_ids, masked.positions, sampled, masked.weights)
        labels = masking.replaced_labels(fake_ids, token_ids, padding_mask)

        # 4. The discriminator spots the replaced tokens.
        disc_inputs = dict(
            token_ids=fake_ids, segment_ids=prepared.segment_ids, padding_mask=padding_mask
        )
        disc_hidden = model.discriminator(disc_inputs, training=training)
        disc_logits = model.discriminator_head(disc_hidden, training=training)
        disc_loss = masking.disc_loss(disc_logits, labels, padding_mask)
        disc_loss *= share(tf.reduce_sum(tf.cast(padding_mask, tf.float32)), totals.real)
        loss = h.mlm_weight * mlm_loss + h.disc_weight * disc_loss
        losses = {"loss": loss, "mlm_loss": mlm_loss, "disc_loss": disc_loss}

        # 5. Optionally, the corrective LM on the discriminator's output.
        if model.corrective_head is not None:
            logits = model.corrective_head(disc_hidden, masked.positions, training=training)
            corrective = masking.mlm_loss(logits, masked.labels, masked.weights)
            corrective *= share(tf.reduce_sum(masked.weights), totals.predicted)
            losses["loss"] = loss + h.corrective_weight * corrective
            losses["corrective_loss"] = corrective

        tokens = {
            "mlm_correct": mlm_correct,
            "sampled_correct": tf.cast(tf.equal(sampled, masked.labels), tf.float32),
            # "replaced" logits; labels 1.0 where the token was replaced
            **detector_tokens(disc_logits, labels, padding_mask),
        }
        return ObjectiveOutput(losses, masked, tokens)

    def update_metrics(self, metrics, out):
        t, weights = out.tokens, out.masked.weights
        metrics["mlm_accuracy"].update_state(t["mlm_correct"], sample_weight=weights)
        metrics["sampled_mlm_accuracy"].update_state(t["sampled_correct"], sample_weight=weights)
        names = ("disc_precision", "disc_recall", "disc_auc")
        labels, mask = update_detector_metrics(metrics, t, names)
        metrics["replaced_fraction"].update_state(labels, sample_weight=mask)

    def forward_flops(self, config, batch, length):
        disc, gen = config.discriminator_config(), config.generator_config()
        e, h = config.embedding_size, disc.hidden_size
        parts = {
            "generator": tower_flops(gen, e, batch, length),
            "generator_head": lm_head_flops(gen.hidden_size, config, batch, length),
            "discriminator": tower_flops(disc, e, batch, length),
            "discriminator_head": 2.0 * batch * length * (h * h + h),
        }
        if self.hyperparameters.corrective_weight > 0:
            parts["corrective_head"] = lm_head_flops(h, config, batch, length)
        return parts

    def parameters(self, config):
        disc, gen = config.discriminator_config(), config.generator_config()
        h = disc.hidden_size
        parts = {
            "embeddings": config.shared_embedding_parameters(),
            "generator": config.tower_parameters(gen),
            "generator_head": config.lm_head_parameters(gen.hidden_size),
            "discriminator": config.tower_parameters(disc),
            "discriminator_head": h * h + h + h + 1,
        }
        if self.hyperparameters.corrective_weight > 0:
            parts["corrective_head"] = config.lm_head_parameters(h)
        return parts

    def kept_activations(self, config, sequences, length, precision):
        towers = (config.generator_config(), config.discriminator_config())
        heads = 2 if self.hyperparameters.corrective_weight > 0 else 1
        return {
            "activations": sum(tower_activations(t, sequences, length, precision) for t in towers),
            "logits": heads * lm_logits(config, sequences, length),
        }
