"""ElectraPretrainer: generator + discriminator trained with ``model.fit``."""

from __future__ import annotations

from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from keras_electra.config import FEATURES, ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.layers import (
    DiscriminatorHead,
    ElectraBackbone,
    ElectraEmbedding,
    GdesEmbedding,
    GeneratorHead,
)
from keras_electra.pretraining import objective
from keras_electra.settings import OBJECTIVES, ON_NAN  # the objectives; on_nan's choices
from keras_electra.training.step import (
    OneGraphTraining,
    accumulate_gradients,
    apply_if,
    clip_summed_gradient,
    clipped_already,
    global_sum,
    ordered_sum,
    replicas_in_sync,
)

# In the message of the error a step raises under on_nan="stop" (see configure_step).
NONFINITE_MESSAGE = "keras-electra: the loss or gradient norm of this step is not finite"
# The parts whose gradient norms are logged: "generator" is the generator's tower.
GRADIENT_PARTS = ("generator", "discriminator", "embeddings", "heads")


class PreparedBatch(NamedTuple):
    """A batch after step 1 (:meth:`ElectraPretrainer.prepare_batch`).

    Every tensor has the batch as its first axis, so a slice of examples is a
    smaller prepared batch (a micro-batch).
    """

    token_ids: tf.Tensor  # [B, L] int32
    segment_ids: tf.Tensor  # [B, L] int32
    padding_mask: tf.Tensor  # [B, L] int32, 1 for real tokens
    masked: objective.MaskedBatch
    sample_uniforms: tf.Tensor  # [B, P] one uniform draw per masked position, for sampling


class LossTotals(NamedTuple):
    """The global batch's counts that normalize the losses (:func:`loss_totals`)."""

    predicted: tf.Tensor  # masked positions the MLM predicts
    real: tf.Tensor  # real (non-padding) tokens the discriminator labels


class Losses(NamedTuple):
    """A (micro-)batch's share of each loss; ``None`` where the objective has none."""

    loss: tf.Tensor  # the weighted sum that is minimized
    mlm_loss: tf.Tensor
    disc_loss: tf.Tensor | None = None
    corrective_loss: tf.Tensor | None = None

    def present(self) -> dict[str, tf.Tensor]:
        """The losses this objective has, by metric name."""
        return {name: value for name, value in self._asdict().items() if value is not None}


class ObjectiveOutput(NamedTuple):
    """What :meth:`ElectraPretrainer.objective_from` computes; the token-level fields
    feed the metrics. The discriminator's fields are ``None`` for ``objective="mlm"``."""

    losses: Losses
    masked: objective.MaskedBatch
    mlm_correct: tf.Tensor  # [B, P] 1.0 where the MLM's argmax is the original token
    sampled_correct: tf.Tensor | None = None  # [B, P] 1.0 where the sample is the original
    disc_logits: tf.Tensor | None = None  # [B, L] float32 "replaced" logits
    disc_labels: tf.Tensor | None = None  # [B, L] 1.0 where the token was replaced
    padding_mask: tf.Tensor | None = None  # [B, L] float32


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraPretrainer(OneGraphTraining, keras.Model):
    """ELECTRA pretraining: a generator and a discriminator sharing embeddings.

    ``fit`` takes batches of dicts with int32 ``[batch, length]`` tensors
    ``token_ids``, ``padding_mask`` and ``segment_ids`` (as produced by
    :mod:`keras_electra.data`); masking happens in the graph, so every epoch sees
    fresh masks.

    ``objective="electra"`` trains replaced-token detection (generator MLM loss +
    ``disc_weight`` x discriminator loss). ``objective="mlm"`` trains the
    discriminator tower as a BERT-style masked-LM, through the same masking code,
    so the paper's ELECTRA-versus-MLM comparison can be rerun.

    Calling the model on a batch returns the discriminator's per-token
    "replaced" logits (``objective="electra"``) or its sequence output.

    Embeddings (``config.embedding_sharing``): ``self.embedding`` is the
    generator's block (variables ``embedding/...``) and its word table is the
    generator's output projection. The discriminator calls the same block
    (``all``), its own block around the same word table (``word``), its own block
    (``none``), or a :class:`~keras_electra.layers.embedding.GdesEmbedding` reading
    the block through a stop-gradient plus its own zero-initialized deltas
    (``gdes``); its own weights live under ``discriminator/embedding/...``.
    :meth:`discriminator_backbone` folds any of them into a plain standalone
    backbone. The ``mlm`` objective has one tower and needs ``all``.

    Args:
        config: the :class:`ElectraConfig`.
        objective: ``"electra"`` or ``"mlm"``.
        seed: seed of the masking and sampling random streams.
        **kwargs: ``keras.Model``'s, such as ``dtype``: a Keras dtype policy like
            ``"mixed_bfloat16"`` (variables stay float32; LayerNorm, attention
            softmax, logits and losses run in float32).

    Distribution: under a ``tf.distribute`` strategy each replica gets a slice of
    the global batch. The random masks and samples of an example depend only on
    ``(seed, step, global example index)``, and the losses are normalized by the
    global number of predicted tokens, so an N-replica step equals a one-device
    step on the same global batch.

    Examples:
        >>> import numpy as np, keras
        >>> config = ElectraConfig.from_preset("tiny", vocab_size=64, num_layers=1)
        >>> model = ElectraPretrainer(config, seed=0)
        >>> model.compile(optimizer=keras.optimizers.AdamW(1e-3))
        >>> ids = np.random.default_rng(0).integers(5, 64, (4, 16)).astype("int32")
        >>> batch = {"token_ids": ids, "padding_mask": np.ones_like(ids),
        ...          "segment_ids": np.zeros_like(ids)}
        >>> logs = model.train_on_batch(batch, return_dict=True)
        >>> sorted(logs)[:3]
        ['disc_accuracy', 'disc_auc', 'disc_loss']
    """

    def __init__(
        self,
        config: ElectraConfig | dict,
        objective: str = "electra",
        seed: int | None = None,
        **kwargs,
    ):
        # A fixed name keeps variable paths (the checkpoint keys) the same in every process.
        kwargs.setdefault("name", "electra_pretrainer")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = ElectraConfig.from_dict(config)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}.")
        if objective == "mlm" and config.embedding_sharing != "all":
            raise ConfigError(
                f"embedding_sharing '{config.embedding_sharing}' needs the electra objective: "
                "the mlm baseline has one tower, so use embedding_sharing 'all'."
            )
        self.config = config
        self.objective = objective
        self.seed = seed
        # Options of the training step, set by configure_step().
        self.gradient_accumulation = 1
        self.xla_gradients = False
        self.on_nan = None
        self._compiled_gradients = None

        # === Layers ===
        self.embedding = ElectraEmbedding.for_model(
            config, dtype=self.dtype_policy, name="embedding"
        )
        self.embedding.build((None, None))
        self.discriminator = ElectraBackbone(
            config,
            "discriminator",
            embedding=self._discriminator_embedding(),
            dtype=self.dtype_policy,
            name="discriminator",
        )
        head_args = dict(
            layer_norm_epsilon=config.layer_norm_epsilon,
            initializer_range=config.initializer_range,
            dtype=self.dtype_policy,
        )
        if objective == "electra":
            self.generator = ElectraBackbone(
                config,
                "generator",
                embedding=self.embedding,
                dtype=self.dtype_policy,
                name="generator",
            )
            self.generator_head = GeneratorHead(
                self.embedding.token_embedding, name="generator_predictions", **head_args
            )
            self.discriminator_head = DiscriminatorHead(
                config.hidden_size,
                config.initializer_range,
                output_bias=config.replaced_prior_logit(),
                dtype=self.dtype_policy,
                name="discriminator_predictions",
            )
        else:
            self.generator = None
            self.generator_head = GeneratorHead(
                self.embedding.token_embedding, name="mlm_predictions", **head_args
            )
            self.discriminator_head = None
        self.corrective_head = None
        if objective == "electra" and config.corrective_weight > 0:
            self.corrective_head = GeneratorHead(
                self.embedding.token_embedding, name="corrective_predictions", **head_args
            )
        # Masking and sampling use stateless random ops seeded by (seed, a step
        # counter): the counter is a model variable, so checkpoints carry it and a
        # resumed run continues the same random stream.
        self.random_step = self.add_weight(
            shape=(),
            dtype="int32",
            initializer="zeros",
            trainable=False,
            aggregation="only_first_replica",
            name="random_step",
        )

        # === Metrics ===
        mean = keras.metrics.Mean
        self._trackers = {
            "loss": mean(name="loss"),
            "mlm_loss": mean(name="mlm_loss"),
            "mlm_accuracy": mean(name="mlm_accuracy"),
        }
        if objective == "electra":
            self._trackers.update(
                {
                    "sampled_mlm_accuracy": mean(name="sampled_mlm_accuracy"),
                    "disc_loss": mean(name="disc_loss"),
                    "disc_accuracy": mean(name="disc_accuracy"),
                    "disc_precision": keras.metrics.Precision(name="disc_precision"),
                    "disc_recall": keras.metrics.Recall(name="disc_recall"),
                    "disc_auc": keras.metrics.AUC(name="disc_auc"),
                    "replaced_fraction": mean(name="replaced_fraction"),
                }
            )
        if self.corrective_head is not None:
            self._trackers["corrective_loss"] = mean(name="corrective_loss")
        # Training only: the global gradient norm before clipping, whole and per part.
        parts = GRADIENT_PARTS if objective == "electra" else GRADIENT_PARTS[1:]
        for name in ("grad_norm",) + tuple(f"grad_norm_{p}" for p in parts):
            self._trackers[name] = mean(name=name)
        # Steps left out under configure_step(on_nan="skip"); reported only then.
        self._skipped = keras.metrics.Sum(name="skipped_steps")
        self.build()

    @property
    def metrics(self):
        skipped = [self._skipped] if self.on_nan == "skip" else []
        return list(self._trackers.values()) + skipped

    def build(self, input_shape=None):
        if self.built:
            return
        # The embedding and both backbones are built when created.
        self.generator_head.build((None, None, self._mlm_tower().hidden_dim))
        if self.discriminator_head is not None:
            self.discriminator_head.build((None, None, self.config.hidden_size))
        if self.corrective_head is not None:
            self.corrective_head.build((None, None, self.config.hidden_size))
        self.built = True

    def _discriminator_embedding(self) -> keras.layers.Layer | None:
        """The embedding layer the discriminator calls (None: a new block of its own)."""
        c, mode = self.config, self.config.embedding_sharing
        if mode == "all":
            return self.embedding
        if mode == "none":
            return None  # the backbone builds one
        args = dict(dtype=self.dtype_policy, name="embedding")
        if mode == "word":
            return ElectraEmbedding.for_model(c, self.embedding.token_embedding, **args)
        return GdesEmbedding(
            self.embedding, dropout=c.dropout, layer_norm_epsilon=c.layer_norm_epsilon, **args
        )

    def embedding_tables(self, tower: str = "discriminator") -> dict[str, np.ndarray]:
        """The effective embedding weights a tower reads, keyed as in ``embedding.TABLES``.

        For ``gdes`` the discriminator's word, position and segment tables are the
        folded ``shared + delta``; the generator's are always ``self.embedding``'s.
        """
        if tower == "generator":
            return self.embedding.tables()
        if tower != "discriminator":
            raise ValueError(f"tower must be 'discriminator' or 'generator', got {tower!r}.")
        return self.discriminator.embedding.tables()

    def discriminator_backbone(self, config: ElectraConfig | None = None) -> ElectraBackbone:
        """The discriminator as a new standalone ``ElectraBackbone`` with its effective weights.

        Its one plain embedding block holds :meth:`embedding_tables` (``shared +
        delta`` folded for ``gdes``), so it computes exactly what the discriminator
        computes in every sharing mode; fine-tuning, export and conversion use it.

        Args:
            config: the backbone's config (default: the model's), e.g. with another
                dropout; its sizes must be the model's.
        """
        backbone = ElectraBackbone(config or self.config, dtype=self.dtype_policy)
        backbone.embedding.assign_tables(self.embedding_tables("discriminator"))
        backbone.encoder.set_weights(self.discriminator.encoder.get_weights())
        return backbone

    def _mlm_tower(self) -> ElectraBackbone:
        return self.generator if self.generator is not None else self.discriminator

    def call(self, inputs, training=False):
        """Discriminator logits (``electra``) or sequence output (``mlm``) for a batch."""
        sequence = self.discriminator(_features(inputs), training=training)
        if self.discriminator_head is None:
            return sequence
        return self.discriminator_head(sequence)

    # === The objective, top-down ===

    def compute_objective(self, batch: dict, training: bool = False) -> ObjectiveOutput:
        """Mask, run the generator, sample, run the discriminator, compute losses."""
        prepared = self.prepare_batch(batch)
        return self.objective_from(prepared, loss_totals(prepared), training=training)

    def prepare_batch(self, batch: dict) -> PreparedBatch:
        """Step 1, which needs no gradient: draw this step's random numbers and mask ~15%."""
        c = self.config
        batch = _features(batch)
        token_ids = tf.cast(batch["token_ids"], tf.int32)
        padding_mask = tf.cast(batch["padding_mask"], tf.int32)
        max_predictions = c.max_predictions(token_ids.shape[1])
        choice, keep, sample = self._example_uniforms(
            tf.shape(token_ids)[0], (tf.shape(token_ids)[1], max_predictions, max_predictions)
        )
        # 1. Mask ~15% of the real tokens.
        masked = objective.mask_tokens(
            token_ids,
            padding_mask,
            special_ids=(c.pad_token_id, c.cls_token_id, c.sep_token_id),
            mask_token_id=c.mask_token_id,
            mask_prob=c.mask_prob,
            mask_token_prob=c.mask_token_prob,
            max_predictions=max_predictions,
            uniforms=(choice, keep),
        )
        return PreparedBatch(
            token_ids, tf.cast(batch["segment_ids"], tf.int32), padding_mask, masked, sample
        )

    def objective_from(
        self, prepared: PreparedBatch, totals: LossTotals, training: bool = False
    ) -> ObjectiveOutput:
        """Steps 2-5 on a prepared batch, or on a slice of one (a micro-batch).

        ``totals`` are the whole global batch's counts of predicted and of real tokens
        (:func:`loss_totals`); each loss is this slice's share of the mean over them,
        so the shares of all slices and replicas add up to the one-device loss.
        """
        c = self.config
        token_ids, padding_mask, masked = prepared.token_ids, prepared.padding_mask, prepared.masked

        # 2. The generator (or, for the MLM baseline, the discriminator) predicts them.
        tower_inputs = {
            "token_ids": masked.token_ids,
            "segment_ids": prepared.segment_ids,
            "padding_mask": padding_mask,
        }
        hidden = self._mlm_tower()(tower_inputs, training=training)
        # Logits in the compute dtype: the loss kernel and the sampler work in float32.
        mlm_logits = self.generator_head(
            hidden, masked.positions, float32_logits=False, training=training
        )
        # At temperature 1 (and with the original token allowed) the sampler draws from
        # the loss's own softmax: the same values, one softmax over the [positions,
        # vocabulary] logits fewer (with the compiled kernels, in the loss's kernel,
        # which writes no float32 softmax at all).
        shared = self.generator is not None and c.temperature == 1.0 and not c.disallow_correct
        loss_logits = mlm_logits
        if self.generator is not None and not shared:
            # 3. Sample replacements from the generator (no gradient through the sample).
            sampled = objective.sample_tokens(
                mlm_logits,
                masked.labels,
                uniform=prepared.sample_uniforms,
                temperature=c.temperature,
                disallow_correct=c.disallow_correct,
            )
            # The loss's float32 softmax waits for the sampler's: each holds float32
            # [positions, vocabulary] tensors (ELECTRA-Small: 71 MB apiece), and run side
            # by side the two made the step's memory peak.
            with tf.control_dependencies([sampled]):
                loss_logits = tf.identity(mlm_logits)
        # 3. (shared) Sample replacements from the generator's softmax (no gradient).
        mlm_loss, predicted, *draws = objective.mlm_loss_and_predictions(
            loss_logits,
            masked.labels,
            masked.weights,
            uniform=prepared.sample_uniforms if shared else None,
        )
        if shared:
            (sampled,) = draws
        mlm_loss *= _share(tf.reduce_sum(masked.weights), totals.predicted)
        mlm_correct = tf.cast(tf.equal(predicted, masked.labels), tf.float32)
        if self.generator is None:
            return ObjectiveOutput(Losses(c.mlm_weight * mlm_loss, mlm_loss), masked, mlm_correct)

        fake_ids = objective.replace_tokens(token_ids, masked.positions, sampled, masked.weights)
        labels = objective.replaced_labels(fake_ids, token_ids, padding_mask)

        # 4. The discriminator spots the replaced tokens.
        disc_inputs = {
            "token_ids": fake_ids,
            "segment_ids": prepared.segment_ids,
            "padding_mask": padding_mask,
        }
        disc_hidden = self.discriminator(disc_inputs, training=training)
        disc_logits = self.discriminator_head(disc_hidden, training=training)
        disc_loss = objective.disc_loss(disc_logits, labels, padding_mask)
        disc_loss *= _share(tf.reduce_sum(tf.cast(padding_mask, tf.float32)), totals.real)
        loss = c.mlm_weight * mlm_loss + c.disc_weight * disc_loss

        # 5. Optionally, the discriminator also restores the original tokens at the
        #    masked positions from the corrupted input (a corrective LM, as in COCO-LM).
        corrective_loss = None
        if self.corrective_head is not None:
            corrective_logits = self.corrective_head(
                disc_hidden, masked.positions, training=training
            )
            corrective_loss = objective.mlm_loss(corrective_logits, masked.labels, masked.weights)
            corrective_loss *= _share(tf.reduce_sum(masked.weights), totals.predicted)
            loss += c.corrective_weight * corrective_loss

        return ObjectiveOutput(
            Losses(loss, mlm_loss, disc_loss, corrective_loss),
            masked,
            mlm_correct,
            sampled_correct=tf.cast(tf.equal(sampled, masked.labels), tf.float32),
            disc_logits=disc_logits,
            disc_labels=labels,
            padding_mask=tf.cast(padding_mask, tf.float32),
        )

    def _example_uniforms(self, local_batch: tf.Tensor, widths: tuple) -> list[tf.Tensor]:
        """Uniform draws in [0, 1), ``[local_batch, width]`` per width, one row per example.

        They are drawn for the whole global batch from ``(seed, step, stream)`` and
        this replica takes the rows of its examples (replica ``r`` holds rows
        ``r * local_batch`` onwards, as ``tf.distribute`` splits a batch), so an
        example's masks and samples do not depend on how many replicas share the
        batch. One vectorized draw per stream, no per-example loop.
        """
        step = self.random_step.value
        self.random_step.assign_add(1)
        replica = tf.distribute.get_replica_context()
        replica_id, replicas = 0, 1
        if replica is not None:
            replica_id = replica.replica_id_in_sync_group
            replicas = replica.num_replicas_in_sync
        rows = slice(replica_id * local_batch, (replica_id + 1) * local_batch)
        seed = tf.constant(self.seed or 0, tf.int32)
        draws = []
        for stream, width in enumerate(widths):
            every = tf.random.stateless_uniform(
                [local_batch * replicas, width], seed=tf.stack([seed, step * 3 + stream])
            )
            draws.append(every[rows])
        return draws

    # === Training step ===

    def configure_step(
        self,
        *,
        gradient_accumulation: int = 1,
        xla_gradients: bool = False,
        on_nan: str | None = None,
    ) -> None:
        """Options of the training step (call after or before ``compile``).

        Args:
            gradient_accumulation: split each batch into this many micro-batches
                and sum their gradients before one optimizer update: the batch
                (``batch_size``) stays the global batch, a micro-batch holds
                ``batch_size / gradient_accumulation`` examples and the activations
                of one micro-batch at a time are kept. Masks, samples and loss
                normalization are the whole batch's, so the update equals one of
                the whole batch (up to float rounding and dropout masks).
            xla_gradients: compile the forward and backward pass (the loss and its
                gradients) with XLA, as a ``tf.function(jit_compile=True)`` inside
                the step; masking, the optimizer update and metrics run outside it,
                so it also works under ``MirroredStrategy``, where compiling the
                whole step (``compile(jit_compile=True)``) fails on the shared
                variables. XLA's stateless random ops draw another stream than
                TensorFlow's kernels, so samples and dropout differ from a step
                without it (equally deterministic).
            on_nan: what a step whose loss or global gradient norm (before
                clipping, summed over the replicas) is NaN or infinite does, checked
                in the graph: ``"stop"`` raises ``tf.errors.InvalidArgumentError``
                (its message holds :data:`NONFINITE_MESSAGE`) before the update, so
                the weights and optimizer stay as they were; ``"skip"`` leaves out
                the update and that step's metrics and counts it in the
                ``skipped_steps`` metric (a sum per epoch). Either way the step's
                batch and random draws are used up. ``None`` (the default) applies
                every update. Steps with finite values are unchanged. Ignored under
                float16 loss scaling, whose optimizer already skips (and rescales)
                steps with non-finite gradients.
        """
        if gradient_accumulation < 1:
            raise ValueError(f"gradient_accumulation must be >= 1, got {gradient_accumulation}.")
        if on_nan is not None and on_nan not in ON_NAN:
            raise ValueError(f"on_nan must be one of {ON_NAN} or None, got {on_nan!r}.")
        self.gradient_accumulation = int(gradient_accumulation)
        self.xla_gradients = bool(xla_gradients)
        self.on_nan = on_nan
        self._compiled_gradients = (
            tf.function(self._loss_and_gradients, jit_compile=True) if xla_gradients else None
        )
        self.train_function = None  # traced again with these options

    def train_step(self, data):
        batch, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        prepared = self.prepare_batch(batch)
        totals = loss_totals(prepared)
        compute = self._compiled_gradients or self._loss_and_gradients
        gradients, losses, record_tokens = accumulate_gradients(
            lambda micro: compute(micro, totals),
            prepared,
            self.gradient_accumulation,
            self._update_token_metrics,
        )
        self._apply_update(gradients, self._global_losses(losses), record_tokens)
        return self._metric_results()

    def _apply_update(self, gradients: list, losses: dict, update_metrics) -> None:
        """Clip and apply the gradients and record the step's metrics, if the step is finite.

        ``losses`` are the global batch's (:meth:`_global_losses`); ``update_metrics``
        records the per-token metrics. Without an ``on_nan`` policy (or under loss
        scaling) this is ``optimizer.apply`` plus the metric updates. With one, both
        run only when the loss and the global gradient norm are finite (every
        replica sees the same all-reduced values, so all take the same branch).
        Every all-reduce happens before the branch: a replica context may not
        synchronize inside one.
        """
        shares, norms, scale = clip_summed_gradient(self.optimizer, gradients, self._gradient_norms)
        variables = self.trainable_variables

        def record():
            self._record_gradient_norms(norms)
            self._record_losses(losses)
            update_metrics()
            return tf.constant(True)

        guard = self.on_nan is not None and getattr(self.optimizer, "dynamic_scale", None) is None
        if not guard:
            with clipped_already(self.optimizer, scale):
                self.optimizer.apply(shares, variables)
            record()
            return
        loss = tf.cast(losses["loss"], tf.float32)
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(norms["grad_norm"]))
        with clipped_already(self.optimizer, scale):
            apply_if(finite, lambda: self.optimizer.apply(shares, variables))

        def nonfinite():
            if self.on_nan == "skip":
                # Each replica adds its share: the metric sums over the replicas.
                self._skipped.update_state(1.0 / replicas_in_sync())
                return tf.constant(False)
            with tf.control_dependencies(
                [tf.debugging.Assert(finite, [NONFINITE_MESSAGE, loss, norms["grad_norm"]])]
            ):
                return tf.constant(False)

        tf.cond(finite, record, nonfinite)

    def _gradient_norms(self, present: list[int], total: list, loss_scale) -> dict:
        """The global gradient norm and each logged part's norm, by metric name."""
        parts = gradient_parts(self.trainable_variables)
        halves = {name: [] for name in GRADIENT_PARTS}  # half sums of squares: one op each
        for i, g in zip(present, total, strict=True):
            halves[parts[i]].append(tf.nn.l2_loss(tf.cast(g, tf.float32)))
        every, norms = [], {}
        for name, terms in halves.items():
            if f"grad_norm_{name}" not in self._trackers:
                continue
            every += terms
            total_half = ordered_sum(terms) if terms else 0.0
            norms[f"grad_norm_{name}"] = tf.sqrt(2.0 * total_half) / loss_scale
        # In list order (not tf.add_n, whose order follows thread timing): every replica
        # clips by the same bits.
        norms["grad_norm"] = tf.sqrt(2.0 * ordered_sum(every)) / loss_scale
        return norms

    def _record_gradient_norms(self, norms: dict) -> None:
        """Window means of the global gradient norm and of each part's norm."""
        for name, value in norms.items():
            self._trackers[name].update_state(value)

    def _loss_and_gradients(
        self, prepared: PreparedBatch, totals: LossTotals
    ) -> tuple[list, dict, ObjectiveOutput]:
        """The objective on a prepared (micro-)batch, the gradients of its loss share
        and its losses by name."""
        with tf.GradientTape() as tape:
            out = self.objective_from(prepared, totals, training=True)
            loss = self.optimizer.scale_loss(out.losses.loss)
        return tape.gradient(loss, self.trainable_variables), out.losses.present(), out

    def test_step(self, data):
        batch, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        self._update_metrics(self.compute_objective(batch, training=False))
        logs = self._metric_results()
        return {k: v for k, v in logs.items() if not k.startswith(("grad_norm", "skipped"))}

    def _update_metrics(self, out: ObjectiveOutput) -> None:
        self._record_losses(self._global_losses(out.losses.present()))
        self._update_token_metrics(out)

    def _global_losses(self, losses: dict) -> dict[str, tf.Tensor]:
        """The global batch's losses: the sums of the replicas' shares (all-reduced)."""
        return {name: global_sum(value) for name, value in losses.items()}

    def _record_losses(self, losses: dict) -> None:
        # Every replica records the global value.
        for name, value in losses.items():
            self._trackers[name].update_state(value)

    def _update_token_metrics(self, out: ObjectiveOutput) -> None:
        """Per-token metrics: their weighted sums add up across micro-batches exactly."""
        t = self._trackers
        weights = out.masked.weights
        t["mlm_accuracy"].update_state(out.mlm_correct, sample_weight=weights)
        if self.generator is not None:
            mask = tf.reshape(out.padding_mask, [-1])
            labels = tf.reshape(out.disc_labels, [-1])
            probs = tf.sigmoid(tf.reshape(out.disc_logits, [-1]))
            correct = tf.cast(tf.equal(tf.cast(probs > 0.5, tf.float32), labels), tf.float32)
            t["sampled_mlm_accuracy"].update_state(out.sampled_correct, sample_weight=weights)
            t["disc_accuracy"].update_state(correct, sample_weight=mask)
            t["disc_precision"].update_state(labels, probs, sample_weight=mask)
            t["disc_recall"].update_state(labels, probs, sample_weight=mask)
            t["disc_auc"].update_state(labels, probs, sample_weight=mask)
            t["replaced_fraction"].update_state(labels, sample_weight=mask)

    def _metric_results(self) -> dict[str, tf.Tensor]:
        return {m.name: m.result() for m in self.metrics}

    # === Config ===
    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "objective": self.objective,
            "seed": self.seed,
            "name": self.name,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }


def gradient_parts(variables) -> list[str]:
    """Which of :data:`GRADIENT_PARTS` each variable belongs to, from its path.

    Paths start with the owning layer: ``embedding/...`` (the shared, or the
    generator's, embedding block), ``generator/...``, ``discriminator/...``, and
    the heads under the pretrainer's own name. Every embedding weight counts as
    "embeddings", a tower's own included: the discriminator's own block or GDES
    deltas and LayerNorm (``discriminator/embedding/...``, when
    ``embedding_sharing`` is not ``all``). "generator" and "discriminator" are the
    towers' encoders (projection and transformer layers).
    """
    parts = []
    for v in variables:
        names = v.path.split("/")
        if names[0] == "embedding" or names[1:2] == ["embedding"]:
            parts.append("embeddings")
        elif names[0] in ("generator", "discriminator"):
            parts.append(names[0])
        else:
            parts.append("heads")
    return parts


def transfer_weights(source: ElectraPretrainer, target: ElectraPretrainer) -> None:
    """Copy a pretrainer's weights into one of the same sizes and any ``embedding_sharing``.

    Every variable is copied by path. When the source shares all its embeddings
    (``all``) and the target does not, the target's discriminator-only embedding
    weights (``discriminator/embedding/...``) start as copies of the shared ones
    and GDES deltas at zero, so both towers compute exactly what they computed in
    the source. Otherwise the two modes must be equal.

    Raises:
        ConfigError: if the sizes, objectives or sharing modes do not allow it.
    """
    mode, wanted = source.config.embedding_sharing, target.config.embedding_sharing
    if source.config.replace(embedding_sharing=wanted) != target.config:
        raise ConfigError("The two models differ in more than embedding_sharing.")
    if source.objective != target.objective or mode not in ("all", wanted):
        raise ConfigError(
            f"Weights pretrained with embedding_sharing '{mode}' can start only a model with "
            f"'{mode}'; only 'all' can start any mode."
        )
    values = {v.path: v for v in source.variables}
    for v in target.variables:
        if v.name == "seed_generator_state":
            continue
        path = v.path
        if path not in values and path.startswith("discriminator/embedding/"):
            if path.endswith("_delta"):
                v.assign(np.zeros(v.shape, "float32"))
                continue
            path = path.removeprefix("discriminator/")  # the shared block's copy
        v.assign(values[path].numpy())


def loss_totals(prepared: PreparedBatch) -> LossTotals:
    """The global batch's number of predicted tokens and of real tokens.

    They normalize the MLM and discriminator losses; summed over the replicas in
    sync, so every replica (and every micro-batch) divides by the same counts.
    """
    predicted = tf.reduce_sum(prepared.masked.weights)
    real = tf.reduce_sum(tf.cast(prepared.padding_mask, tf.float32))
    return LossTotals(global_sum(predicted), global_sum(real))


def _share(weight: tf.Tensor, total: tf.Tensor) -> tf.Tensor:
    """This slice's fraction ``weight / total`` of the global batch's loss weight.

    Multiplying a slice's mean loss by it turns the mean over its own tokens into
    its part of the mean over the global batch's tokens; summed over replicas and
    micro-batches (as gradients are) that is exactly the one-device, one-batch loss.
    """
    return tf.stop_gradient(weight) / tf.maximum(tf.stop_gradient(total), 1e-6)


def _features(batch: dict) -> dict:
    """The batch's :data:`FEATURES`, or one sentence naming what is missing."""
    missing = [name for name in FEATURES if name not in batch]
    if missing:
        renamed = (
            " (earlier versions named them input_ids and input_mask)"
            if "input_ids" in batch
            else ""
        )
        raise ValueError(
            f"A pretraining batch holds {', '.join(FEATURES)}; this one has no "
            f"{', '.join(missing)}{renamed}."
        )
    return {name: batch[name] for name in FEATURES}
