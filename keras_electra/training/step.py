"""One optimizer update from a batch, the same on one device and on N replicas: the pieces
of a custom ``train_step`` that do not depend on the model, and ``fit``'s train function as
one traced graph. Every function works in a ``tf.distribute`` replica context or outside any.

Examples:
    >>> import tensorflow as tf
    >>> float(global_sum(tf.constant(3.0)))  # one device: the value itself
    3.0
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import tensorflow as tf

from keras_electra import internals
from keras_electra.limits import PAST_VOCABULARY, vocabulary_error
from keras_electra.training.heap import trim_before_reading


def replicas_in_sync() -> int:
    """How many replicas run this step together (1 outside a strategy)."""
    replica = tf.distribute.get_replica_context()
    return replica.num_replicas_in_sync if replica is not None else 1


def global_sum(value: tf.Tensor) -> tf.Tensor:
    """The sum of ``value`` over the replicas in sync (``value`` itself on one device)."""
    if replicas_in_sync() == 1:
        return value
    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value)


def ordered_sum(values: list) -> tf.Tensor:
    """The sum of same-shaped tensors, added in list order whatever the thread timing, which
    ``tf.add_n`` is not (why replicas need it: docs/reliability.md).

    Examples:
        >>> float(ordered_sum([tf.constant(1.0), tf.constant(1e8), tf.constant(-1e8)]))
        0.0
    """
    if len(values) == 1:
        return tf.convert_to_tensor(values[0])
    return tf.reduce_sum(tf.stack(values), axis=0)


def accumulate_gradients(
    compute: Callable[[Any], tuple[list, dict, Any]],
    batch: Any,
    steps: int,
    record: Callable[[Any], None],
) -> tuple[list, dict, Callable[[], None]]:
    """The gradients and losses of ``batch`` taken as ``steps`` equal micro-batches.

    Args:
        compute: ``micro_batch -> (gradients, losses, out)``; the ``losses`` (a dict of
            scalars, each micro-batch's share of the batch's loss) are summed.
        batch: a structure of tensors with the batch on axis 0.
        steps: micro-batches (1: the batch in one pass).
        record: records one micro-batch's per-example metrics from its ``out``.

    Returns:
        The summed gradients (``None`` where a variable has none), the summed losses,
        and the metric recording still to do: for one pass it is deferred (the caller
        runs it only for a step it applies); with micro-batches it ran in the loop.
    """
    if steps == 1:
        gradients, losses, out = compute(batch)
        return gradients, losses, lambda: record(out)
    # Micro-batch 0 fixes which gradients exist; a loop adds micro-batches 1..steps-1.
    micro = split_batch(batch, steps)
    gradients, first_losses, out = compute(_take(micro, 0))
    present = [i for i, g in enumerate(gradients) if g is not None]
    sums = [tf.convert_to_tensor(gradients[i]) for i in present]
    record(out)

    def body(step, sums, losses):
        gradients, more, out = compute(_take(micro, step))
        sums = [s + tf.convert_to_tensor(gradients[i]) for s, i in zip(sums, present, strict=True)]
        record(out)
        return step + 1, sums, {k: v + more[k] for k, v in losses.items()}

    _, sums, losses = tf.while_loop(
        lambda step, *_: step < steps, body, (tf.constant(1), sums, first_losses)
    )
    summed = dict(zip(present, sums, strict=True))
    return [summed.get(i) for i in range(len(gradients))], losses, lambda: None


def clip_summed_gradient(
    optimizer, gradients: list, norms_of: Callable[[list[int], list, tf.Tensor], dict]
) -> tuple[list, dict]:
    """Clip the replicas' summed, dense gradient to ``global_clipnorm`` (times the loss
    scale), not each replica's share as Keras does; each replica gets an equal 1/N share,
    which the optimizer's own sum restores (apply it inside :func:`clipped_already`).

    Args:
        optimizer: a Keras optimizer, or a ``LossScaleOptimizer`` around one.
        gradients: one per trainable variable (``None`` where it has none).
        norms_of: ``(indexes of the present gradients, their summed values, loss
            scale) -> {name: norm}``, the norms to log (unscaled); ``"grad_norm"``, the
            global norm, is the one clipping reads (so it is computed once).

    Returns:
        The shares to hand to ``optimizer.apply``, ``norms_of``'s norms of the summed
        gradient before clipping, and, for an optimizer that ``takes_gradient_scale``
        (its shares then left unscaled), the factor to hand to :func:`clipped_already`,
        else None.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    clip = getattr(inner, "global_clipnorm", None)
    replicas = replicas_in_sync()
    present = [i for i, g in enumerate(gradients) if g is not None]
    total = [tf.convert_to_tensor(gradients[i]) for i in present]
    if replicas > 1:
        total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, total)
    scale = getattr(optimizer, "dynamic_scale", None)
    loss_scale = tf.cast(scale, tf.float32) if scale is not None else 1.0
    norms = norms_of(present, total, loss_scale)
    if clip is None:
        return gradients, norms, None
    # As tf.clip_by_global_norm, from the norm already taken: a factor of at most 1, and
    # NaN everywhere when the norm is not finite.
    limit = clip * loss_scale
    norm = norms["grad_norm"] * loss_scale
    factor = limit / tf.maximum(norm, limit)
    factor = tf.where(tf.math.is_finite(norm), factor, float("nan")) / replicas
    takes_scale = getattr(inner, "takes_gradient_scale", False)
    shares = list(gradients)
    for i, g in zip(present, total, strict=True):
        shares[i] = g if takes_scale else g * tf.cast(factor, g.dtype)
    return shares, norms, factor if takes_scale else None


@contextmanager
def clipped_already(optimizer, scale: tf.Tensor | None = None):
    """Within (at trace time): the optimizer applies :func:`clip_summed_gradient`'s shares
    without clipping them again, multiplied by ``scale`` where that returned one."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if scale is not None:
        inner.gradient_scale = scale
    try:
        with internals.unclipped(inner):
            yield
    finally:
        if scale is not None:
            inner.gradient_scale = None


def apply_if(condition: tf.Tensor, apply: Callable[..., object], *args) -> None:
    """Run ``apply(*args)`` (an optimizer update) only where ``condition`` holds (the same
    on every replica), on every replica; a strategy that needs ``merge_call`` (a TPU, or
    ``MirroredStrategy``) branches in the cross-replica context, as Keras'
    ``LossScaleOptimizer`` does.

    ``args`` go through the ``merge_call``, so that each replica applies its own tensors.
    (A closure would hand every replica the first one's: the optimizer's all-reduce then
    sees one tensor, not one per replica, and takes it as the sum, so each replica applied
    its 1/N share alone: half a step on two replicas.)"""
    if internals.strategy_supports_no_merge_call():
        tf.cond(condition, lambda: (apply(*args), tf.constant(True))[1], lambda: tf.constant(False))
        return

    def cross_replica(distribution, condition, *args):
        tf.cond(
            distribution.experimental_local_results(condition)[0],
            lambda: (
                distribution.extended.call_for_each_replica(apply, args=args),
                tf.constant(True),
            )[1],
            lambda: tf.constant(False),
        )

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(condition, *args))


def split_batch(batch: Any, parts: int) -> Any:
    """Reshape each ``[batch, ...]`` tensor to ``[parts, batch/parts, ...]``."""

    def split(t):
        size = t.shape[0]
        if size is None:
            return tf.reshape(t, tf.concat([[parts, -1], tf.shape(t)[1:]], 0))
        if size % parts:
            raise ValueError(
                f"A batch of {size} examples (per replica) does not split into {parts} "
                "equal micro-batches; choose a batch size divisible by the accumulation steps."
            )
        return tf.reshape(t, [parts, size // parts, *t.shape[1:]])

    return tf.nest.map_structure(split, batch)


def _take(micro: Any, index) -> Any:
    """Micro-batch ``index`` of a :func:`split_batch` batch (static shapes kept)."""
    return tf.nest.map_structure(lambda t: tf.gather(t, index), micro)


def mean_over_replicas(logs, strategy: tf.distribute.Strategy):
    """A step's logs, one value each, as Keras' ``fit`` reduces them: a TPU's first
    replica's, else the mean over the replicas (and the workers)."""
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    collective = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)

    def reduce(value):
        if collective:
            return strategy.reduce("MEAN", value, axis=0 if value.shape.rank else None)
        if not isinstance(value, tf.distribute.DistributedValues):
            return value
        local = strategy.experimental_local_results(value)
        return local[0] if tpu else tf.reduce_mean(local, axis=0)

    return tf.nest.map_structure(reduce, logs)


def _vocab_size(model) -> int | None:
    config = getattr(model, "config", None)
    if config is None:  # a fine-tuning model: its backbone's
        config = getattr(getattr(model, "backbone", None), "config", None)
    return getattr(config, "vocab_size", None)


@contextmanager
def token_ids_checked(model):
    """Turns a token id outside the model's vocabulary (data tokenized with a larger
    vocabulary), found by :func:`check_token_ids` or by an embedding lookup, into one
    sentence."""
    try:
        yield
    except tf.errors.InvalidArgumentError as error:
        found = vocabulary_error(error.message, _vocab_size(model) or -1)
        if found is None:
            raise
        raise found from None


def check_token_ids(dataset: tf.data.Dataset, vocab_size: int) -> tf.data.Dataset:
    """``dataset`` with each batch's ``token_ids`` checked against ``vocab_size`` in the
    input pipeline: an XLA-compiled step (``jit_compile``) or a GPU's lookup would take an
    id past the table silently, reading a clamped or zero row."""

    def ids_of(element):
        features = element[0] if isinstance(element, tuple) else element
        return features.get("token_ids") if isinstance(features, dict) else None

    if ids_of(dataset.element_spec) is None:
        return dataset

    @tf.autograph.experimental.do_not_convert
    def check(*element):
        element = element if len(element) > 1 else element[0]
        ids = tf.cast(ids_of(element), tf.int64)
        low, high = tf.reduce_min(ids), tf.reduce_max(ids)
        worst = tf.where(high >= vocab_size, high, low)
        inside = tf.logical_and(low >= 0, high < vocab_size)
        with tf.control_dependencies(
            [tf.debugging.Assert(inside, [PAST_VOCABULARY, worst, vocab_size])]
        ):
            return tf.nest.map_structure(tf.identity, element)

    return dataset.map(check)  # sequential: the order stays


def one_graph_train_function(model) -> Callable | None:
    """``model.fit``'s train function as one ``tf.function``, or None where Keras' own
    is needed (``run_eagerly``, ``jit_compile`` or ``steps_per_execution > 1``).

    Keras calls the step's ``tf.function`` from another, which holds its graph twice;
    here the iterator's ``get_next`` and the step are one graph, with Keras' values and
    end of data, and the first calls trim the heap (:mod:`keras_electra.training.heap`).
    """
    if model.run_eagerly or model.jit_compile or model.steps_per_execution != 1:
        return None
    strategy = model.distribute_strategy

    @tf.autograph.experimental.do_not_convert
    def step(data):
        return mean_over_replicas(strategy.run(model.train_step, args=(data,)), strategy)

    step = internals.autoconvert_optionals(model, step)  # an Optional leaf is None
    trim = trim_before_reading(strategy)

    def read(iterator):
        with tf.control_dependencies([] if trim is None else [trim.op()]):
            return iterator.get_next()

    # Plain ops throughout: AutoGraph would only convert (seconds per process). Shapes stay
    # static on a retrace (a second fit at another length traces that length, not None:
    # the masking step's size follows from the length).
    on_iterator = tf.function(lambda iterator: step(read(iterator)), autograph=False)
    on_data = tf.function(step, autograph=False)

    def function(iterator):
        with token_ids_checked(model):
            if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
                return on_iterator(iterator)
            outputs = None
            for data in iterator:  # train_on_batch: one batch from a generator
                outputs = on_data(data)
            return outputs

    function.on_iterator = on_iterator  # the traced step, for a look at its graph
    function.trim = trim  # the heap trim of the first calls (None where there is none)
    return function


def _schedule_note(model, steps_per_epoch: int | None, epochs: int) -> str | None:
    """The warning a ``fit`` gets when its steps go past the end of the optimizer's
    learning-rate schedule (``create_optimizer``'s ``total_steps``), where the rate is 0 and
    the weights stop changing; None otherwise (or where the schedule has no end)."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return None
    schedule = optimizer.get_config().get("learning_rate")
    total = schedule.get("config", {}).get("total_steps") if isinstance(schedule, dict) else None
    if not isinstance(total, int):
        return None
    done = int(optimizer.iterations.numpy())
    end = done + steps_per_epoch * epochs if steps_per_epoch and epochs else done + 1
    if end <= total:
        return None
    return (
        f"The learning-rate schedule ends at step {total:,} (create_optimizer's total_steps) "
        f"and this fit trains to step {end:,}"
        + ("" if steps_per_epoch else " or beyond")
        + f" from {done:,}: its steps past {total:,} train at learning rate 0 and change "
        "nothing; compile with an optimizer whose total_steps covers them."
    )


class OneGraphTraining(internals.SymbolicBuildHook):
    """Mixin for a ``keras.Model``: ``fit`` trains through :func:`one_graph_train_function`
    (where it declines, Keras' own), with the optimizer built before the step is traced
    (variables made in the first trace would make ``tf.function`` trace it twice)."""

    def skip_symbolic_build(self) -> bool:
        # A multi-worker strategy cannot reduce a dict batch for Keras' symbolic build
        # (keras-team/keras#20329); a model and optimizer built beforehand need none.
        optimizer = getattr(self, "optimizer", None)
        return (
            isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and self.built
            and (optimizer is None or optimizer.built)
        )

    def _follow_length(self, function: str, data) -> None:
        """Drop Keras' ``function`` (``train_function`` or ``test_function``) when ``data``
        has another sequence length than the last it ran on: called for a second length,
        Keras traces its function again for any length (``reduce_retracing``), which a
        pretraining step refuses (its masking needs the length); a new function traces
        the new length."""
        if isinstance(data, tuple):
            data = data[0]
        spec = data.element_spec if isinstance(data, tf.data.Dataset) else data
        spec = spec[0] if isinstance(spec, tuple) else spec
        shape = getattr(spec.get("token_ids") if isinstance(spec, dict) else None, "shape", None)
        rank = shape.rank if isinstance(shape, tf.TensorShape) else shape and len(shape)
        length = shape[1] if rank is not None and rank > 1 else None
        seen = getattr(self, "_lengths", {})
        if None not in (length, seen.get(function)) and seen[function] != length:
            setattr(self, function, None)
        self._lengths = {**seen, function: length or seen.get(function)}

    def evaluate(self, x=None, *args, **kwargs):
        self._follow_length("test_function", x)
        return super().evaluate(x, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        self._follow_length("train_function", x)
        if self.built:  # (an unbuilt model has no variables to give it yet)
            self._build_optimizer()  # a multi-worker strategy then skips Keras' symbolic
            # build, which cannot reduce a dict batch
        epochs = kwargs.get("epochs", 1) - kwargs.get("initial_epoch", 0)
        if note := _schedule_note(self, kwargs.get("steps_per_epoch"), epochs):
            warnings.warn(note, stacklevel=2)
        vocab_size = _vocab_size(self)
        if isinstance(x, tf.data.Dataset):
            # Keras cannot shuffle a dataset, and warns at its default shuffle=True.
            kwargs.setdefault("shuffle", False)
            if vocab_size is not None:
                x = check_token_ids(x, vocab_size)
        with token_ids_checked(self):
            return super().fit(x, *args, **kwargs)

    def _build_optimizer(self) -> None:
        """Build a compiled model's optimizer under its strategy, once."""
        optimizer = getattr(self, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        self._build_optimizer()
        self.train_function = one_graph_train_function(self)
        if self.train_function is None:
            super().make_train_function(force=force)
        return self.train_function
