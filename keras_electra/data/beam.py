"""``keras-electra prepare`` as an Apache Beam pipeline: all local cores, or any runner.

Each shard (:func:`~keras_electra.data.tfrecords.plan_shards`) is one element, written by
:meth:`~keras_electra.data.tfrecords.WritingJob.write` on whichever worker gets it, so the
output is the in-process writer's; :func:`count_words_beam` counts words with a Beam combine.
Without ``--runner``, the DirectRunner on every local core; other runners and their
options: docs/pretraining.md, "Preparing a large corpus".
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO, Any

from keras_electra.data.files import PathsLike, is_remote
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.data.vocab import ticking
from keras_electra.errors import ConfigError

INSTALL_HINT = 'pip install "keras-electra[beam]"'


def beam_available() -> bool:
    """Whether Apache Beam is installed (the ``beam`` extra).

    Examples:
        >>> isinstance(beam_available(), bool)
        True
    """
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # Beam's import warns about Google Cloud clients it lacks
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        return False
    finally:
        root.setLevel(level)
    return True


def pipeline_options(
    args: Sequence[str] = (), num_workers: int | None = None, paths: Sequence[str] = ()
):
    """Beam ``PipelineOptions`` from command-line style ``args``; without ``--runner``, the
    DirectRunner on ``num_workers`` local processes (default: every core).

    Returns:
        ``(options, described)``: the options and the dict ``metadata.json`` records (the
        DirectRunner's options only where it runs).

    Raises:
        ConfigError: an unknown option or runner, ``num_workers`` with another runner
            than the DirectRunner (which sizes its job with its own options), or Dataflow
            without its required options or with one of ``paths`` (the corpus and the
            output) on this machine, where its workers cannot reach it.
    """
    if not beam_available():
        shown = f" ({' '.join(args)[:60]})" if args else ""
        raise ConfigError(
            f"Apache Beam pipeline options{shown} need the beam extra; install it with "
            f"`{INSTALL_HINT}`, or leave them out to prepare in this process."
        )
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(args)
    given = PipelineOptions(args)
    unknown = set(given.get_all_options(retain_unknown_options=True)) - set(given.get_all_options())
    if unknown:
        first = sorted(unknown)[0]  # as Beam keys it: dashes read as underscores
        spelled = [a.partition("=")[0] for a in args if a.startswith("--")]
        shown = next((n for n in spelled if n[2:].replace("-", "_") == first), f"--{first}")
        raise ConfigError(
            f"Unknown option {shown}; prepare's own flags are listed by "
            "`keras-electra prepare --help`, and any other must be an Apache Beam "
            "pipeline option (--runner, --project, --temp_location, ...)."
        )
    runner = given.get_all_options().get("runner")
    if runner is not None:
        check_runner(runner)
    direct = runner is None or _runner_kind(runner) in _DIRECT
    if num_workers is not None and not direct:
        raise ConfigError(
            f"--workers sets the local DirectRunner's processes, not {runner}'s; leave it out "
            "and size the job with the runner's own options (Dataflow: --num_workers, "
            "--max_num_workers)."
        )
    if runner is not None and _runner_kind(runner) == "dataflow":
        _check_dataflow(given.get_all_options(), paths)
    if runner is None:
        args = ["--runner=DirectRunner", "--default_sdk_harness_log_level=WARNING", *args]
    if direct and "direct_num_workers" not in _given(args):
        workers = num_workers or os.cpu_count() or 1
        mode = "multi_processing" if workers > 1 else "in_memory"
        args = [*args, f"--direct_num_workers={workers}"]
        if "direct_running_mode" not in _given(args):
            args.append(f"--direct_running_mode={mode}")
    options = PipelineOptions(args)
    shown = {
        k: v
        for k, v in options.get_all_options().items()
        if k in _RECORDED_OPTIONS and v and (direct or not k.startswith("direct_"))
    }
    return options, shown


def _check_dataflow(options: dict[str, Any], paths: Sequence[str] = ()) -> None:
    """Refuse Dataflow options without what every Dataflow job needs (a project, a region
    and a ``gs://`` temporary location), as the run would once the pipeline is made, and
    ``paths`` on this machine, which Dataflow's workers cannot read or write.

    Examples:
        >>> _check_dataflow({"project": "p", "region": "r", "temp_location": "gs://b/t"})
        >>> _check_dataflow({"project": "p", "temp_location": "/tmp"})
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: --runner DataflowRunner needs --region and a gs:// \
--temp_location (not '/tmp'); pass them as in docs/pretraining.md, "Preparing a large corpus".
    """
    missing = [f"--{name}" for name in ("project", "region") if not options.get(name)]
    if "--region" in missing and os.environ.get("CLOUDSDK_COMPUTE_REGION"):
        missing.remove("--region")  # gcloud's default region, which Beam reads
    temp = options.get("temp_location") or options.get("staging_location")
    if not (temp or "").startswith("gs://"):
        missing.append(f"a gs:// --temp_location (not '{temp}')" if temp else "--temp_location")
    if missing:
        listed = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        raise ConfigError(
            f"--runner DataflowRunner needs {listed}; pass them as in docs/pretraining.md, "
            '"Preparing a large corpus".'
        )
    if local := [p for p in paths if not is_remote(p)]:
        raise ConfigError(
            f"--runner DataflowRunner runs on Google Cloud workers, which cannot reach "
            f"'{local[0]}' on this machine; pass gs:// paths for --corpus and --output."
        )


def _runner_kind(runner: str) -> str:
    """``runner``'s name as Beam's spellings share it: ``"direct"`` for DirectRunner,
    ``"dataflow"`` for ``apache_beam.runners.DataflowRunner`` and so on."""
    return runner.rpartition(".")[2].lower().removesuffix("runner")


# The names of Beam's local DirectRunner.
_DIRECT = ("direct", "bundlebaseddirect", "switchingdirect")


def _given(args: Sequence[str]) -> set[str]:
    """The option names in command-line style ``args`` (``--name=value`` or ``--name``)."""
    return {a[2:].partition("=")[0] for a in args if a.startswith("--")}


def check_runner(name: str) -> None:
    """Refuse a ``--runner`` that Beam would not find when the pipeline is made, by Beam's
    own rule: one of its runners' names (in any case, ``Runner`` optional) or the dotted
    path of a ``PipelineRunner`` class. A runner Beam knows passes without being imported
    or reached (its service and credentials are the run's business); another dotted path
    must import.

    Raises:
        ConfigError: a name that is neither (one sentence naming the flag and the runners).
    """
    from apache_beam.options.pipeline_options import StandardOptions

    known = StandardOptions.KNOWN_RUNNER_NAMES
    names = {n.lower() for n in known} | {p.lower() for p in StandardOptions.ALL_KNOWN_RUNNERS}
    if name.lower() in names or name.lower() + "runner" in names:
        return
    module, _, attribute = name.rpartition(".")
    if module:
        try:
            if hasattr(importlib.import_module(module), attribute):
                return
        except ImportError:
            pass
    raise ConfigError(
        f"--runner {name} is not an Apache Beam runner; pass one of {', '.join(known)}, or "
        "the dotted path of a PipelineRunner class."
    )


# The options metadata.json records (not credentials, not machine-specific paths).
_RECORDED_OPTIONS = (
    "runner",
    "direct_num_workers",
    "direct_running_mode",
    "project",
    "region",
    "num_workers",
    "max_num_workers",
    "machine_type",
    "job_name",
)


@contextlib.contextmanager
def quiet_local_workers(described: dict[str, Any]) -> Iterator[IO[str]]:
    """While a local multi-process pipeline runs, its worker processes' start-up logging
    (each worker inherits this process's stderr and prints Beam's and TensorFlow's
    warnings there, between the command's own lines) goes to a log file; yields the real
    stderr, for the progress bar. Other runners print nothing of the kind: unchanged.

    Examples:
        >>> import subprocess, sys
        >>> with quiet_local_workers({"direct_running_mode": "multi_processing"}) as err:
        ...     _ = subprocess.run([sys.executable, "-c", "print('noise', file=sys.stderr)"])
    """
    if described.get("direct_running_mode") != "multi_processing":
        yield sys.stderr
        return
    sys.stderr.flush()
    saved = os.dup(2)
    log = tempfile.NamedTemporaryFile(prefix="keras-electra-beam-", suffix=".log", delete=False)
    os.dup2(log.fileno(), 2)
    log.close()
    real = os.fdopen(os.dup(saved), "w", buffering=1)
    try:
        yield real
    except BaseException as error:
        error.add_note(f"The Beam workers' log: {log.name}")
        raise
    else:
        os.remove(log.name)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        real.close()


class _WriteShard:
    """A Beam ``DoFn``'s work: build the tokenizer once per worker, write a shard."""

    def __init__(self, job, vocab: list[str], lowercase: bool):
        self.job, self.vocab, self.lowercase = job, vocab, lowercase
        self.tokenizer = None

    def __call__(self, plan) -> tuple[int, int]:
        if self.tokenizer is None:
            self.tokenizer = ElectraTokenizer(self.vocab, lowercase=self.lowercase)
        return plan.index, self.job.write(plan, self.tokenizer)


def _finish(counts: list[tuple[int, int]], job, described) -> None:
    job.finish([count for _, count in sorted(counts)], described)


def write_tfrecords_beam(
    files: PathsLike,
    tokenizer: ElectraTokenizer,
    output_dir: str,
    *,
    max_seq_length: int,
    num_shards: int = 8,
    seed: int = 0,
    pipeline_args: Sequence[str] = (),
    num_workers: int | None = None,
    progress: bool = True,
) -> list[str]:
    """:func:`~keras_electra.data.tfrecords.write_pretraining_tfrecords` as a Beam pipeline.

    The shards and their examples are the in-process writer's, byte for byte; ``files``,
    ``tokenizer``, ``output_dir``, ``max_seq_length`` and ``seed`` are its own (paths
    local or ``gs://``).

    Args:
        num_shards: number of TFRecord files (each one worker's unit of work).
        pipeline_args: Beam options (``["--runner", "DataflowRunner", ...]``).
        num_workers: local worker processes when no ``--runner`` is given (default:
            every core).
        progress: a progress bar of finished shards (a local output directory).

    Returns:
        The shard paths, in order.

    Raises:
        ConfigError: Beam is not installed.
        InputDataError: a corpus file is missing, not text, or the corpus has no text.
    """
    import apache_beam as beam

    from keras_electra.data.tfrecords import start_writing

    options, described = pipeline_options(pipeline_args, num_workers)
    job = start_writing(files, tokenizer, output_dir, max_seq_length, num_shards, seed)
    write = _WriteShard(job, tokenizer.vocab, tokenizer.lowercase)
    bar = (job.paths, "Packing", " shards") if progress else None
    with _pipeline(options, described, job.plans, "Shards", bar) as spread:
        _ = (
            spread
            | "Pack and write" >> beam.Map(write)
            | "Counts" >> beam.combiners.ToList()
            | "Metadata" >> beam.Map(_finish, job, described)
        )
    return job.paths


@contextlib.contextmanager
def _runner_errors(options) -> Iterator[None]:
    """A runner other than the local DirectRunner that cannot start here (its extra not
    installed, its job server or service unreachable) as one sentence, not Beam's
    traceback."""
    runner = options.get_all_options().get("runner") or "DirectRunner"
    if _runner_kind(runner) in _DIRECT or "." in runner:
        yield
        return
    try:
        yield
    except (ImportError, RuntimeError, ValueError) as e:  # ValueError: its options' checks
        reason = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        reason = (reason or type(e).__name__)[:300]
        raise ConfigError(
            f"The Beam runner {runner} could not run the pipeline ({reason}); install what it "
            'needs (Dataflow: pip install "apache-beam[gcp]"), check that its service or job '
            "server is reachable, or leave --runner out to run here."
        ) from None


@contextlib.contextmanager
def _pipeline(
    options, described, elements: list, name: str, bar: tuple[list[str], str, str] | None
) -> Iterator[Any]:
    """A Beam pipeline, run when the block ends, of ``elements`` spread over the workers
    (the block gets them as a ``PCollection`` to apply the work to): local workers quiet
    (:func:`quiet_local_workers`), a runner that cannot start one sentence
    (:func:`_runner_errors`), and while it runs a progress bar ``(paths, desc, unit)`` of
    the files that exist (each written when a unit of work ends: polled, so any runner can
    write them); none for ``None`` or remote paths."""
    import apache_beam as beam

    with (
        quiet_local_workers(described) as stderr,
        _watching(bar, stderr),
        _runner_errors(options),
        beam.Pipeline(options=options) as pipeline,
    ):
        yield pipeline | name >> beam.Create(elements) | "Spread" >> beam.Reshuffle()


@contextlib.contextmanager
def _watching(bar: tuple[list[str], str, str] | None, stderr: IO[str]) -> Iterator[None]:
    if bar is None or any(map(is_remote, bar[0])):
        yield
        return
    from tqdm import tqdm

    paths, desc, unit = bar
    with tqdm(total=len(paths), unit=unit, desc=desc, file=stderr) as shown:

        def update() -> None:
            shown.update(sum(os.path.exists(p) for p in paths) - shown.n)

        update()
        try:
            with ticking(update):
                yield
        finally:
            update()


# --- word counts for the vocabulary learner ------------------------------------------------


def _count_piece(plan, lowercase: bool, markers: dict[int, str]) -> list[tuple[str, int]]:
    import tensorflow as tf

    from keras_electra.data.tfrecords import read_lines
    from keras_electra.data.vocab import _decoded, count_lines

    counts: dict[bytes, int] = {}
    for path, start, end in plan.pieces:
        for lines, _ in read_lines(path, start, end):
            count_lines(lines, lowercase, counts)
    with tf.io.gfile.GFile(markers[plan.index], "w") as f:  # for the progress bar
        f.write("")
    return list(_decoded(counts).items())


def count_words_beam(
    files: PathsLike,
    lowercase: bool = True,
    *,
    temp_dir: str,
    pipeline_args: Sequence[str] = (),
    num_workers: int | None = None,
    progress: bool = True,
) -> dict[str, int]:
    """A corpus's word counts (as :func:`~keras_electra.data.vocab.count_words` counts
    them) from a Beam pipeline: pieces of the corpus counted in parallel and summed by a
    combine; the counts pass through ``temp_dir`` (local or ``gs://``) to the caller.
    ``progress``: a progress bar of the pieces counted (a local ``temp_dir``).

    Raises:
        ConfigError: Beam is not installed.
        InputDataError: a corpus file is missing or not text.
    """
    import apache_beam as beam
    import tensorflow as tf

    from keras_electra.data.files import check_text_files, file_size, resolve_corpus_files
    from keras_electra.data.tfrecords import plan_shards

    options, described = pipeline_options(pipeline_args, num_workers)
    paths = resolve_corpus_files(files)
    check_text_files(paths)
    workers = num_workers or os.cpu_count() or 1
    size = sum(map(file_size, paths))
    pieces = plan_shards(paths, max(4 * workers, size // (64 << 20) + 1))
    prefix = os.path.join(temp_dir, "word-counts")
    counted = os.path.join(temp_dir, "counted")  # a file per piece done, for the bar
    markers = {p.index: os.path.join(counted, f"piece-{p.index:05d}") for p in pieces}
    # A stopped count's files: its markers would move the bar, and its counts (under other
    # shard names) would be added to this one's.
    if tf.io.gfile.exists(counted):
        tf.io.gfile.rmtree(counted)
    for name in tf.io.gfile.glob(prefix + "*.jsonl"):
        tf.io.gfile.remove(name)
    tf.io.gfile.makedirs(counted)
    bar = (list(markers.values()), "Counting words", " pieces") if progress else None
    with _pipeline(options, described, pieces, "Pieces", bar) as spread:
        _ = (
            spread
            | "Count" >> beam.FlatMap(_count_piece, lowercase, markers)
            | "Sum" >> beam.CombinePerKey(sum)
            | "Lines" >> beam.Map(lambda item: json.dumps(item, ensure_ascii=False))
            | "Write" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl")
        )
    counts: dict[str, int] = {}
    for name in tf.io.gfile.glob(prefix + "*.jsonl"):
        with tf.io.gfile.GFile(name, "r") as f:
            counts.update(json.loads(line) for line in f)  # [word, count] lines
        tf.io.gfile.remove(name)
    tf.io.gfile.rmtree(counted)
    return counts
