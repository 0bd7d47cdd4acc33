"""ElectraPretrainer: generator + discriminator trained with ``model.fit``."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from keras_electra.config import FEATURES, ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.layers import ElectraBackbone, ElectraEmbedding, GdesEmbedding
from keras_electra.limits import check_length
from keras_electra.pretraining import masking, objectives
from keras_electra.pretraining.objectives import (
    GRADIENT_PARTS,
    LossTotals,
    ObjectiveOutput,
    PreparedBatch,
)
from keras_electra.settings import ON_NAN  # on_nan's choices
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


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraPretrainer(OneGraphTraining, keras.Model):
    """ELECTRA pretraining: a generator and a discriminator sharing embeddings.

    ``fit`` takes batches of dicts with int32 ``[batch, length]`` tensors ``token_ids``,
    ``padding_mask`` and ``segment_ids`` (as :mod:`keras_electra.data` produces them);
    masking happens in the graph, so every epoch sees fresh masks.

    The objective is a plug-in (:mod:`keras_electra.pretraining.objectives`):
    ``objective="electra"`` trains replaced-token detection (generator MLM loss +
    ``disc_weight`` x discriminator loss); ``objective="mlm"`` the discriminator tower as
    a BERT-style masked LM through the same masking code, to rerun the paper's
    ELECTRA-versus-MLM comparison. The model owns the embedding block, the discriminator
    tower, the masking and the training step; the objective adds its towers and heads,
    and gives the losses and metrics.

    Calling the model on a batch returns the discriminator's per-token
    "replaced" logits (``objective="electra"``) or its sequence output.

    Embeddings (``config.embedding_sharing``): ``self.embedding`` is the generator's
    block (variables ``embedding/...``), its word table the generator's output
    projection. The discriminator calls the same block (``all``), its own block around
    the same word table (``word``), its own block (``none``), or a
    :class:`~keras_electra.layers.embedding.GdesEmbedding` reading the block through a
    stop-gradient plus its own zero-initialized deltas (``gdes``); its own weights live
    under ``discriminator/embedding/...``. :meth:`discriminator_backbone` folds any of
    them into a plain standalone backbone. The ``mlm`` objective has one tower and needs
    ``all``.

    Args:
        config: the :class:`ElectraConfig`.
        objective: the name of a registered objective: ``"electra"``, ``"mlm"`` or
            ``"electric"``, or one looked up already with its hyperparameters
            (``objectives.get(name, temperature=2.0)``).
        seed: seed of the masking and sampling random streams.
        hyperparameters: with an objective's name, its hyperparameters to change from
            their defaults (``{"disc_weight": 30.0}``; :attr:`hyperparameters` are the
            model's).
        **kwargs: ``keras.Model``'s, such as ``dtype``: a Keras dtype policy like
            ``"mixed_bfloat16"`` (variables stay float32; LayerNorm, attention
            softmax, logits and losses run in float32).

    Distribution: under a ``tf.distribute`` strategy each replica gets a slice of the
    global batch. An example's random masks and samples depend only on ``(seed, step,
    global example index)`` and the losses are normalized by the global number of
    predicted tokens, so an N-replica step equals a one-device step on the same batch.

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
        objective: str | objectives.Objective = "electra",
        seed: int | None = None,
        *,
        hyperparameters: dict | None = None,
        **kwargs,
    ):
        # A fixed name keeps variable paths (the checkpoint keys) the same in every process.
        kwargs.setdefault("name", "electra_pretrainer")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = ElectraConfig.from_dict(config)
        if not isinstance(objective, objectives.Objective):  # a name (else one sentence)
            objective = objectives.get(objective, **(hyperparameters or {}))
        elif hyperparameters:
            raise TypeError(
                "ElectraPretrainer takes hyperparameters with an objective's name, not with "
                "an Objective (which holds its own)."
            )
        self._objective = objective
        self._objective.check(config)
        self.config = config
        self.objective = objective.name
        self.seed = seed
        self.restored_step = 0  # load_run's checkpoint step: save_run counts on from it
        self.configure_step()  # the training step's default options

        # === Layers: the embedding block and the discriminator, then the objective's ===
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
        # What an objective may add; None where it does not.
        self.generator = self.generator_head = None
        self.discriminator_head = self.corrective_head = None
        self._heads = self._objective.add_layers(self)
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
        self._trackers = {"loss": keras.metrics.Mean(name="loss")}
        self._trackers.update(self._objective.metrics(config))
        # Training only: the global gradient norm before clipping, whole and per part.
        for name in ["grad_norm"] + [f"grad_norm_{p}" for p in self._objective.gradient_parts]:
            self._trackers[name] = keras.metrics.Mean(name=name)
        # Steps left out under configure_step(on_nan="skip"); reported only then.
        self._skipped = keras.metrics.Sum(name="skipped_steps")
        self.build()

    @property
    def metrics(self):
        skipped = [self._skipped] if self.on_nan == "skip" else []
        return list(self._trackers.values()) + skipped

    def skip_symbolic_build(self) -> bool:
        # Built when made, its metrics its own: Keras' symbolic build has nothing to do,
        # and under MirroredStrategy it failed on a first batch the replicas split unevenly
        # (it averages their halves, "AddN ... [4,64] != [3,64]").
        optimizer = getattr(self, "optimizer", None)
        return self.built and (optimizer is None or optimizer.built)

    def build(self, input_shape=None):
        if self.built:
            return
        # The embedding and the backbones are built when created.
        for head, width in self._heads:
            head.build((None, None, width))
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

    @property
    def token_head(self) -> keras.layers.Layer | None:
        """The objective's head that scores each token of the discriminator's output
        (``electra``: "replaced" logits, ``electric``: energies), None for ``mlm``."""
        return self._objective.token_head(self)

    @property
    def sampling(self) -> dict:
        """How the objective samples replacements from the generator's logits (keywords of
        ``masking.sample_tokens``: ELECTRA's temperature; Electric's cloze ``q`` as is)."""
        return self._objective.sampling()

    def call(self, inputs, training=False):
        """The :attr:`token_head`'s scores (``electra``: per token, "replaced"), or the
        discriminator's sequence output where the objective has no such head."""
        sequence = self.discriminator(_features(inputs), training=training)
        head = self.token_head
        return sequence if head is None else head(sequence)

    # === The objective, top-down ===

    def compute_objective(self, batch: dict, training: bool = False) -> ObjectiveOutput:
        """Mask, run the generator, sample, run the discriminator, compute losses (not
        ``training``: with evaluation's draws, :meth:`prepare_batch`)."""
        prepared = self.prepare_batch(batch, evaluation=not training)
        return self.objective_from(
            prepared, loss_totals(prepared, self.special_ids), training=training
        )

    @property
    def special_ids(self) -> tuple[int, ...]:
        """The ids never masked nor predicted: ``[PAD]``, ``[CLS]`` and ``[SEP]``."""
        c = self.config
        return (c.pad_token_id, c.cls_token_id, c.sep_token_id)

    def prepare_batch(self, batch: dict, evaluation: bool = False) -> PreparedBatch:
        """Step 1, which needs no gradient: draw this step's random numbers and mask ~15%
        (for an ``evaluation``, from each example's own text: :meth:`_evaluation_uniforms`)."""
        c = self.config
        batch = _features(batch)
        token_ids = tf.cast(batch["token_ids"], tf.int32)
        padding_mask = tf.cast(batch["padding_mask"], tf.int32)
        _check_batch_shape(token_ids.shape)
        check_length(token_ids.shape[1], c.max_position_embeddings)  # outside a layer's call
        max_predictions = c.max_predictions(token_ids.shape[1])
        widths = (tf.shape(token_ids)[1], max_predictions, max_predictions)
        if evaluation:
            choice, keep, sample = self._evaluation_uniforms(token_ids, widths)
        else:
            choice, keep, sample = self._example_uniforms(tf.shape(token_ids)[0], widths)
        # 1. Mask ~15% of the real tokens.
        masked = masking.mask_tokens(
            token_ids,
            padding_mask,
            special_ids=self.special_ids,
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
        """Steps 2 onwards (the objective's) on a prepared batch, or on a slice of one.

        ``totals`` are the whole global batch's counts of predicted and of real tokens
        (:func:`loss_totals`); each loss is this slice's share of the mean over them,
        so the shares of all slices and replicas add up to the one-device loss.
        """
        return self._objective.compute(self, prepared, totals, training)

    def _example_uniforms(self, local_batch: tf.Tensor, widths: tuple) -> list[tf.Tensor]:
        """Uniform draws in [0, 1), ``[local_batch, width]`` per width, one row per example:
        one draw per stream for the whole global batch from ``(seed, step, stream)``, of
        which replica ``r`` takes rows ``r * local_batch`` onwards (as ``tf.distribute``
        splits a batch), so an example's draws do not depend on the replica count."""
        step = self.random_step.value
        self.random_step.assign_add(1)
        replica = tf.distribute.get_replica_context()
        replica_id, replicas = 0, 1
        if replica is not None:
            replica_id = replica.replica_id_in_sync_group
            replicas = replica.num_replicas_in_sync
        rows = slice(replica_id * local_batch, (replica_id + 1) * local_batch)
        seed = tf.constant(self.seed or 0, tf.int32)
        return [
            tf.random.stateless_uniform(
                [local_batch * replicas, width], seed=tf.stack([seed, step * 3 + stream])
            )[rows]
            for stream, width in enumerate(widths)
        ]

    def _evaluation_uniforms(self, token_ids: tf.Tensor, widths: tuple) -> list[tf.Tensor]:
        """Evaluation's draws, as :meth:`_example_uniforms`' but each example's row from
        ``(seed, a fingerprint of its token ids)``: ``evaluate`` masks the same text the
        same way every time (a steady validation loss for early stopping), and leaves
        training's stream (``random_step``) where it was."""
        words = tf.reshape(tf.fingerprint(token_ids), [-1, 2, 4])  # 64 bits per example
        rows = tf.bitcast(words, tf.int32)
        seed = tf.constant(self.seed or 0, tf.int32)
        draws = []
        for stream, width in enumerate(widths):
            seeds = tf.stack([tf.bitwise.bitwise_xor(rows[:, 0], seed), rows[:, 1] + stream], 1)
            draws.append(
                tf.map_fn(
                    lambda pair, width=width: tf.random.stateless_uniform([width], seed=pair),
                    seeds,
                    fn_output_signature=tf.float32,
                )
            )
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
            gradient_accumulation: split each batch (``batch_size``, still the global
                batch) into this many micro-batches of ``batch_size /
                gradient_accumulation`` examples, keep one micro-batch's activations at
                a time and sum their gradients before one optimizer update. Masks,
                samples and loss normalization are the whole batch's, so the update
                equals the whole batch's (up to float rounding and dropout masks).
            xla_gradients: compile the forward and backward pass (the loss and its
                gradients) with XLA, as a ``tf.function(jit_compile=True)`` inside the
                step; masking, the optimizer update and metrics run outside it, so it
                also works under ``MirroredStrategy``, where compiling the whole step
                (``compile(jit_compile=True)``) fails on the shared variables. XLA's
                stateless random ops draw another stream than TensorFlow's kernels, so
                samples and dropout differ from a step without it (equally deterministic).
            on_nan: what a step whose loss or global gradient norm (before clipping,
                summed over the replicas) is NaN or infinite does, checked in the graph:
                ``"stop"`` raises ``tf.errors.InvalidArgumentError`` (its message holds
                :data:`NONFINITE_MESSAGE`) before the update, weights and optimizer
                unchanged; ``"skip"`` leaves out the update and the step's metrics and
                counts it in the ``skipped_steps`` metric (a sum per epoch). Either way
                the batch and random draws are used up, and finite steps are unchanged.
                ``None`` (the default) applies every update. Ignored under float16 loss
                scaling, whose optimizer already skips (and rescales) non-finite steps.
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
        batch, labels, weights = keras.utils.unpack_x_y_sample_weight(data)
        if labels is not None or weights is not None:
            raise ValueError(
                "A pretraining batch is the dict of token ids alone: its targets are the "
                "tokens it masks, so a dataset of (inputs, labels) pairs would have its "
                "labels ignored; map it to the inputs (dataset.map(lambda x, y: x))."
            )
        prepared = self.prepare_batch(batch)
        totals = loss_totals(prepared, self.special_ids)
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
        """Clip and apply the gradients and record the step's metrics (``losses``: the
        global batch's; ``update_metrics``: the per-token ones). With an ``on_nan`` policy
        (and no loss scaling) both run only if the loss and the global gradient norm are
        finite: all-reduced values, so every replica takes the same branch, and every
        all-reduce happens before it (a replica context may not synchronize inside one).
        """
        shares, norms, scale = clip_summed_gradient(self.optimizer, gradients, self._gradient_norms)
        variables = self.trainable_variables

        def record():
            self._record(norms | losses)
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
            apply_if(finite, self.optimizer.apply, shares, variables)

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

    def _loss_and_gradients(
        self, prepared: PreparedBatch, totals: LossTotals
    ) -> tuple[list, dict, ObjectiveOutput]:
        """The objective on a prepared (micro-)batch, the gradients of its loss share
        and its losses by name."""
        with tf.GradientTape() as tape:
            out = self.objective_from(prepared, totals, training=True)
            loss = self.optimizer.scale_loss(out.losses["loss"])
        return tape.gradient(loss, self.trainable_variables), out.losses, out

    def test_step(self, data):
        batch, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        out = self.compute_objective(batch, training=False)
        self._record(self._global_losses(out.losses))
        self._update_token_metrics(out)
        logs = self._metric_results()
        return {k: v for k, v in logs.items() if not k.startswith(("grad_norm", "skipped"))}

    def _global_losses(self, losses: dict) -> dict[str, tf.Tensor]:
        """The global batch's losses: the sums of the replicas' shares (all-reduced)."""
        return {name: global_sum(value) for name, value in losses.items()}

    def _record(self, values: dict) -> None:
        """Record global values (losses, gradient norms) by metric name, on every replica."""
        for name, value in values.items():
            self._trackers[name].update_state(value)

    def _update_token_metrics(self, out: ObjectiveOutput) -> None:
        """Per-token metrics: their weighted sums add up across micro-batches exactly."""
        self._objective.update_metrics(self._trackers, out)

    def _metric_results(self) -> dict[str, tf.Tensor]:
        return {m.name: m.result() for m in self.metrics}

    @classmethod
    def from_preset(
        cls,
        preset: str,
        objective: str = "electra",
        seed: int | None = None,
        *,
        hyperparameters: dict | None = None,
        dtype=None,
        **config_values,
    ) -> ElectraPretrainer:
        """A pretrainer of a preset's sizes and recipe, as ``keras-electra pretrain --preset``
        builds one: the preset's config with the objective's ``config_overrides`` and
        ``config_values`` (``vocab_size=...``), and the objective's hyperparameters for that
        preset (the tiny preset's ELECTRA samples at temperature 2) with ``hyperparameters``.

        Examples:
            >>> model = ElectraPretrainer.from_preset("tiny", vocab_size=64, seed=0)
            >>> model.config.embedding_sharing, model.hyperparameters.temperature
            ('gdes', 2.0)
        """
        chosen = objectives.get(objective)
        config = ElectraConfig.from_preset(preset, **{**chosen.config_overrides, **config_values})
        values = {**chosen.preset_hyperparameters.get(preset, {}), **(hyperparameters or {})}
        return cls(config, objective, seed, hyperparameters=values, dtype=dtype)

    @property
    def hyperparameters(self):
        """The objective's hyperparameters (a frozen dataclass: loss weights, sampling)."""
        return self._objective.hyperparameters

    # === Config ===
    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "objective": self.objective,
            "hyperparameters": self._objective.hyperparameter_values(),
            "seed": self.seed,
            "name": self.name,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }


def gradient_parts(variables) -> list[str]:
    """Which of :data:`GRADIENT_PARTS` each variable belongs to, from its path.

    Paths start with the owning layer: ``embedding/...`` (the shared, or the generator's,
    block), ``generator/...`` (Electric's two towers: ``generator_left_to_right/...``,
    ``generator_right_to_left/...``), ``discriminator/...``, and the heads under the pretrainer's
    own name. Every embedding weight counts as "embeddings", a tower's own included (the
    discriminator's own block or GDES deltas and LayerNorm, ``discriminator/embedding/...``).
    "generator" and "discriminator" are the towers' encoders (projection and layers).
    """
    parts = []
    for v in variables:
        names = v.path.split("/")
        if names[0] == "embedding" or names[1:2] == ["embedding"]:
            parts.append("embeddings")
        elif names[0] == "discriminator":
            parts.append(names[0])
        elif names[0] == "generator" or names[0].startswith("generator_"):
            parts.append("generator")  # the tower, or the cloze generator's two
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


def loss_totals(prepared: PreparedBatch, special_ids: tuple[int, ...] = ()) -> LossTotals:
    """The global batch's number of predicted tokens, of real tokens and of candidates
    (real tokens other than ``special_ids``).

    They normalize the MLM, discriminator and cloze losses; summed over the replicas in
    sync, so every replica (and every micro-batch) divides by the same counts.
    """
    predicted = tf.reduce_sum(prepared.masked.weights)
    real = tf.reduce_sum(tf.cast(prepared.padding_mask, tf.float32))
    candidates = masking.candidate_mask(prepared.token_ids, prepared.padding_mask, special_ids)
    candidates = tf.reduce_sum(candidates)
    return LossTotals(global_sum(predicted), global_sum(real), global_sum(candidates))


def _check_batch_shape(shape: tf.TensorShape) -> None:
    """Refuse token ids that are not a batch of sequences of one length known while the
    step is traced (the masking step's size follows from it), in one sentence.

    Examples:
        >>> _check_batch_shape(tf.TensorShape([8, 128]))
        >>> _check_batch_shape(tf.TensorShape([128]))
        Traceback (most recent call last):
        ...
        ValueError: A pretraining batch's token ids are [batch, length], but these have \
shape (128,): batch the dataset (dataset.batch(8, drop_remainder=True)).
    """
    if shape.rank != 2:
        raise ValueError(
            f"A pretraining batch's token ids are [batch, length], but these have shape "
            f"{tuple(shape.as_list()) if shape.rank is not None else 'unknown'}: batch the "
            "dataset (dataset.batch(8, drop_remainder=True))."
        )
    if shape[1] is None:
        raise ValueError(
            "Pretraining batches need one sequence length known when the step is traced, but "
            "this batch's is not (a dataset padded to each batch's longest sequence); pad "
            "every batch to one length "
            "(padded_batch(8, padded_shapes={name: [max_seq_length] for name in FEATURES})) "
            "or read the data with keras_electra.data.pretraining_dataset."
        )


def _features(batch: dict) -> dict:
    """The batch's :data:`FEATURES`, or one sentence naming what is missing."""
    if not hasattr(batch, "keys"):  # a tensor of token ids alone
        raise ValueError(
            f"A pretraining batch is a dict of {', '.join(FEATURES)}, not a "
            f"{type(batch).__name__}; encode texts with keras_electra.encoding.encode_texts."
        )
    missing = [name for name in FEATURES if name not in batch]
    if missing:
        old = "input_ids" in batch
        renamed = " (earlier versions named them input_ids and input_mask)" if old else ""
        raise ValueError(
            f"A pretraining batch holds {', '.join(FEATURES)}; this one has no "
            f"{', '.join(missing)}{renamed}."
        )
    return {name: batch[name] for name in FEATURES}
