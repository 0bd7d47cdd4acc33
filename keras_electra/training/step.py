"""One optimizer update from a batch, the same on one device and on N replicas.

The pieces of a custom ``train_step`` that do not depend on the model:

- :func:`accumulate_gradients`: the gradients of a batch taken as K micro-batches
  (one forward and backward pass each, the sum applied once);
- :func:`clip_summed_gradient`: ``global_clipnorm`` applied to the replicas' summed,
  dense gradient (Keras clips each replica's share, so N replicas would not take the
  one-device step);
- :func:`apply_if`: an optimizer update applied only where a condition holds, on
  every replica;
- :func:`global_sum`: a value summed over the replicas in sync;
- :func:`ordered_sum`: tensors summed in list order, the same bits whatever the thread
  timing (``tf.add_n`` is not);
- :func:`one_graph_train_function`: ``fit``'s train function as one traced graph.
- :class:`OneGraphTraining`: the mixin that gives a ``keras.Model`` that function, its
  optimizer built before the trace.

Every function works in a ``tf.distribute`` replica context or outside any.

Examples:
    >>> import tensorflow as tf
    >>> float(global_sum(tf.constant(3.0)))  # one device: the value itself
    3.0
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import tensorflow as tf

from keras_electra import internals
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
    """The sum of same-shaped tensors, added in list order whatever the thread timing.

    Everything a replica computes after the all-reduce must come out bit for bit the
    same on every replica, and ``tf.add_n`` does not: TensorFlow's CPU kernel adds into
    the buffer of the first input it may reuse (one no other op still reads) and moves
    that input to the front, so with three or more inputs the order of the additions,
    hence the rounding, depends on which of the inputs' other readers have finished.
    Two replicas summing identical values then differ in the last bit (the global
    gradient norm did, and with it clipping's factor and every weight). A ``Sum`` over
    the stacked values has one order.

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
    # Micro-batch 0 fixes which gradients exist (the loop carries only those), then a
    # loop adds micro-batches 1..steps-1.
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
    """Clip the replicas' summed, dense gradient, not each replica's share of it.

    Keras optimizers apply ``global_clipnorm`` to each replica's gradient before
    summing across replicas, and measure a sparse (embedding) gradient by its rows,
    repeated tokens counted apart, so N replicas would take a different step than one
    device. Here the gradient is made dense, summed over the replicas, clipped to the
    optimizer's ``global_clipnorm`` (times the loss scale when the loss is scaled),
    and each replica gets an equal 1/N share: the optimizer's own sum restores the
    clipped total (apply it inside :func:`clipped_already`, so it does not clip again).

    Args:
        optimizer: a Keras optimizer, or a ``LossScaleOptimizer`` around one.
        gradients: one per trainable variable (``None`` where it has none).
        norms_of: ``(indexes of the present gradients, their summed values, loss
            scale) -> {name: norm}``, the norms to log (unscaled); ``"grad_norm"``, the
            global norm, is the one clipping reads (so it is computed once).

    Returns:
        The shares to hand to ``optimizer.apply``, ``norms_of``'s norms of the summed
        gradient before clipping, and the factor the optimizer is to multiply the
        shares by as it applies them, or None. The factor is not None only for an
        optimizer that takes one (``takes_gradient_scale``, as
        :class:`~keras_electra.training.optimizer.AdamW` does, inside its update
        kernel): its shares are left unscaled, saving a pass over every gradient. Hand
        it to :func:`clipped_already`.
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
    """Within: the optimizer applies gradients without clipping them again (to its
    ``global_clipnorm``), for gradients :func:`clip_summed_gradient` clipped, multiplied
    by ``scale`` where that returned one (the optimizer's ``gradient_scale``). A
    trace-time switch: the update traced inside it has no clipping ops."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if scale is not None:
        inner.gradient_scale = scale
    try:
        with internals.unclipped(inner):
            yield
    finally:
        if scale is not None:
            inner.gradient_scale = None


def apply_if(condition: tf.Tensor, apply: Callable[[], object]) -> None:
    """Run ``apply`` (an optimizer update) only where ``condition`` holds, on every replica.

    As Keras' ``LossScaleOptimizer`` does: strategies that update without
    ``merge_call`` (one device, ``MirroredStrategy``, multi-worker) branch in the
    replica context; the others (TPU) branch in the cross-replica context, since
    a branch may not call ``merge_call``. ``condition`` must be the same on
    every replica.
    """
    if internals.strategy_supports_no_merge_call():
        tf.cond(condition, lambda: (apply(), tf.constant(True))[1], lambda: tf.constant(False))
        return

    def cross_replica(distribution, condition):
        tf.cond(
            distribution.experimental_local_results(condition)[0],
            lambda: (distribution.extended.call_for_each_replica(apply), tf.constant(True))[1],
            lambda: tf.constant(False),
        )

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(condition,))


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
    replica's (its replicas agree), else the mean over the replicas, and over the
    workers under a multi-worker strategy (the workers' all-reduce, along the logs'
    axis where they have one: see
    :func:`~keras_electra.training.strategy.prepare_multi_worker_fit`)."""
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


def one_graph_train_function(model) -> Callable | None:
    """``model.fit``'s train function as one ``tf.function``, or None where Keras' own
    is needed (``run_eagerly``, ``jit_compile`` or ``steps_per_execution > 1``).

    Keras traces the step as a ``tf.function`` called from another one (on the
    iterator), so the step's graph is held twice (as its own function and inside
    its caller's library) and instantiated from both. Here the iterator's
    ``get_next`` and the step are one graph. ELECTRA-Small's step has about 17,000
    nodes, and each copy of a graph costs memory whatever the batch. The values,
    and the end of the data (``OutOfRangeError``, which ``fit`` ends the epoch on),
    are Keras'. On its first calls the function also hands the C heap's freed pages
    (the trace's and graph optimization's garbage) back to the kernel before the batch
    is read (:mod:`keras_electra.training.heap`).

    Args:
        model: a compiled Keras model on the TensorFlow backend.
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

    on_iterator = tf.function(lambda iterator: step(read(iterator)), reduce_retracing=True)
    on_data = tf.function(step, reduce_retracing=True)

    def function(iterator):
        if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
            return on_iterator(iterator)
        outputs = None
        for data in iterator:  # train_on_batch: one batch from a generator
            outputs = on_data(data)
        return outputs

    function.on_iterator = on_iterator  # the traced step, for a look at its graph
    function.trim = trim  # the heap trim of the first calls (None where there is none)
    return function


class OneGraphTraining(internals.SymbolicBuildHook):
    """Mixin for a ``keras.Model``: ``fit`` trains through :func:`one_graph_train_function`,
    with the optimizer's variables built before the step is traced.

    Variables made inside the first trace (Keras builds the optimizer lazily, on the
    first ``apply``) make ``tf.function`` trace the whole step a second time without
    them and hold both graphs for the run. Where :func:`one_graph_train_function`
    declines (``run_eagerly``, ``jit_compile``, ``steps_per_execution > 1``), Keras'
    own train function is used.

    Examples:
        >>> class Model(OneGraphTraining, keras.Model): ...  # doctest: +SKIP
    """

    def skip_symbolic_build(self) -> bool:
        # Keras' fit first reduces one input batch across the replicas to build the
        # model symbolically, which a multi-worker strategy cannot do for a dict of
        # tensors (keras-team/keras#20329). A model and optimizer built beforehand
        # need no symbolic build.
        optimizer = getattr(self, "optimizer", None)
        return (
            isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and self.built
            and (optimizer is None or optimizer.built)
        )

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        optimizer = getattr(self, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)
        self.train_function = one_graph_train_function(self)
        if self.train_function is None:
            super().make_train_function(force=force)
        return self.train_function
