"""Distribution strategies: one device, several GPUs, a TPU, or several workers."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import tensorflow as tf

from keras_electra.errors import ConfigError, parse_json
from keras_electra.settings import STRATEGIES


def resolve_strategy(name: str = "auto") -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy of a ``--strategy`` value.

    ``auto`` picks a TPU when a cluster resolver finds one, ``MirroredStrategy``
    when there is more than one GPU, and the default (single-device) strategy
    otherwise. The other names ask for that hardware and fail clearly without it.

    Args:
        name: ``auto``, ``tpu``, ``mirrored``, ``multi_worker`` or ``one_device``.

    Raises:
        ConfigError: for an unknown name or when the requested hardware is absent.

    Examples:
        >>> resolve_strategy("one_device").num_replicas_in_sync
        1
    """
    check_strategy(name)  # before anything starts the runtime (listing devices)
    resolver, why = _tpu_resolver() if name in ("auto", "tpu") else (None, "")
    if resolver is not None:
        return tf.distribute.TPUStrategy(resolver)
    if name == "tpu":
        raise ConfigError(
            f"--strategy tpu found no TPU ({why}); run on a TPU host or use --strategy auto."
        )
    if name == "auto" and local_tpu_devices():  # else a TPU VM would train on its CPU unsaid
        print(
            f"Warning: this machine has TPU devices ({', '.join(local_tpu_devices()[:4])}) but "
            f"TensorFlow cannot use them ({why}); training runs without them. Install the "
            "TensorFlow build for TPUs (docs/installation.md), or pass --strategy tpu to stop "
            "here instead.",
            file=sys.stderr,
            flush=True,
        )
    if name == "multi_worker":
        return _multi_worker_strategy()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    if name == "mirrored":
        devices = gpus or tf.config.list_logical_devices("CPU")  # logical CPUs: for testing
        if len(devices) < 2:
            raise ConfigError(
                "--strategy mirrored needs at least two GPUs (found "
                f"{len(gpus)}); use --strategy auto or one_device."
            )
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


def check_strategy(name: str) -> None:
    """Check what a ``--strategy`` value needs besides the hardware: a known name and,
    for ``multi_worker``, a ``TF_CONFIG`` naming the cluster's workers and this task.
    :func:`resolve_strategy` checks this first; a dry run checks only this (the
    hardware is often not on the machine that plans the run).

    Raises:
        ConfigError: one sentence naming the fix.

    Examples:
        >>> check_strategy("mirrored")
        >>> check_strategy("gpu")
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: Unknown strategy 'gpu'; choose one of: auto, tpu, \
mirrored, multi_worker, one_device.
    """
    if name not in STRATEGIES:
        raise ConfigError(f"Unknown strategy '{name}'; choose one of: {', '.join(STRATEGIES)}.")
    if name == "multi_worker":
        _cluster_workers()


def _cluster_workers() -> list[str]:
    """The workers ``TF_CONFIG`` names (its chief first, if it names one); raises unless it
    names them and this task among them."""
    return [address for _, address, _ in _cluster_tasks()]


def _cluster_tasks() -> list[tuple[str, str, bool]]:
    """Each task ``TF_CONFIG`` names as (its name, such as ``worker 1``, its address,
    whether it is this process), the chief first; raises unless the cluster names its
    workers and this task among them."""
    config = parse_json(os.environ.get("TF_CONFIG", "") or "{}", "TF_CONFIG", "fix it or unset it")
    config = config if isinstance(config, dict) else {}
    cluster = config.get("cluster") if isinstance(config.get("cluster"), dict) else {}
    workers, task = cluster.get("worker"), config.get("task")
    if not (workers and isinstance(task, dict)):
        raise ConfigError(
            "--strategy multi_worker needs TF_CONFIG naming the cluster's workers and this "
            "task; set it on every worker or use --strategy auto."
        )
    for job in ("chief", "worker"):
        listed = cluster.get(job, [])
        bad = not isinstance(listed, list) or not all(map(_host_port, listed))
        if bad:
            raise ConfigError(
                f"TF_CONFIG's cluster lists its {job} as {json.dumps(listed)[:80]}, not a list "
                'of "HOST:PORT" addresses; write it as ["10.0.0.1:12345", ...] on every worker.'
            )
    # TensorFlow raises a ValueError (a traceback) for a task its cluster does not list.
    jobs = {job: len(cluster[job]) for job in ("chief", "worker") if cluster.get(job)}
    kind, index = task.get("type"), task.get("index")
    if kind not in jobs or not isinstance(index, int) or not 0 <= index < jobs[kind]:
        listed = ", ".join(
            f"{job} 0 to {n - 1}" if n > 1 else f"{job} 0" for job, n in jobs.items()
        )
        raise ConfigError(
            f"TF_CONFIG's task (type {kind!r}, index {index!r}) is not one its cluster lists "
            f"({listed}); give every worker the same cluster and its own task in it."
        )
    return [
        (
            f"{job} {i}" if jobs[job] > 1 or job == "worker" else job,
            address,
            (job, i) == (kind, index),
        )
        for job in ("chief", "worker")
        for i, address in enumerate(cluster.get(job, []))
    ]


def _host_port(address) -> bool:
    """Whether ``address`` is a ``HOST:PORT`` string with a port in 1-65535."""
    if not isinstance(address, str):
        return False
    host, _, port = address.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


JOIN_NOTE_SECONDS = 20.0
"""How long a worker waits for the rest of its cluster before it says which workers do not
answer yet (and again every minute)."""


def _multi_worker_strategy() -> tf.distribute.Strategy:
    """``MultiWorkerMirroredStrategy``, made while a watcher says which workers have not
    joined and lets SIGINT or SIGTERM end the wait: TensorFlow waits for every worker
    without end, and runs no Python signal handler meanwhile. A taken port is one sentence.
    """
    tasks = _cluster_tasks()
    me = next(address for _, address, mine in tasks if mine)
    with _joining([(name, address) for name, address, mine in tasks if not mine]):
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except tf.errors.UnknownError as e:
            if "Could not start gRPC server" not in e.message:
                raise
            raise ConfigError(
                f"This worker could not listen at {me}, its address in TF_CONFIG: another "
                "process holds the port, or the host is not this machine's; stop that "
                "process or give this worker a free port in every worker's TF_CONFIG."
            ) from None


@contextlib.contextmanager
def _joining(others: list[tuple[str, str]]):
    """While the cluster forms, a watcher process (``cluster_watch.py``) says which of
    ``others`` (name, address) do not answer yet, after :data:`JOIN_NOTE_SECONDS` and every
    minute. SIGINT and SIGTERM end the wait as their default does, and the watcher says
    so: TensorFlow holds the interpreter lock while it waits, so no Python handler (nor a
    thread of this process) would run until every worker joined."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    script = Path(__file__).with_name("cluster_watch.py")
    arguments = [f"{name}={address}" for name, address in others]
    watcher = subprocess.Popen(
        [sys.executable, str(script), str(JOIN_NOTE_SECONDS), *arguments], stdin=read
    )
    os.close(read)
    stops = (signal.SIGINT, signal.SIGTERM)
    handlers = {n: signal.getsignal(n) for n in stops if signal.getsignal(n) != signal.SIG_IGN}
    for number in handlers:
        signal.signal(number, signal.SIG_DFL)
    try:
        yield
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        with contextlib.suppress(OSError):
            os.write(write, b"\n")  # the cluster formed, or failed in a sentence of its own
        os.close(write)
        try:
            watcher.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()


def replicas_here(name: str) -> tuple[int | None, str]:
    """How many replicas ``--strategy name`` would split the batch over on this machine,
    found without starting the strategy (no TPU is connected, no cluster joined), and
    what they are; ``None`` where only the run can tell (a TPU, GPUs this machine lacks,
    several workers).

    Examples:
        >>> replicas_here("one_device")[0]
        1
    """
    check_strategy(name)
    gpus = len(tf.config.list_physical_devices("GPU"))
    if name == "one_device":
        return 1, "one device (" + ("the first GPU" if gpus else "the CPU") + ")"
    if name == "tpu":
        return None, "a TPU's cores (the run connects to the TPU when it starts)"
    if name == "multi_worker":
        return None, f"{cluster_size(name)} workers in TF_CONFIG, each with its devices"
    if gpus > 1:
        return gpus, f"MirroredStrategy over {gpus} GPUs"
    if name == "mirrored":
        return None, f"MirroredStrategy over two or more GPUs ({gpus} here)"
    where = "one GPU" if gpus else "the CPU"
    return 1, f"{where} here (a TPU, when the run finds one, takes its place)"


def cluster_size(name: str) -> int:
    """The workers ``--strategy name`` trains on: ``TF_CONFIG``'s for ``multi_worker``,
    else 1."""
    return len(_cluster_workers()) if name == "multi_worker" else 1


TPU_CONNECT_SECONDS = 10.0
"""How long a TPU's gRPC address may take to accept a connection before it counts as
unreachable (TensorFlow's own connection waits without end)."""


def _tpu_resolver() -> tuple[object | None, str]:
    """A connected TPU cluster resolver and ``""``, or None and why no TPU is reachable:
    none found, a name that does not resolve (``TPU_NAME=my-tpu`` off Google Cloud), or a
    ``grpc://`` address that does not answer within :data:`TPU_CONNECT_SECONDS`.

    With no TPU named (``TPU_NAME``, ``TPU_CONFIG``, ...), a TPU attached to this machine
    (a TPU VM, such as Colab's TPU runtime: its ``/dev/accel*`` or ``/dev/vfio`` devices)
    is ``tpu="local"``'s; TensorFlow's resolver asks for a name there ("Please provide a
    TPU Name to connect to.")."""
    try:
        named = any(os.environ.get(v) for v in _TPU_NAMING) or not local_tpu_devices()
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(None if named else "local")
        if not _answers(resolver.master()):
            return None, f"{resolver.master()} does not answer"
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as e:  # OSError: a URLError
        said = str(getattr(e, "message", e)).strip().split(". ")[0].splitlines()
        return None, (said[0][:160] if said else repr(e)).rstrip(".")
    return resolver, ""


# The variables through which TensorFlow's resolver finds a TPU by name or address.
_TPU_NAMING = ("TPU_NAME", "TPU_CONFIG", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")


def local_tpu_devices() -> list[str]:
    """The TPU chips attached to this machine, as the kernel lists them (``/dev/accel0``,
    ... on TPU v2-v4 VMs; ``/dev/vfio/0``, ... on later ones); none elsewhere."""
    found = [str(p) for p in Path("/dev").glob("accel[0-9]*")]
    return found or [str(p) for p in Path("/dev/vfio").glob("[0-9]*")]


def _answers(master: str) -> bool:
    """Whether a TPU's ``grpc://HOST:PORT`` answers as a gRPC server does (other masters,
    such as a local TPU's empty one, are the runtime's to find): it accepts a connection
    and an HTTP/2 greeting within :data:`TPU_CONNECT_SECONDS`. TensorFlow's own connection
    waits without end at an address that does not, or that speaks something else (an
    HTTP/1 server, a closed tunnel's listener)."""
    if not master.startswith("grpc://"):
        return True
    host, _, port = master.removeprefix("grpc://").rpartition(":")
    if not host or not port.isdigit():
        return False
    return speaks_http2(host.strip("[]"), int(port), TPU_CONNECT_SECONDS)


# The HTTP/2 client preface (RFC 9113, 3.4) and an empty SETTINGS frame; a server answers
# with its own SETTINGS frame (a 9-byte header whose type, its 4th byte, is 4).
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def speaks_http2(host: str, port: int, timeout: float) -> bool:
    """Whether the server at ``host:port`` answers a plaintext HTTP/2 greeting, as gRPC
    servers do, within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout) as connection:
            connection.sendall(_HTTP2_HELLO)
            header = b""
            while len(header) < 9:
                chunk = connection.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
    except OSError:  # refused, unreachable, timed out, reset
        return False
    return header[3] == 4


# === Several workers ===


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's files and real checkpoints (False on a
    multi-worker cluster's non-chief workers)."""
    return bool(strategy.extended.should_checkpoint)


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether ``strategy`` spans several worker processes."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return False
    spec = resolver.cluster_spec().as_dict()
    return sum(len(spec.get(job, ())) for job in ("chief", "worker")) > 1


def check_workers_agree(strategy: tf.distribute.Strategy, **values) -> None:
    """Fail clearly when a cluster's workers disagree on any of ``values`` (the step
    reached, a flag's value: numbers, or any JSON value), where collective ops would pair
    up different tensors, hang, or train on in silence; on one worker this does nothing.

    Raises:
        ConfigError: naming the first value on which the workers differ.
    """
    if not is_multi_worker(strategy):
        return
    names = sorted(values)
    local = tf.constant([_comparable(values[n]) for n in names], tf.float64)

    @tf.function
    def gather():
        def every_replica():
            return tf.distribute.get_replica_context().all_gather(local[tf.newaxis], axis=0)

        return strategy.run(every_replica)

    gathered = strategy.experimental_local_results(gather())[0].numpy()
    if (message := disagreement(names, gathered, values)) is not None:
        raise ConfigError(message)


def disagreement(names: list[str], gathered, values: dict) -> str | None:
    """The sentence for the first of ``names`` on which the rows of ``gathered`` (one per
    worker, each name encoded as :func:`_comparable` does) differ, else None; ``values``
    are this worker's. A name with dashes is a flag (``--batch-size``), named as such."""
    for column, name in enumerate(names):
        pairs = {tuple(row) for row in gathered[:, column]}
        if len(pairs) == 1:
            continue
        value = values[name]
        label = name if name.startswith("--") else f"the run's {name}"
        if _is_number(value):
            numbers = sorted(number for number, _ in pairs)
            seen = f"{numbers[0]:g} on one, {numbers[-1]:g} on another"
        else:
            seen = f"this worker has {json.dumps(value, default=str)}"
        return (
            f"The workers disagree on {label} ({seen}); start every worker with the same "
            "arguments and put the run directory on storage they all share."
        )
    return None


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _comparable(value) -> tuple[float, float]:
    """Two float64s that two workers share exactly when their values are equal: the value
    itself when it is a number (for the message), and a checksum of its JSON (3 and "3",
    or 2**60 and 2**60 + 1, differ there)."""
    number = float(value) if _is_number(value) else 0.0
    text = json.dumps(value, sort_keys=True, default=str).encode("utf-8")
    return number, float(zlib.crc32(text))


def prepare_multi_worker_fit(model) -> None:
    """Give a compiled, built ``model``'s step logs the axis that Keras' own train function
    reduces them along under ``MultiWorkerMirroredStrategy`` (scalars fail:
    keras-team/keras#20585); callbacks see the same values as on one device."""
    keras_step = model.train_step

    def train_step(data):
        return {name: tf.reshape(value, [1]) for name, value in keras_step(data).items()}

    model.train_step = train_step
