"""Checkpoints of a training run: model, optimizer and step, written atomically.

TensorFlow checkpoints are written as ``ckpt-STEP.index`` / ``.data-*`` files
first; only then is the small ``checkpoint`` state file replaced (write to a
temporary name, then rename). A run killed while saving therefore still points
at its previous complete checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import keras
import tensorflow as tf

from keras_electra.errors import ConfigError


class RunCheckpoints:
    """Save and restore a model with its optimizer under ``directory``.

    Args:
        directory: where checkpoints live (created if missing).
        model: the model (its variables include the masking random counter).
        optimizer: the optimizer (its variables include the step counter).
        max_to_keep: how many recent checkpoints to keep.
    """

    def __init__(self, directory: str | Path, model: keras.Model, optimizer, max_to_keep: int = 3):
        self.directory = Path(directory)
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(self.directory), max_to_keep=max_to_keep
        )
        self.optimizer = optimizer

    @property
    def latest(self) -> str | None:
        return self.manager.latest_checkpoint

    def restore_latest(self) -> int:
        """Restore the latest checkpoint if there is one; return the restored step."""
        path = self.latest
        if path is None:
            return 0
        try:
            self.checkpoint.restore(path).expect_partial()
        except (ValueError, tf.errors.InvalidArgumentError) as e:
            detail = str(e).splitlines()[0]
            raise ConfigError(
                f"Checkpoint '{path}' does not match the model configuration ({detail}); "
                "restore the run's original config.json or start a new output directory."
            ) from None
        return int(self.optimizer.iterations.numpy())

    def save(self, step: int) -> str:
        return self.manager.save(checkpoint_number=step)
