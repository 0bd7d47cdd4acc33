"""Per-step batch hooks for callbacks when ``fit`` runs several steps per execution."""

from __future__ import annotations

import keras


class PerStepCallbacks(keras.callbacks.Callback):
    """Calls the wrapped ``callbacks``' ``on_train_batch_end`` once per training step, where
    ``compile(steps_per_execution=N)`` makes Keras call it once per N (each replayed call
    gets the execution's logs); other hooks pass through.

    Examples:
        >>> counter = type("Count", (keras.callbacks.Callback,), {
        ...     "n": 0, "on_train_batch_end": lambda self, b, logs=None: setattr(
        ...         self, "n", self.n + 1)})()
        >>> hooks = PerStepCallbacks([counter])
        >>> hooks.on_epoch_begin(0)
        >>> hooks.on_train_batch_end(3)  # one execution of 4 steps
        >>> counter.n
        4
    """

    def __init__(self, callbacks: list[keras.callbacks.Callback]):
        super().__init__()
        self.callbacks = list(callbacks)
        self._next_step = 0

    def _each(self, hook: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(*args)

    def set_model(self, model):
        super().set_model(model)
        self._each("set_model", model)

    def set_params(self, params):
        super().set_params(params)
        self._each("set_params", params)

    def on_train_begin(self, logs=None):
        self._each("on_train_begin", logs)

    def on_train_end(self, logs=None):
        self._each("on_train_end", logs)

    def on_epoch_begin(self, epoch, logs=None):
        self._next_step = 0
        self._each("on_epoch_begin", epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._each("on_epoch_end", epoch, logs)

    def on_train_batch_begin(self, batch, logs=None):
        self._each("on_train_batch_begin", batch, logs)

    def on_train_batch_end(self, batch, logs=None):
        for step in range(self._next_step, batch + 1):
            self._each("on_train_batch_end", step, logs)
        self._next_step = batch + 1
