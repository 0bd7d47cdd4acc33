"""Checkpoints of a training run: model, optimizer and step, written atomically.

TensorFlow checkpoints are written as ``ckpt-STEP.index`` / ``.data-*`` files
first; only then is the small ``checkpoint`` state file replaced (write to a
temporary name, then rename). A run killed while saving therefore still points
at its previous complete checkpoint.

With several workers every worker saves (saving may read variables through
collective ops), but only the chief writes to the run directory; the others
write to a temporary directory that is deleted at once. Every worker restores
from the chief's checkpoints, so the run directory must be on storage that all
workers share.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import keras
import tensorflow as tf

from keras_electra.errors import ConfigError


class VariablesByPath(tf.Module):
    """Every variable of a Keras model or optimizer, keyed by its unique path.

    Keras 3 keeps sub-layers in its own tracked lists, which TensorFlow's
    object-graph checkpointing does not traverse; keying the underlying
    ``tf.Variable`` objects by path saves each one exactly once, whatever the
    layer structure, and makes checkpoint keys readable
    (``model/variables/discriminator.S.discriminator_encoder...``).
    """

    def __init__(self, variables, strip_root: bool = False):
        super().__init__()
        by_path = {}
        for v in variables:
            if v.name == "seed_generator_state":
                continue  # dropout RNG state: globally numbered, and not a weight
            # An optimizer's paths start with its auto-numbered name ("adam_w_1/...").
            path = v.path.split("/", 1)[-1] if strip_root else v.path
            if path in by_path:
                raise ValueError(f"Two variables share the path '{path}'.")
            by_path[path] = v.value
        self.by_path = by_path


def _checkpoint_keys(path: str, prefix: str) -> set[str]:
    return {
        name
        for name, _ in tf.train.list_variables(path)
        if name.startswith(prefix) and not name.startswith("_CHECKPOINTABLE")
    }


def _optimizer_variables(optimizer) -> dict[str, VariablesByPath]:
    """The optimizer's variables; a loss-scale wrapper's own ones under their own key.

    The wrapped optimizer keeps the key of an unwrapped one, so its slots have the
    same checkpoint names whatever the precision.
    """
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is None:
        return {"optimizer": VariablesByPath(optimizer.variables, strip_root=True)}
    inner_ids = {id(v) for v in inner.variables}
    own = [v for v in optimizer.variables if id(v) not in inner_ids]
    return {
        "optimizer": VariablesByPath(inner.variables, strip_root=True),
        "loss_scale": VariablesByPath(own, strip_root=True),
    }


class RunCheckpoints:
    """Save and restore a model with its optimizer under ``directory``.

    Args:
        directory: where checkpoints live (created if missing).
        model: the model (its variables include the masking random counter).
        optimizer: the optimizer (its variables include the step counter), or None
            to read or write the model alone.
        max_to_keep: how many recent checkpoints to keep.
        chief: False on a non-chief worker of a multi-worker cluster: it reads
            ``directory`` but saves to a throwaway temporary directory.
    """

    def __init__(
        self,
        directory: str | Path,
        model: keras.Model,
        optimizer,
        max_to_keep: int = 3,
        chief: bool = True,
    ):
        self.directory = Path(directory)
        self.model_variables = VariablesByPath(model.variables)
        tracked = {"model": self.model_variables}
        if optimizer is not None:
            tracked.update(_optimizer_variables(optimizer))
        self.checkpoint = tf.train.Checkpoint(**tracked)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(self.directory), max_to_keep=max_to_keep
        )
        self.optimizer = optimizer
        self.chief = chief

    @property
    def latest(self) -> str | None:
        return self.manager.latest_checkpoint

    def restore_latest(self) -> int:
        """Restore the latest checkpoint if there is one; return the restored step.

        The step (batches trained) is the checkpoint's number. Without an optimizer
        (export, fine-tuning) only the model is restored.
        """
        path = self.latest
        if path is None:
            return 0
        expected = set(self.model_variables.by_path)
        stored = len(_checkpoint_keys(path, "model/"))
        try:
            status = self.checkpoint.restore(path).expect_partial()
            status.assert_existing_objects_matched()
            if stored != len(expected):
                raise ValueError(
                    f"the checkpoint holds {stored} model variables, the model has {len(expected)}"
                )
        except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
            detail = str(e).splitlines()[0][:300]
            raise ConfigError(
                f"Checkpoint '{path}' does not match the model configuration ({detail}); "
                "restore the run's original config.json or start a new output directory."
            ) from None
        return int(path.rsplit("-", 1)[-1])

    def save(self, step: int) -> str:
        """Write checkpoint ``step``; return its path (a deleted one on a non-chief worker)."""
        if self.chief:
            return self.manager.save(checkpoint_number=step)
        scratch = tempfile.mkdtemp(prefix="keras-electra-worker-")
        try:
            manager = tf.train.CheckpointManager(self.checkpoint, scratch, max_to_keep=1)
            return manager.save(checkpoint_number=step)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
