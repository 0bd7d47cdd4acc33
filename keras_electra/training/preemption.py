"""Stopping a run cleanly on SIGTERM or SIGINT (what a user sees: docs/reliability.md).

While :class:`StopRequest` is installed, the signals set a flag that :class:`StopOnSignal`
(or, every worker at one step, :class:`ClusterStopOnSignal`) reads at each step's end; a
second SIGINT stops at once with ``KeyboardInterrupt``.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading

import keras
import tensorflow as tf

from keras_electra.errors import TrainingInterrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """A flag set by SIGTERM or SIGINT while installed (a context manager).

    Until :meth:`arm` is called (when training starts) there is nothing to save,
    so a signal raises :class:`~keras_electra.errors.TrainingInterrupted` at once
    instead of waiting for a long setup (learning a vocabulary, say) to finish.
    Outside the main thread (where Python cannot install signal handlers) it
    installs nothing and the signals keep their usual effect.

    Examples:
        >>> with StopRequest() as stop:
        ...     stop.arm()
        ...     stop.requested
        False
    """

    def __init__(self):
        self.signal_name: str | None = None
        self.armed = False
        self._previous: dict[int, object] = {}

    def arm(self) -> None:
        """From now on a signal only sets the flag. The handlers are installed again: a
        multi-worker cluster's start puts TensorFlow's own SIGTERM handler in place."""
        self.armed = True
        for signum in self._previous:
            signal.signal(signum, self._handle)

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def request(self, signal_name: str = "SIGTERM") -> None:
        """Ask the run to stop, as the signal would."""
        if self.signal_name is None:
            self.signal_name = signal_name

    def _handle(self, signum, frame) -> None:
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: stop now
        self.request(signal.Signals(signum).name)
        if not self.armed:
            raise TrainingInterrupted(
                f"Stopped by {self.signal_name} before training started; nothing was trained "
                "or saved, so the same command starts again.",
                step=0,
                signal_name=self.signal_name,
            )

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


class StopOnSignal(keras.callbacks.Callback):
    """Ends ``fit`` (and so the window, which is then saved) after the step during which a
    stop was requested; place it after the callbacks that count steps."""

    def __init__(self, stop: StopRequest):
        super().__init__()
        self.stop = stop

    @property
    def stopping(self) -> bool:
        return self.stop.requested

    def on_train_batch_end(self, batch, logs=None):
        if self.stopping:
            self.model.stop_training = True

    def close(self) -> None:
        pass


class ClusterStopOnSignal(StopOnSignal):
    """:class:`StopOnSignal` for a multi-worker ``strategy``: TensorFlow's
    ``PreemptionCheckpointHandler`` watches ``stop`` and agrees on a step through the
    cluster's coordination service; every worker ends ``fit`` after it. The handler's own
    checkpoint and exit are replaced by the run's."""

    def __init__(self, stop: StopRequest, strategy: tf.distribute.Strategy):
        super().__init__(stop)
        self._agreed = False
        # The handler insists on a checkpoint of its own to restore; it gets an empty one.
        self._scratch = tempfile.mkdtemp(prefix="keras-electra-preemption-")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), self._scratch, max_to_keep=1)
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=lambda: stop.requested,
            exit_fn=self._stop_here,
            grace_period=0,
            save_fn=lambda *args, **kwargs: None,
        )
        self.handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, manager, termination_config=config
        )

    @property
    def stopping(self) -> bool:
        return self._agreed

    def _stop_here(self) -> None:
        self._agreed = True
        if self.stop.signal_name is None:
            self.stop.request("SIGTERM (on another worker)")

    def on_train_batch_end(self, batch, logs=None):
        self.handler.save_checkpoint_if_preempted()
        super().on_train_batch_end(batch, logs)

    def close(self) -> None:
        """Stop the handler's watcher threads (they block on the coordination service)."""
        handler, self.handler = self.handler, None
        if handler is not None:
            handler.__del__()  # what stops its threads; the handler has no public close
        shutil.rmtree(self._scratch, ignore_errors=True)
