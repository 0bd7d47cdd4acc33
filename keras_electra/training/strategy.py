"""Distribution strategies: one device, several GPUs, a TPU, or several workers."""

from __future__ import annotations

import json
import os

import tensorflow as tf

from keras_electra.errors import ConfigError

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "one_device")


def resolve_strategy(name: str = "auto") -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy of a ``--strategy`` value.

    ``auto`` picks a TPU when a cluster resolver finds one, ``MirroredStrategy``
    when there is more than one GPU, and the default (single-device) strategy
    otherwise. The other names ask for that hardware and fail clearly without it.

    Args:
        name: ``auto``, ``tpu``, ``mirrored``, ``multi_worker`` or ``one_device``.

    Raises:
        ConfigError: for an unknown name or when the requested hardware is absent.

    Example:
        >>> resolve_strategy("one_device").num_replicas_in_sync
        1
    """
    if name not in STRATEGIES:
        raise ConfigError(f"Unknown strategy '{name}'; choose one of: {', '.join(STRATEGIES)}.")
    if name == "auto":
        return _auto_strategy()
    if name == "tpu":
        resolver = _tpu_resolver()
        if resolver is None:
            raise ConfigError(
                "--strategy tpu found no TPU; run on a TPU host or use --strategy auto."
            )
        return _tpu_strategy(resolver)
    if name == "mirrored":
        return _mirrored_strategy()
    if name == "multi_worker":
        return _multi_worker_strategy()
    return tf.distribute.OneDeviceStrategy(_first_device())


def _auto_strategy() -> tf.distribute.Strategy:
    resolver = _tpu_resolver()
    if resolver is not None:
        return _tpu_strategy(resolver)
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def _tpu_resolver():
    """A connected TPU cluster resolver, or None when no TPU is reachable."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError):
        return None
    return resolver


def _tpu_strategy(resolver) -> tf.distribute.Strategy:
    return tf.distribute.TPUStrategy(resolver)


def _mirrored_strategy() -> tf.distribute.Strategy:
    """All local GPUs, or (for testing) several logical CPU devices."""
    gpus = tf.config.list_logical_devices("GPU")
    cpus = tf.config.list_logical_devices("CPU")
    devices = gpus if gpus else cpus
    if len(devices) < 2:
        raise ConfigError(
            "--strategy mirrored needs at least two GPUs (found "
            f"{len(gpus)}); use --strategy auto or one_device."
        )
    return tf.distribute.MirroredStrategy([d.name for d in devices])


def _multi_worker_strategy() -> tf.distribute.Strategy:
    if not _tf_config_has_workers():
        raise ConfigError(
            "--strategy multi_worker needs TF_CONFIG naming the cluster's workers and this "
            "task; set it on every worker or use --strategy auto."
        )
    return tf.distribute.MultiWorkerMirroredStrategy()


def _tf_config_has_workers() -> bool:
    try:
        config = json.loads(os.environ.get("TF_CONFIG", "") or "{}")
    except json.JSONDecodeError:
        raise ConfigError("TF_CONFIG is not valid JSON; fix it or unset it.") from None
    return bool(config.get("cluster", {}).get("worker")) and "task" in config


def _first_device() -> str:
    gpus = tf.config.list_logical_devices("GPU")
    return gpus[0].name if gpus else "/cpu:0"
