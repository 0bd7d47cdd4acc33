"""Pretraining objectives as plug-ins: what the pretrainer asks of one.

:class:`~keras_electra.pretraining.pretrainer.ElectraPretrainer` owns what every
objective shares (the embedding block, the discriminator tower, the masking of
step 1, the gradient step, the on-NaN guard) and asks its :class:`Objective` for
the rest, without branching on a name:

- :attr:`Objective.Hyperparameters` is the dataclass of its own hyperparameters (loss
  weights, sampling), which an instance holds (``objectives.get(name, **values)``);
- :meth:`Objective.sampling` says how it draws replacements from its generator's logits
  (the training step's and the health probe's);
- :meth:`Objective.check` refuses a config it cannot train, and
  :attr:`Objective.config_overrides` are the settings a new run's config takes;
- :meth:`Objective.add_layers` adds its towers and heads to the model;
- :meth:`Objective.metrics` makes its metrics, :meth:`Objective.compute` its losses
  on a prepared (micro-)batch and :meth:`Objective.update_metrics` records them;
- :attr:`Objective.gradient_parts` names the parts whose gradient norms are logged;
- :meth:`Objective.forward_flops` counts a step's cost (``pretraining.flops``;
  :meth:`Objective.step_flops`, forward and backward), :meth:`Objective.parameters` the
  weights it trains and :meth:`Objective.kept_activations` the memory its step keeps
  (``pretraining.memory``; :meth:`Objective.step_memory`, a dry run's plan);
- :meth:`Objective.token_head` is the head that scores each token of the discriminator's
  output (exports, the health probe), if it has one.

The objectives: ``electra`` (:mod:`.electra`, replaced-token detection), ``mlm``
(:mod:`.mlm`, a BERT-style masked LM on the discriminator tower) and ``electric``
(:mod:`.electric`, the energy-based cloze model). A new one is a module
with an :class:`Objective` subclass plus one line in :data:`keras_electra.settings.OBJECTIVES`
(or a call to :func:`register`): then ``ElectraPretrainer(config, objective=name)``,
``pretrain(objective=name)`` and ``--objective name`` train it. The masking, sampling and
loss functions they share are :mod:`keras_electra.pretraining.masking`'s.

Examples:
    >>> from keras_electra.pretraining import objectives
    >>> mlm = objectives.get("mlm")
    >>> mlm.name, mlm.gradient_parts, mlm.config_overrides
    ('mlm', ('discriminator', 'embeddings', 'heads'), {'embedding_sharing': 'all'})
    >>> objectives.get("electra", temperature=2.0).hyperparameters.temperature
    2.0
    >>> objectives.get("mlm", temperature=2.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    keras_electra.errors.ConfigError: The mlm objective has no hyperparameter 'temperature'; ...
    >>> objectives.get("bert")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    keras_electra.errors.ConfigError: Unknown objective 'bert'; choose one of: electra, mlm, ...
    >>> config = ElectraConfig.from_preset("tiny", vocab_size=8000)
    >>> round(objectives.get("electra").step_flops(config, 32, 128) / 1e9, 2)
    16.54
    >>> equal_compute_steps(config, 32, 128, 1000)
    1097
    >>> small = ElectraConfig.from_preset("small")
    >>> parts = objectives.get("electra").step_memory(small, 32, 128, "float32")
    >>> {name: round(value / 1e9, 2) for name, value in parts.items()}
    {'state': 0.23, 'activations': 1.38, 'logits': 0.15}
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
from typing import Any, ClassVar, NamedTuple

import keras
import tensorflow as tf

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.pretraining.flops import BACKWARD_FACTOR
from keras_electra.pretraining.masking import MaskedBatch
from keras_electra.pretraining.memory import STATE_BYTES
from keras_electra.settings import OBJECTIVES

# The parts whose gradient norms can be logged: "generator" is the generator's tower
# (see pretrainer.gradient_parts).
GRADIENT_PARTS = ("generator", "discriminator", "embeddings", "heads")


class PreparedBatch(NamedTuple):
    """A batch after step 1 (:meth:`ElectraPretrainer.prepare_batch`).

    Every tensor has the batch as its first axis, so a slice of examples is a
    smaller prepared batch (a micro-batch).
    """

    token_ids: tf.Tensor  # [B, L] int32
    segment_ids: tf.Tensor  # [B, L] int32
    padding_mask: tf.Tensor  # [B, L] int32, 1 for real tokens
    masked: MaskedBatch
    sample_uniforms: tf.Tensor  # [B, P] one uniform draw per masked position, for sampling


class LossTotals(NamedTuple):
    """The global batch's counts that normalize the losses (:func:`loss_totals`)."""

    predicted: tf.Tensor  # masked positions the MLM predicts
    real: tf.Tensor  # real (non-padding) tokens the discriminator labels
    # real tokens that are not special ([CLS], [SEP]): the positions a cloze model predicts
    candidates: tf.Tensor | None = None


class ObjectiveOutput(NamedTuple):
    """What :meth:`Objective.compute` returns.

    Attributes:
        losses: this (micro-)batch's share of each loss by metric name; ``"loss"`` is
            the weighted sum that is minimized.
        masked: the batch's :class:`~keras_electra.pretraining.masking.MaskedBatch`.
        tokens: the per-token tensors its :meth:`Objective.update_metrics` reads.
    """

    losses: dict[str, tf.Tensor]
    masked: MaskedBatch
    tokens: dict[str, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class NoHyperparameters:
    """The hyperparameters of an objective that has none."""


class Objective:
    """One pretraining objective. Subclasses set :attr:`name` and implement the methods
    that raise ``NotImplementedError``. An objective keeps no state but its
    :attr:`hyperparameters` (its layers are the model's attributes, so checkpoints and
    paths see them): two of the same name and hyperparameters are equal."""

    name: ClassVar[str] = ""
    #: The frozen dataclass of this objective's hyperparameters, with their defaults.
    Hyperparameters: ClassVar[type] = NoHyperparameters
    #: Hyperparameters a new run of a preset takes unless given (a preset's recipe).
    preset_hyperparameters: ClassVar[dict[str, dict[str, Any]]] = {}
    #: The :data:`GRADIENT_PARTS` that have variables under this objective.
    gradient_parts: ClassVar[tuple[str, ...]] = GRADIENT_PARTS
    #: Config fields a new run of this objective sets (unless given explicitly).
    config_overrides: ClassVar[dict[str, Any]] = {}

    def __init__(self, **hyperparameters: Any) -> None:
        self._check_values(hyperparameters)
        self.hyperparameters = self.Hyperparameters(**hyperparameters)

    def with_hyperparameters(self, **values: Any) -> Objective:
        """A copy of this objective with ``values`` changed, or one sentence."""
        self._check_values(values)
        chosen = copy.copy(self)
        chosen.hyperparameters = dataclasses.replace(self.hyperparameters, **values)
        return chosen

    def _check_values(self, values: dict) -> None:
        """One sentence for a name this objective does not have, or a value of the wrong
        kind (a number for a flag, a flag for a number, a number that is not finite)."""
        names = self.hyperparameter_names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ConfigError(
                f"The {self.name} objective has no hyperparameter"
                f"{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; its "
                f"hyperparameters are: {', '.join(names) or 'none'}."
            )
        for f in dataclasses.fields(self.Hyperparameters):
            if f.name not in values:
                continue
            value, flag = values[f.name], isinstance(f.default, bool)
            kind = isinstance(value, bool) == flag and isinstance(value, bool | int | float)
            if not kind or not math.isfinite(value):
                raise ConfigError(
                    f"The {self.name} objective's {f.name} is "
                    f"{'true or false' if flag else 'a finite number'}, not {value!r}."
                )
            if f.name.endswith("_weight") and value < 0:  # a negative weight maximizes a loss
                raise ConfigError(
                    f"The {self.name} objective's {f.name} is a loss weight, 0 or more, not "
                    f"{value:g}."
                )

    @classmethod
    def hyperparameter_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls.Hyperparameters))

    def restored(self, values: dict[str, Any]) -> Objective:
        """A copy with the hyperparameters a run recorded, leaving out those this objective
        does not have (:func:`from_record`)."""
        names = self.hyperparameter_names()
        return self.with_hyperparameters(**{k: v for k, v in values.items() if k in names})

    def hyperparameter_values(self) -> dict[str, Any]:
        """The hyperparameters as a dict (what ``run.json`` records)."""
        return dataclasses.asdict(self.hyperparameters)

    def __eq__(self, other) -> bool:
        return (
            type(other) is type(self)
            and other.name == self.name
            and other.hyperparameters == self.hyperparameters
        )

    def __hash__(self) -> int:
        return hash((type(self), self.name, self.hyperparameters))

    def check(self, config: ElectraConfig) -> None:
        """Raise :class:`ConfigError` (one sentence) if this objective cannot train ``config``."""

    def sampling(self) -> dict[str, Any]:
        """How this objective draws replacements from its generator's logits: keywords of
        :func:`~keras_electra.pretraining.masking.sample_tokens` (default: none, the
        generator's softmax itself)."""
        return {}

    def add_layers(self, model) -> list[tuple[keras.layers.Layer, int]]:
        """Add this objective's towers and heads to ``model`` as its attributes.

        Returns:
            The heads to build with the model and the width of their input.
        """
        raise NotImplementedError

    def metrics(self, config: ElectraConfig) -> dict[str, keras.metrics.Metric]:
        """This objective's loss and token metrics by name (the total ``loss`` aside)."""
        raise NotImplementedError

    def compute(
        self, model, prepared: PreparedBatch, totals: LossTotals, training: bool
    ) -> ObjectiveOutput:
        """The losses of a prepared batch, or of a slice of one (a micro-batch).

        Each loss is this slice's share of the mean over ``totals`` (the global batch's
        counts; :func:`share`), so the shares of all slices and replicas add up to the
        one-device loss.
        """
        raise NotImplementedError

    def update_metrics(self, metrics: dict, out: ObjectiveOutput) -> None:
        """Record the per-token metrics of ``out`` (their weighted sums add up across
        micro-batches exactly)."""
        raise NotImplementedError

    def forward_flops(self, config: ElectraConfig, batch: int, length: int) -> dict[str, float]:
        """Forward matmul FLOPs of one step by part (see :mod:`keras_electra.pretraining.flops`)."""
        raise NotImplementedError

    def step_flops(self, config: ElectraConfig, batch: int, length: int) -> float:
        """Training FLOPs (forward and backward) of one step."""
        return BACKWARD_FACTOR * sum(self.forward_flops(config, batch, length).values())

    def parameters(self, config: ElectraConfig) -> dict[str, int]:
        """The weights pretraining trains, by part (embeddings, towers, heads), counted from
        ``config`` without building the model (``model.count_params()`` less its step
        counter)."""
        raise NotImplementedError

    def kept_activations(
        self, config: ElectraConfig, sequences: int, length: int, precision: str
    ) -> dict[str, float]:
        """Bytes a step on ``sequences`` sequences keeps for its backward pass:
        ``activations`` (its towers') and ``logits`` (its masked-LM heads'), as
        :mod:`keras_electra.pretraining.memory` estimates them."""
        raise NotImplementedError

    def step_memory(
        self, config: ElectraConfig, sequences: int, length: int, precision: str
    ) -> dict[str, float]:
        """Bytes one device holds at a step's peak, by part (``state``, ``activations``,
        ``logits``), for ``sequences`` sequences per device and micro-batch."""
        return {
            "state": STATE_BYTES * sum(self.parameters(config).values()),
            **self.kept_activations(config, sequences, length, precision),
        }

    def token_head(self, model) -> keras.layers.Layer | None:
        """The head that scores each token of ``model``'s discriminator output (``electra``:
        its "replaced" logit, ``electric``: its energy), or None (``mlm``)."""
        return model.discriminator_head


def register(name: str, objective: type[Objective] | str) -> None:
    """Make ``objective`` (an :class:`Objective` subclass, or ``"module:Class"``, imported
    when a run asks for it) trainable as ``name``."""
    is_class = isinstance(objective, type) and issubclass(objective, Objective)
    if not (is_class or (isinstance(objective, str) and ":" in objective)):
        raise TypeError(
            f"register takes an Objective subclass or 'module:Class', not {objective!r}."
        )
    OBJECTIVES[name] = objective


def get(name: str, **hyperparameters: Any) -> Objective:
    """A new instance of the objective registered as ``name``, with ``hyperparameters``
    (the others at their defaults), or one sentence."""
    if name not in OBJECTIVES:
        raise ConfigError(f"Unknown objective '{name}'; choose one of: {', '.join(OBJECTIVES)}.")
    found = OBJECTIVES[name]
    if isinstance(found, str):
        module, _, attribute = found.partition(":")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as error:
            raise ConfigError(
                f"Objective '{name}' is registered as '{OBJECTIVES[name]}', which does not "
                f"import ({error}); fix its entry in keras_electra.settings.OBJECTIVES."
            ) from None
    chosen = found(**hyperparameters)
    chosen.name = name  # the name it was registered as, which a model records
    return chosen


def from_record(name: str, values: dict[str, Any]) -> Objective:
    """The objective ``name`` with the hyperparameters a run recorded, leaving out those it
    does not have (a run from before they were the objectives' recorded every objective's
    in its ``config.json``)."""
    return get(name).restored(values)


def equal_compute_steps(
    config: ElectraConfig, batch: int, length: int, electra_steps: int, objective: str = "mlm"
) -> int:
    """Steps of ``objective`` that cost what ``electra_steps`` ELECTRA steps cost (rounded)."""
    budget = electra_steps * get("electra").step_flops(config, batch, length)
    return max(1, round(budget / get(objective).step_flops(config, batch, length)))


def share(weight: tf.Tensor, total: tf.Tensor) -> tf.Tensor:
    """This slice's fraction ``weight / total`` of the global batch's loss weight: a slice's
    mean loss times it is its part of the mean over the global batch's tokens, and summed
    over replicas and micro-batches (as gradients are), exactly the one-device loss."""
    return tf.stop_gradient(weight) / tf.maximum(tf.stop_gradient(total), 1e-6)


def detector_tokens(logits: tf.Tensor, labels: tf.Tensor, padding_mask: tf.Tensor) -> dict:
    """An objective's per-token detector outputs, as :func:`update_detector_metrics` reads
    them: its ``[B, L]`` float32 logits, its 0/1 labels and the real tokens."""
    return {
        "disc_logits": logits,
        "disc_labels": labels,
        "padding_mask": tf.cast(padding_mask, tf.float32),
    }


def update_detector_metrics(metrics: dict, tokens: dict, names: tuple[str, ...]) -> tuple:
    """``disc_accuracy`` (at probability 0.5) and the metrics ``names`` of the labels and
    probabilities, over the real tokens of :func:`detector_tokens`' outputs; returns the
    flat labels and real-token mask."""
    mask = tf.reshape(tokens["padding_mask"], [-1])
    labels = tf.reshape(tokens["disc_labels"], [-1])
    probs = tf.sigmoid(tf.reshape(tokens["disc_logits"], [-1]))
    correct = tf.cast(tf.equal(tf.cast(probs > 0.5, tf.float32), labels), tf.float32)
    metrics["disc_accuracy"].update_state(correct, sample_weight=mask)
    for name in names:
        metrics[name].update_state(labels, probs, sample_weight=mask)
    return labels, mask
