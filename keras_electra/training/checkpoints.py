"""Checkpoints of a training run: model, optimizer, dropout generators and step.

The ``ckpt-STEP`` files are written before the ``checkpoint`` state file is replaced, so a
run killed while saving keeps its previous checkpoint; a failed save removes its partial
files (docs/reliability.md). Every worker saves, but only the chief into the run directory
(docs/distributed.md).
"""

from __future__ import annotations

import glob
import re
import shutil
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_electra.atomic import write_atomic
from keras_electra.errors import (
    ConfigError,
    StorageError,
    format_bytes,
    free_bytes,
    storage_reason,
)

# Variables of Keras' random seed generators (dropout's).
SEED_STATE = "seed_generator_state"


class VariablesByPath(tf.Module):
    """Every variable of a Keras model or optimizer, keyed by its unique path (TensorFlow's
    checkpointing does not traverse Keras 3's tracked lists)."""

    def __init__(self, variables, strip_root: bool = False):
        super().__init__()
        by_path = {}
        for v in variables:
            if v.name == SEED_STATE:
                continue  # dropout RNG state: globally numbered, and not a weight
            # An optimizer's paths start with its auto-numbered name ("adam_w_1/...").
            path = v.path.split("/", 1)[-1] if strip_root else v.path
            if path in by_path:
                raise ValueError(f"Two variables share the path '{path}'.")
            by_path[path] = v.value
        self.by_path = by_path


class RandomStates(tf.Module):
    """The model's seed-generator states (dropout), keyed ``dropout_000``, ... by their order
    in the model (their paths are numbered per process)."""

    def __init__(self, model: keras.Model):
        super().__init__()
        states = [v for v in model.variables if v.name == SEED_STATE]
        self.by_order = {f"dropout_{i:03d}": v.value for i, v in enumerate(states)}


def _checkpoint_keys(path: str, prefix: str) -> set[str]:
    return {
        name
        for name, _ in tf.train.list_variables(path)
        if name.startswith(prefix) and not name.startswith("_CHECKPOINTABLE")
    }


def latest_checkpoint(directory: str | Path) -> str | None:
    """The latest checkpoint under ``directory``, as its ``checkpoint`` state file names it
    (None when the directory holds no checkpoint).

    Where the state file is missing, unreadable or names a checkpoint that is gone (a run
    killed between writing its first checkpoint and that file, or a file lost), the newest
    complete ``ckpt-N`` there is the latest. This reads quietly: ``RunCheckpoints``, which
    restores from there, says so once and writes the state file again. Before, a run
    started over at step 0 and overwrote the trained checkpoints, and export said nothing
    was trained.

    Raises:
        StorageError: when ``ckpt-N`` files are there but none is complete.
    """
    return _latest(Path(directory))[0]


def _latest(directory: Path) -> tuple[str | None, str | None, list[str]]:
    """The latest checkpoint's path, what is wrong with the state file (None when it names
    a checkpoint that is there) and, when something is, the complete checkpoints' names."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("FATAL")  # TensorFlow logs a state file it cannot use: said below
    try:
        latest = tf.train.latest_checkpoint(str(directory))
        # Read again only when it names none (what is wrong with it is said below).
        named = None if latest is not None else tf.train.get_checkpoint_state(str(directory))
    except (ValueError, tf.errors.OpError):  # an empty state file
        latest = named = None
    finally:
        logger.setLevel(level)
    if latest is not None:
        return latest, None, []
    found = sorted(
        int(match.group(1))
        for file in directory.glob("ckpt-*.index")
        if (match := re.fullmatch(r"ckpt-(\d+)\.index", file.name))
    )
    if not found:
        return None, None, []
    complete = [
        f"ckpt-{step}" for step in found if _missing_files(directory / f"ckpt-{step}") is None
    ]
    if not (directory / "checkpoint").exists():
        problem = "has no 'checkpoint' file naming the latest"
    elif named is None or not named.model_checkpoint_path:
        problem = "has a 'checkpoint' file that is empty or unreadable"
    else:
        name = Path(named.model_checkpoint_path).name
        problem = f"has a 'checkpoint' file naming '{name}', whose files are missing"
    if not complete:
        steps = ", ".join(f"ckpt-{step}" for step in found)
        raise StorageError(
            f"'{directory}' holds checkpoints ({steps}), none with all its files, and {problem}; "
            "restore the files, or start a new output directory."
        )
    return str(directory / complete[-1]), problem, complete


def _restate(directory: Path, write: bool) -> str | None:
    """The latest checkpoint, as ``latest_checkpoint`` finds it; where the state file was
    wrong, one line on stderr says which checkpoint is used, and with ``write`` (a run that
    goes on writing there) the state file is written again to name it."""
    latest, problem, complete = _latest(directory)
    if problem is None:
        return latest
    done = ""
    if write:
        lines = [f'model_checkpoint_path: "{complete[-1]}"']
        lines += [f'all_model_checkpoint_paths: "{name}"' for name in complete]
        try:  # the names relative to the directory, as CheckpointManager writes them
            write_atomic(directory / "checkpoint", "\n".join(lines) + "\n")
            done = "; the file now names it"
        except OSError:  # a read-only copy: read it all the same
            pass
    print(
        f"'{directory}' {problem}: using {complete[-1]}, its newest complete checkpoint{done}.",
        file=sys.stderr,
        flush=True,
    )
    return latest


def stored_layers(path: str) -> set[str]:
    """The top-level layers whose variables the checkpoint at ``path`` holds (the first
    part of each model variable's path: ``discriminator``, ``embedding``, ...)."""
    names = _checkpoint_keys(path, "model/")
    # Keys read "model/by_path/<path, '/' escaped as '.S'>/.ATTRIBUTES/VARIABLE_VALUE".
    return {name.split("/")[2].split(".S")[0] for name in names if name.count("/") >= 2}


def _optimizer_variables(optimizer) -> dict[str, VariablesByPath]:
    """The optimizer's variables (under one key whatever the precision), and a loss-scale
    wrapper's own ones under their own."""
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
        self._found = _restate(self.directory, write=chief)  # a lost state file: said once
        self.model_variables = VariablesByPath(model.variables)
        tracked = {"model": self.model_variables}
        if optimizer is not None:
            tracked.update(_optimizer_variables(optimizer))
            random = RandomStates(model)
            if random.by_order:
                tracked["random"] = random
        self._tracked = tracked
        self.checkpoint = tf.train.Checkpoint(**tracked)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(self.directory), max_to_keep=max_to_keep
        )
        self.max_to_keep = max_to_keep
        self.optimizer = optimizer
        self.chief = chief

    @property
    def latest(self) -> str | None:
        return self.manager.latest_checkpoint or self._found  # found: a state file not written

    def restore_latest(self) -> int:
        """Restore the latest checkpoint if there is one; return its step (0 for none)."""
        path = self.latest
        if path is None:
            return 0
        try:
            shapes = dict(tf.train.list_variables(path))
        except (tf.errors.OpError, IndexError, OSError) as e:
            raise _unreadable(path, e) from None
        keys = {k for k in shapes if not k.startswith("_CHECKPOINTABLE")}
        expected = len(self.model_variables.by_path)
        stored = sum(k.startswith("model/") for k in keys)
        detail = self._shape_mismatch(shapes)
        if detail is not None:  # before restoring: a failed restore floods the log at exit
            raise ConfigError(
                f"Checkpoint '{path}' does not match the model configuration ({detail}); "
                "restore the run's original config.json or start a new output directory."
            )
        checkpoint = self.checkpoint
        if "random" in self._tracked and not any(k.startswith("random/") for k in keys):
            # Written before checkpoints held the dropout generators: restore the rest.
            checkpoint = tf.train.Checkpoint(
                **{k: v for k, v in self._tracked.items() if k != "random"}
            )
        try:
            status = checkpoint.restore(path).expect_partial()
            status.assert_existing_objects_matched()
            if stored != expected:
                raise ValueError(
                    f"the checkpoint holds {stored} model variables, the model has {expected}"
                )
        except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
            detail = _mismatch(str(e))
            raise ConfigError(
                f"Checkpoint '{path}' does not match the model configuration ({detail}); "
                "restore the run's original config.json or start a new output directory."
            ) from None
        except (tf.errors.OpError, IndexError, OSError) as e:  # a file cut short or damaged
            raise _unreadable(path, e) from None
        return _step_of(path)

    def _shape_mismatch(self, shapes: dict[str, list[int]]) -> str | None:
        """The first tracked variable whose shape differs from the checkpoint's, said short.

        TensorFlow raises on it in the middle of a restore, before the restore can be told
        that a partial one is expected: its log then lists every unrestored value (a hundred
        lines or more) when the process exits, after the error.
        """
        for name, module in self._tracked.items():
            for key, variable in getattr(module, "by_path", {}).items():
                escaped = key.replace(".", "..").replace("/", ".S")
                stored = shapes.get(f"{name}/by_path/{escaped}/.ATTRIBUTES/VARIABLE_VALUE")
                if stored is not None and list(stored) != variable.shape.as_list():
                    return (
                        f"'{key}' has shape {tuple(stored)} in it and "
                        f"{tuple(variable.shape.as_list())} in the model"
                    )
        return None

    def save(self, step: int) -> str:
        """Write checkpoint ``step``; return its path (a deleted one on a non-chief worker).

        Raises:
            StorageError: when the write fails; the previous checkpoint stays the
                latest one and this one's partial files are removed.
        """
        if not self.chief:
            scratch = tempfile.mkdtemp(prefix="keras-electra-worker-")
            try:
                manager = tf.train.CheckpointManager(self.checkpoint, scratch, max_to_keep=1)
                return manager.save(checkpoint_number=step)
            except (tf.errors.OpError, OSError) as e:
                raise StorageError(
                    f"Could not write this worker's copy of checkpoint {step} to '{scratch}' "
                    f"({storage_reason(e)}); free space in the temporary directory (TMPDIR)."
                ) from None
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        previous = self.latest
        if previous is not None and not self.directory.is_dir():
            raise StorageError(
                f"The checkpoint directory '{self.directory}' was removed during the run "
                f"(it held step {_step_of(previous)}); put it back and rerun the same command "
                "to resume, or start a new --output."
            )
        try:
            return self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as e:
            self._remove_partial(step, previous)
            message = self._failure(step, previous, e)
            # The manager may have noted the failed checkpoint; read the state file again.
            try:
                self.manager = tf.train.CheckpointManager(
                    self.checkpoint, str(self.directory), max_to_keep=self.max_to_keep
                )
            except (tf.errors.OpError, OSError):
                pass
            raise StorageError(message) from None

    def size_bytes(self) -> int:
        """Bytes of variable data in one checkpoint (the files add a little more)."""
        modules = self._tracked.values()
        tracked = [getattr(m, "by_path", getattr(m, "by_order", {})) for m in modules]
        return sum(int(np.prod(v.shape)) * v.dtype.size for v in tf.nest.flatten(tracked))

    def _failure(self, step: int, previous: str | None, error: BaseException) -> str:
        needed = self.size_bytes()
        free = free_bytes(self.directory)
        space = f"a checkpoint needs about {format_bytes(needed)}"
        if free is not None:
            space += f" and {format_bytes(free)} is free there"
        resume = (
            f"the previous checkpoint (step {_step_of(previous)}) is intact, so rerunning the "
            f"same command resumes from it"
            if previous is not None
            else "no earlier checkpoint exists, so a rerun starts again"
        )
        return (
            f"Could not write checkpoint {step} to '{self.directory}' "
            f"({storage_reason(error)}): {space}; {resume} once the directory is writable "
            "and has room."
        )

    def _remove_partial(self, step: int, previous: str | None) -> None:
        """Delete what a failed save of ``step`` left behind (never a complete checkpoint)."""
        if previous is not None and _step_of(previous) == step:
            return
        for leftover in self.directory.glob(f"ckpt-{step}[._]*"):
            try:
                if leftover.is_dir():
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    leftover.unlink()
            except OSError:
                pass


def check_readable(path: str) -> None:
    """Read every tensor of the checkpoint at ``path`` (each read checks its length and
    checksum), as a dry run's check that a resume can restore it.

    Raises:
        StorageError: a file is missing, cut short or damaged (one sentence naming it).
    """
    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, OSError, ValueError) as e:
        raise _unreadable(path, e) from None


def _step_of(path: str) -> int:
    return int(path.rsplit("-", 1)[-1])


def _unreadable(path: str, error: BaseException) -> StorageError:
    missing = _missing_files(path)
    reason = missing or storage_reason(error)
    return StorageError(
        f"Checkpoint '{path}' cannot be read ({reason}); restore its files, "
        "or edit the 'checkpoint' file beside it to name an earlier one."
    )


def _missing_files(path: str | Path) -> str | None:
    """Which of a checkpoint's files are gone (its ``.index``, a ``.data-*`` shard), said as
    the reason it cannot be read; None when all are there."""
    prefix = Path(path)
    if not prefix.with_name(prefix.name + ".index").exists():
        return f"its file '{prefix.name}.index' is missing"
    shards = list(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*-of-*"))
    if not shards:
        return f"its data files, '{prefix.name}.data-*', are missing"
    total = int(shards[0].name.rsplit("-of-", 1)[-1])
    for shard in range(total):
        name = f"{prefix.name}.data-{shard:05d}-of-{total:05d}"
        if not prefix.with_name(name).exists():
            return f"its file '{name}' is missing"
    return None


def _mismatch(message: str) -> str:
    """What a failed restore says, short: TensorFlow's list of unbound objects (a model
    with more layers than the checkpoint) becomes a count and the first variable's name."""
    unbound = re.match(r"Found (\d+) Python objects that were not bound", message)
    if unbound is None:
        return message.splitlines()[0][:300] if message else "no detail"
    variable = re.search(r"<tf\.Variable '([^']+?)(?::\d+)?'", message)
    example = f", such as '{variable.group(1)}'" if variable else ""
    return f"{unbound.group(1)} of the model's objects are not in it{example}"
