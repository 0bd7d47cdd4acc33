"""The ``mlm`` objective: a BERT-style masked LM on the discriminator tower.

It runs the same masking and loss code as ELECTRA's generator, so the paper's
ELECTRA-versus-MLM comparison can be rerun at equal compute. It has one tower,
so its embeddings are shared (``embedding_sharing="all"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import keras
import tensorflow as tf

from keras_electra.errors import ConfigError
from keras_electra.layers import GeneratorHead
from keras_electra.pretraining import masking
from keras_electra.pretraining.flops import lm_head_flops, tower_flops
from keras_electra.pretraining.memory import lm_logits, tower_activations
from keras_electra.pretraining.objectives import (
    LossTotals,
    Objective,
    ObjectiveOutput,
    PreparedBatch,
    share,
)


def lm_head(model, name: str) -> GeneratorHead:
    """A masked-LM head on ``model``'s word table (its output projection)."""
    c = model.config
    return GeneratorHead(
        model.embedding.token_embedding,
        layer_norm_epsilon=c.layer_norm_epsilon,
        initializer_range=c.initializer_range,
        dtype=model.dtype_policy,
        name=name,
    )


def predict_masked(
    tower,
    head,
    prepared: PreparedBatch,
    totals: LossTotals,
    training: bool,
    *,
    sample: bool = False,
    sampler: Callable[[tf.Tensor], tf.Tensor] | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor | None]:
    """The masked-LM step on ``tower``: its loss share, the positions it gets right (1.0
    where the argmax is the original token) and replacements (no gradient): with
    ``sample``, one draw per position from the loss's own softmax (one softmax over the
    [positions, vocabulary] logits fewer; with the compiled kernels, in the loss's
    kernel); with ``sampler``, ``sampler(logits)``, which the loss waits for.
    """
    masked = prepared.masked
    features = dict(segment_ids=prepared.segment_ids, padding_mask=prepared.padding_mask)
    hidden = tower({"token_ids": masked.token_ids, **features}, training=training)
    # Logits in the compute dtype: the loss kernel and the sampler work in float32.
    logits = head(hidden, masked.positions, float32_logits=False, training=training)
    sampled = None
    if sampler is not None:
        sampled = sampler(logits)
        # The loss's float32 softmax waits for the sampler's: each holds float32
        # [positions, vocabulary] tensors (ELECTRA-Small: 71 MB apiece), and run side
        # by side the two made the step's memory peak.
        with tf.control_dependencies([sampled]):
            logits = tf.identity(logits)
    loss, predicted, *draws = masking.mlm_loss_and_predictions(
        logits, masked.labels, masked.weights, uniform=prepared.sample_uniforms if sample else None
    )
    if sample:
        (sampled,) = draws
    loss *= share(tf.reduce_sum(masked.weights), totals.predicted)
    correct = tf.cast(tf.equal(predicted, masked.labels), tf.float32)
    return loss, correct, sampled


@dataclass(frozen=True)
class MlmHyperparameters:
    """The ``mlm`` objective's hyperparameter: its loss's weight."""

    mlm_weight: float = 1.0


class MaskedLM(Objective):
    """BERT's masked LM on the discriminator tower (no generator, no replaced tokens)."""

    name = "mlm"
    Hyperparameters = MlmHyperparameters
    gradient_parts = ("discriminator", "embeddings", "heads")
    # A preset's sharing mode is an ELECTRA setting: one tower has nothing to share.
    config_overrides = {"embedding_sharing": "all"}

    def check(self, config):
        if config.embedding_sharing != "all":
            raise ConfigError(
                f"embedding_sharing '{config.embedding_sharing}' needs a generator "
                "(--objective electra or electric): the mlm baseline has one tower, so pass "
                "--embedding-sharing all or leave the flag out."
            )

    def add_layers(self, model):
        model.generator_head = lm_head(model, "mlm_predictions")
        return [(model.generator_head, model.discriminator.hidden_dim)]

    def metrics(self, config):
        return {name: keras.metrics.Mean(name=name) for name in ("mlm_loss", "mlm_accuracy")}

    def compute(self, model, prepared, totals, training):
        loss, correct, _ = predict_masked(
            model.discriminator, model.generator_head, prepared, totals, training
        )
        losses = {"loss": self.hyperparameters.mlm_weight * loss, "mlm_loss": loss}
        return ObjectiveOutput(losses, prepared.masked, {"mlm_correct": correct})

    def update_metrics(self, metrics, out):
        metrics["mlm_accuracy"].update_state(
            out.tokens["mlm_correct"], sample_weight=out.masked.weights
        )

    def forward_flops(self, config, batch, length):
        disc = config.discriminator_config()
        return {
            "discriminator": tower_flops(disc, config.embedding_size, batch, length),
            "mlm_head": lm_head_flops(disc.hidden_size, config, batch, length),
        }

    def parameters(self, config):
        disc = config.discriminator_config()
        return {
            "embeddings": config.embedding_parameters(),
            "discriminator": config.tower_parameters(disc),
            "mlm_head": config.lm_head_parameters(disc.hidden_size),
        }

    def kept_activations(self, config, sequences, length, precision):
        disc = config.discriminator_config()
        return {
            "activations": tower_activations(disc, sequences, length, precision),
            "logits": lm_logits(config, sequences, length),
        }
