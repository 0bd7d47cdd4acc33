"""Every reach into Keras' or TensorFlow's internals, in one module.

The rest of keras_electra uses public APIs only; ``tests/test_import_graph.py`` fails when
another module uses a private name of Keras or TensorFlow: reads, calls, assignments and
overrides of their classes' private attributes (``self._use_weight_decay`` in a Keras
optimizer's subclass included), ``getattr`` with one, ``keras.src`` and
``tensorflow.python`` imports and ``tf.__internal__``. Each reach below says what it does,
why no public API does it, and what breaks if a release moves it. Checked against the
versions in :data:`CHECKED_WITH`; the suite runs every one of them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading

import keras
import tensorflow as tf

from keras_electra.errors import ElectraError

log = logging.getLogger(__name__)

#: The Keras and TensorFlow releases every reach here was checked against.
CHECKED_WITH = {"keras": "3.15.1", "tensorflow": "2.21.0"}


def _moved(what: str) -> RuntimeError:
    return RuntimeError(
        f"Keras {keras.__version__} / TensorFlow {tf.__version__} no longer has {what}, "
        f"which keras_electra {_version()} reaches for (checked with Keras "
        f"{CHECKED_WITH['keras']}, TensorFlow {CHECKED_WITH['tensorflow']}); please report "
        "this, and install the versions it was checked with meanwhile."
    )


def _version() -> str:
    from keras_electra import __version__

    return __version__


# === Variables and layers ===


def stored_value(variable) -> tf.Tensor:
    """A Keras variable's value in its stored dtype (float32 under a mixed policy), read
    where Keras would cast it to the compute dtype (in a layer's ``call``); its gradient
    reaches the variable. Kernels that add a float32 bias read it this way.

    Keras has no public read that skips its autocasting: this reads the variable's
    ``_value``. ``tests/test_attention.py`` fails the day Keras moves it.
    """
    stored = getattr(variable, "_value", variable)
    if not isinstance(stored, (tf.Variable, tf.Tensor)):
        raise _moved("a variable's stored value where keras_electra reads it (_value)")
    return tf.identity(stored)


# === Training ===


def autoconvert_optionals(model: keras.Model, function):
    """``function`` wrapped as Keras wraps its train step: an input that is a
    ``tf.experimental.Optional`` reaches the step as its value or None.

    Keras does this inside its own train function (``_autoconvert_optionals``);
    :func:`keras_electra.training.step.one_graph_train_function` builds its own train
    function and must hand the step what Keras would.
    """
    convert = getattr(model, "_autoconvert_optionals", None)
    if convert is None:
        raise _moved("Trainer._autoconvert_optionals")
    return convert(function)


class SymbolicBuildHook:
    """Mixin for a ``keras.Model``: :meth:`skip_symbolic_build` decides whether ``fit``
    builds the model symbolically from one input batch first.

    Keras' ``fit`` calls its private ``_maybe_symbolic_build``; there is no public
    switch. If Keras renames it, the override is never called, and
    ``tests/test_multi_worker.py`` fails (the build it skips cannot run there).
    """

    def skip_symbolic_build(self) -> bool:
        """True where the model needs no symbolic build (here: never)."""
        return False

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self.skip_symbolic_build():
            return None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)


def keep_messages(error_class: type[Exception]) -> type[Exception]:
    """Marks ``error_class`` so Keras re-raises it from a layer's ``call`` as raised: its
    one sentence, not "Exception encountered when calling ..." with the sentence in
    terminal bold codes and the arguments listed. Keras marks an error it has wrapped with
    ``_keras_call_info_injected`` and re-raises a marked one untouched; there is no public
    switch but ``keras.config.disable_traceback_filtering()``, which is the user's. If
    Keras renames the mark, ``tests/test_python_api.py`` sees the wrapper again."""
    error_class._keras_call_info_injected = True
    return error_class


keep_messages(ElectraError)  # every layer imports this module before it can raise


def strategy_supports_no_merge_call() -> bool:
    """Whether the current strategy updates variables without ``merge_call`` (one device,
    ``MirroredStrategy``, multi-worker; not TPU), so a ``tf.cond`` around an update may
    run in the replica context. Keras' ``LossScaleOptimizer`` asks the same question
    through the same function, which TensorFlow exports under ``tf.__internal__``."""
    return tf.__internal__.distribute.strategy_supports_no_merge_call()


# Optimizer id -> (how many are inside unclipped(), its global_clipnorm before the first).
_UNCLIPPED: dict[int, tuple[int, float | None]] = {}
_UNCLIPPED_LOCK = threading.Lock()


@contextlib.contextmanager
def unclipped(optimizer: keras.optimizers.Optimizer):
    """Within: ``optimizer`` (not a ``LossScaleOptimizer``) does not clip to its
    ``global_clipnorm``. A trace-time switch (the update traced inside has no clipping
    ops): Keras reads the attribute as it builds the update, and has no argument to
    ``apply`` for gradients that were clipped already.

    ``MirroredStrategy`` traces each replica's step in its own thread, and the replicas'
    entries and exits overlap: the first in sets the attribute to None, the last out puts
    the clip back. (Each saving and restoring its own value left it None once a second
    replica had saved the first one's None: every later trace, such as the run's next
    window, applied the gradient unclipped.)"""
    key = id(optimizer)
    with _UNCLIPPED_LOCK:
        inside, clip = _UNCLIPPED.get(key, (0, optimizer.global_clipnorm))
        _UNCLIPPED[key] = (inside + 1, clip)
        optimizer.global_clipnorm = None
    try:
        yield
    finally:
        with _UNCLIPPED_LOCK:
            inside, clip = _UNCLIPPED.pop(key)
            if inside > 1:
                _UNCLIPPED[key] = (inside - 1, clip)
            else:
                optimizer.global_clipnorm = clip


# === Optimizers ===


class OptimizerHooks:
    """Mixin for a Keras optimizer (before it in the bases): two steps of Keras' update
    as public methods to override.

    - :meth:`decay_weights`: the decoupled weight decay Keras applies to every variable
      before the update (its ``_apply_weight_decay``);
    - :meth:`update_variables`: the update of every variable from its gradient (Keras'
      ``_backend_update_step``, which calls ``update_step`` per variable).

    If Keras renames either, the override is never called: the optimizers' tests compare
    their updates with plain formulas and fail.
    """

    def decay_weights(self, variables) -> None:
        """Keras' own decay of ``variables`` (override to decay elsewhere)."""
        super()._apply_weight_decay(variables)

    def update_variables(self, gradients, variables, learning_rate) -> None:
        """Keras' own update (``update_step`` per variable; override to share work)."""
        super()._backend_update_step(gradients, variables, learning_rate)

    def _apply_weight_decay(self, variables):
        self.decay_weights(variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        self.update_variables(grads, trainable_variables, learning_rate)


def variable_index(optimizer: keras.optimizers.Optimizer, variable) -> int:
    """``variable``'s position in the optimizer's list (its slots' index)."""
    index = getattr(optimizer, "_get_variable_index", None)
    if index is None:
        raise _moved("Optimizer._get_variable_index")
    return index(variable)


def adam_slots(optimizer: keras.optimizers.Adam, variable) -> tuple:
    """A Keras Adam(W)'s first and second moment variables of ``variable`` (its
    ``_momentums`` and ``_velocities``: Keras exposes them only through ``variables``,
    in an order it does not document)."""
    index = variable_index(optimizer, variable)
    try:
        return optimizer._momentums[index], optimizer._velocities[index]
    except AttributeError:
        raise _moved("Adam._momentums and Adam._velocities") from None


def uses_weight_decay(optimizer: keras.optimizers.Optimizer, variable) -> bool:
    """Whether the optimizer decays ``variable``: not one ``exclude_from_weight_decay``
    named (Keras' ``_use_weight_decay``, which also reads the name patterns)."""
    decides = getattr(optimizer, "_use_weight_decay", None)
    if decides is None:
        raise _moved("Optimizer._use_weight_decay")
    return decides(variable)


# === Graphs and SavedModels ===


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)  # the first time only


def in_xla_context() -> bool:
    """Whether the graph being traced is compiled by XLA as a whole (``jit_compile``),
    which cannot take a custom op. TensorFlow answers this only privately
    (``control_flow_util.GraphOrParentsInXlaContext``); without it, assume it may be."""
    try:
        from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
    except ImportError:
        _warn_once(
            "This TensorFlow has no tensorflow.python.ops.control_flow_util."
            "GraphOrParentsInXlaContext, so every traced graph keeps the XLA kernels."
        )
        return True
    return GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def write_saved_model_fingerprint(export_dir: str) -> None:
    """Rewrite a SavedModel's ``fingerprint.pb`` after its ``saved_model.pb`` changed
    (TensorFlow uses it for metrics only; there is no public API to write it)."""
    from tensorflow.python.saved_model import fingerprinting_utils

    fingerprinting_utils.write_fingerprint(export_dir)
