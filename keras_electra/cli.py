"""The ``keras-electra`` command: parses flags and calls the library.

No logic lives only here: every subcommand is a thin wrapper over a library
function that the tests call too. Errors a user can cause print one sentence
and exit with status 2.

Exit statuses: 0 done; 2 an error a user can fix (one sentence on stderr,
including a failed write: no space, permissions, a removed directory); 75
(``INTERRUPTED_EXIT_CODE``) ``pretrain`` or ``finetune`` stopped by SIGTERM or
SIGINT after saving a checkpoint at the step reached: run the same command again
to resume there; 130 interrupted before anything could be saved (a second Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import sys
import threading
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# gRPC's core logs to stderr (a failed TLS handshake's "Handshake failed with error
# SSL_ERROR_SSL ..."; an unusable key's "Invalid private key") beside the one sentence the
# command prints; read once, when grpc loads. GRPC_VERBOSITY=INFO shows them again.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from keras_electra import __version__, errors  # noqa: E402 - plain Python
from keras_electra.config import PRESETS  # noqa: E402 - plain Python
from keras_electra.limits import MAX_BATCH_SIZE  # noqa: E402 - plain Python and numpy
from keras_electra.settings import (  # noqa: E402 - plain Python
    TASKS,
    FinetuneOptions,
    PrepareSettings,
    PretrainSettings,
    add_arguments,
    default_note,
    from_arguments,
)

PRESET_NAMES = tuple(PRESETS)

COMMANDS: dict[str, tuple] = {}
"""The subcommands in the order ``--help`` lists them: name -> (help, description, flags,
the function that runs it); :func:`command` fills it in, :func:`build_parser` reads it."""


def command(name: str, help: str, description: str, *flags):  # noqa: A002 - argparse's word
    """Register the function it decorates as ``keras-electra NAME``. A flag is
    ``flag(*names, **keywords)`` (``add_argument``'s arguments), a settings class (one flag
    per field: :func:`~keras_electra.settings.add_arguments`), or a list of flags of which
    exactly one must be given."""

    def register(run):
        COMMANDS[name] = (help, description, flags, run)
        return run

    return register


def flag(*names: str, **keywords) -> tuple[tuple[str, ...], dict]:
    if names[0] == "--output":  # "" would be the current folder: a run written into it
        keywords.setdefault("type", _given_path)
    return names, keywords


def _given_path(value: str) -> str:
    """An ``--output`` path, refused when empty (argparse says which flag)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("it is empty; pass the path to write")
    return value


@command(
    "pretrain",
    "pretrain an ELECTRA generator + discriminator on text files",
    "Pretrain ELECTRA on plain-text files (one sentence per line, a blank line between "
    "documents) or TFRecords from `keras-electra prepare`. Run again with the same --output "
    "to resume from the latest checkpoint.",
    flag("--output", required=True, metavar="RUN_DIR", help="run directory"),
    PretrainSettings,  # --batch-size for batch_size, and so on
    flag(
        "--sample",
        metavar="TEXT",
        action="append",
        help="after training, show the discriminator's scores for this sentence",
    ),
)
def _run_pretrain(args: argparse.Namespace) -> None:
    from keras_electra.pretraining.run import pretrain

    if args.sample and args.objective == "mlm":  # before the run: it would train, then ignore it
        raise errors.ConfigError(
            "--sample shows the discriminator's per-token scores, and --objective mlm trains "
            "no discriminator head; leave --sample out."
        )
    result = pretrain(args.corpus, args.output, settings=from_arguments(args, PretrainSettings))
    if args.dry_run:
        print(result.describe())
        return
    print(pretrain_summary(result))
    samples = pretrain_samples(result, args.sample or [])
    if samples:
        print(samples)


def pretrain_samples(result, texts: list[str]) -> str:
    """What ``pretrain --sample`` prints after the run: the discriminator's per-token
    scores of ``texts`` (an Electric model's energies and sentence scores), on the chief
    only ("" elsewhere: a cluster's workers hold the same model, and the chief speaks for
    it)."""
    from keras_electra.scoring import format_scores, score_sentences, score_texts

    if not texts or not result.chief:
        return ""
    model, tokenizer = result.model, result.tokenizer
    if model.objective == "electric":
        lines = ["\nDiscriminator: each token's energy (how badly it fits), the sentence's score"]
        for text, (tokens, score) in zip(
            texts, score_sentences(model, tokenizer, texts), strict=True
        ):
            shown = " ".join(f"{token}({energy:.2f})" for token, energy in tokens)
            lines.append(f"{text} -> sentence_score {score:.3f}: {shown}")
        return "\n".join(lines)
    if model.token_head is not None:  # a replaced-token head
        scores = score_texts(model, tokenizer, texts)
        return "\nDiscriminator: probability that each token was replaced\n" + format_scores(
            scores, color=sys.stdout.isatty()
        )
    # A registered objective without a per-token head.
    return f"\n--sample: the {model.objective} objective scores no tokens; nothing to show."


def pretrain_summary(result) -> str:
    """What ``pretrain`` prints when its run ends: the chief's run directory, its last
    window and the commands that take it next; a multi-worker cluster's other workers
    wrote no run directory, and say only that they finished."""
    run_dir = result.run_dir
    if not result.chief:
        return f"\nWorker finished at step {result.step}; the chief wrote the run to {run_dir}."
    lines = [f"\nRun directory: {run_dir}  (step {result.step})"]
    if metrics := result.final_metrics:
        shown = ", ".join(
            f"{k}={v:.4g}" for k, v in metrics.items() if isinstance(v, float | int) and k != "step"
        )
        lines.append(f"Last window: {shown}")
    lines.append(
        f"Next: keras-electra report {run_dir} (its curves and health), keras-electra export "
        f"--run {run_dir} --output saved_models/NAME (to serve it), or keras-electra finetune "
        f"--run {run_dir} --task TASK ... (docs/finetuning.md)"
    )
    return "\n".join(lines)


@command(
    "prepare",
    "tokenize and pack a corpus into sharded TFRecords",
    "Write pretraining examples (token ids, padding mask, segment ids) as sharded "
    "TFRecords, for corpora too large to tokenize on the fly. With the beam extra "
    '(pip install "keras-electra[beam]") it runs as an Apache Beam pipeline on every local '
    "core for a large corpus on a larger machine (see --workers), in this process "
    "otherwise; any flag not listed here is a Beam pipeline option "
    "(--runner DataflowRunner --project P --region R --temp_location gs://B/tmp).",
    flag("--output", required=True, metavar="DIR", help="where the shards and vocab.txt go"),
    PrepareSettings,
)
def _run_prepare(args: argparse.Namespace) -> None:
    import tensorflow as tf

    from keras_electra.data.prepare import prepare

    settings = from_arguments(args, PrepareSettings, beam_options=args.beam_options)
    try:
        with _stopped_within(PREPARE_STOP_SECONDS, "prepare"):
            described = prepare(args.corpus, args.output, settings=settings).describe()
    except tf.errors.OpError as e:  # TensorFlow's file system: a full disk, gs:// unreachable
        remote = any("://" in str(path) for path in [args.output, *args.corpus])
        remedy = errors.storage_remedy(e, args.output)
        if remote:
            remedy = "check the paths, the network and your credentials for the remote ones"
        raise errors.StorageError(
            f"Could not read the corpus or write '{args.output}' ({errors.storage_reason(e)}); "
            f"{remedy}, then run the same command again: it keeps the shards it finished."
        ) from None
    print(described)


PREPARE_STOP_SECONDS = 20.0
"""Longest a stopped ``prepare`` takes to end: a local Beam pipeline's runner could wait
on worker processes the signal had already ended (in about one Ctrl-C of ten)."""


def _descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (Beam's workers and their shells), from ``/proc``; none
    where there is no ``/proc``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:  # it ended meanwhile
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


@contextlib.contextmanager
def _stopped_within(seconds: float, command: str):
    """SIGINT or SIGTERM stops ``command``: the worker processes it started end at once
    (a SIGTERM sent to this process alone left Beam's running for seconds), the signal is
    raised as usual (KeyboardInterrupt; SIGTERM as a stop, exit 75), and if the command has
    not ended ``seconds`` later (a runner waiting on the ended workers), it says so and
    exits all the same. A signal this process ignores (a background job's SIGINT) stays
    ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stderr = os.dup(2)  # the terminal's: a local pipeline sends fd 2 to its workers' log
    said = {}  # the line the timer writes; emptied once main() is to write it

    def stop(signum, frame):
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        interrupt = signum == signal.SIGINT
        message = INTERRUPTED if interrupt else f"{_STOPPED} ({command} keeps what it finished)."
        status = 130 if interrupt else errors.INTERRUPTED_EXIT_CODE
        said["line"] = f"keras-electra {command}: {message}\n".encode()
        timer = threading.Timer(seconds, _exit_now, args=(stderr, said, status))
        timer.daemon = True
        timer.start()
        if interrupt:
            raise KeyboardInterrupt
        raise errors.TrainingInterrupted(message, step=0, signal_name="SIGTERM")

    numbers = [n for n in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(n) != signal.SIG_IGN]
    previous = {n: signal.signal(n, stop) for n in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if said:  # the timer may yet end a shutdown stuck on the pipeline's threads
            said["line"] = b""  # main() says it
        else:
            os.close(stderr)


_STOPPED = "Stopped by SIGTERM; run the same command again"


def _exit_now(stderr: int, said: dict, status: int) -> None:
    """The end of a stop the command did not finish in time: its sentence, then exit."""
    with contextlib.suppress(OSError):
        os.write(stderr, said["line"])
    os._exit(status)


@command(
    "export",
    "export a run as a TF Serving SavedModel with an in-graph tokenizer",
    "Write saved_models/NAME/VERSION/ with warmup requests; TF Serving's default policy "
    "loads the highest version (serving/models.config lists versions instead). A "
    "pretraining run (or converted directory) exports replaced-token scores "
    "(serving_default, score_pair), an Electric run (--objective electric) per-token "
    "energies and a sentence score; a fine-tuned directory exports its task: "
    "classify/regress (serving_default plus classify/regress methods), tag (per-word tag "
    "probabilities) or qa (answer span and start/end logits).",
    flag(
        "--run",
        required=True,
        metavar="RUN_DIR",
        help="a pretraining run, converted or fine-tuned directory",
    ),
    flag("--output", required=True, metavar="DIR", help="e.g. saved_models/electra"),
    flag("--version", type=int, help="version number (default: next free)"),
    flag("--max-length", type=int, help="fixed sequence length (default: the run's)"),
)
def _run_export(args: argparse.Namespace) -> None:
    from keras_electra.export import export

    path = export(args.run, args.output, version=args.version, max_length=args.max_length)
    print(f"Exported {path}")


def _seconds(text: str) -> float:
    """``--timeout``'s value: a positive, finite number of seconds (0 or less timed every
    call out at once, in gRPC's or the socket's words)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a positive number of seconds (such as 10)"
        )
    return seconds


# Where ``score`` and ``rerank`` get their answers: an export in this process or a server.
SERVED_BY = (
    [
        flag("--model", metavar="DIR", help="saved_models/NAME or a version folder"),
        flag(
            "--server",
            metavar="ADDRESS",
            help="TF Serving: HOST:PORT for gRPC, or an http:// or https:// URL for REST",
        ),
    ],
    flag("--model-name", help="the model's name on the server (default: electra)"),
    flag(
        "--model-version",
        type=int,
        metavar="N",
        help="a version the server has loaded (default: the latest it serves)",
    ),
    flag("--version-label", metavar="LABEL", help="or a version label it has, such as stable"),
    flag(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="seconds per call to the server, a positive number (default: 10)",
    ),
    flag(
        "--tls",
        action="store_true",
        help="gRPC over TLS (the system's CAs); an https:// URL is TLS already, an http:// one "
        "refuses it",
    ),
    flag(
        "--root-certificates",
        metavar="FILE",
        help="the CA that signed the server's certificate (PEM); implies TLS",
    ),
    flag(
        "--client-certificate", metavar="FILE", help="mutual TLS: this client's certificate (PEM)"
    ),
    flag("--client-key", metavar="FILE", help="mutual TLS: its private key (PEM)"),
    flag(
        "--token-file",
        metavar="FILE",
        help="a bearer token for an authenticating proxy, read from this file (default: "
        "$KERAS_ELECTRA_TOKEN when set; never on the command line, where ps shows it); sent "
        "only over TLS unless --insecure",
    ),
    flag(
        "--insecure",
        action="store_true",
        help="send the token over a plaintext connection too (gRPC without TLS, an http:// URL)",
    ),
)


@command(
    "score",
    "answer texts with an export: replaced tokens, classes, values, tags or answers",
    "Answer texts with any export of `keras-electra export`, in process (--model) or from "
    "TF Serving (--server: gRPC, or REST at an http:// or https:// URL): a pretrained "
    "model's per-token replacement probabilities (an Electric model's per-token energies "
    "and sentence score, higher: more plausible), a classifier's labels (most likely "
    "first), a regressor's value, a tagger's tag per word, a QA model's answer and its word "
    "span. The export's signatures say which.",
    flag(
        "text",
        nargs="*",
        help="texts to score; an export of pairs takes them in pairs: text then text_b (a "
        "pair classifier or regressor), question then context (QA)",
    ),
    flag(
        "--input",
        metavar="FILE",
        help="score the examples of FILE instead, one per line (a tab between a pair's two "
        "texts; - reads standard input), 1,024 at a time, printing as it goes (a progress "
        "bar on the terminal when the answers go to a file)",
    ),
    *SERVED_BY,  # --model or --server, and the server's flags
    flag(
        "--json",
        action="store_true",
        help="print a JSON list, one object per example (its inputs, then the answer's fields; "
        '"truncated": true for a text cut at the export\'s length), instead of text; with '
        "--input, one object per line (JSON Lines)",
    ),
)
def _run_score(args: argparse.Namespace) -> None:
    import json

    from keras_electra.scoring import format_answers, score_with_saved_model, score_with_server

    if bool(args.text) == bool(args.input):
        raise errors.ConfigError(
            "Pass the texts to score or --input FILE (one example per line), not both."
            if args.text
            else "Pass the texts to score, or --input FILE (one example per line; - for "
            "standard input)."
        )
    options = _server_options(args)
    if args.input:
        _score_input(args, options)
        return
    if options is None:
        scores = score_with_saved_model(args.model, args.text)
    else:
        scores = score_with_server(args.server, texts=args.text, **options)
    if args.json:
        print(json.dumps(scores.records(), ensure_ascii=False, indent=2))
    else:
        print(format_answers(scores, color=sys.stdout.isatty()))
    note = scores.truncation_note()
    if note:
        sys.stdout.flush()  # after the answers it is about, where both go to one terminal
        print(note, file=sys.stderr)


def _score_input(args: argparse.Namespace, options: dict | None) -> None:
    """``score --input``: the file read and checked whole, then scored and printed a chunk
    at a time (the export loaded once), with a progress bar on a terminal when the answers
    go elsewhere (a file, a pipe)."""
    import json

    from tqdm import tqdm

    from keras_electra import scoring

    texts, width = scoring.read_examples(args.input)
    score = scoring.scorer(args.model, server=args.server, **(options or {}))
    where = "standard input" if args.input == "-" else f"'{args.input}'"
    cut = total = 0
    last = None
    with tqdm(
        total=len(texts) // width,
        unit="example",
        desc="Scoring",
        disable=not sys.stderr.isatty() or sys.stdout.isatty(),
        file=sys.stderr,
    ) as bar:
        for scores in scoring.score_in_chunks(score, texts, width, where):
            if args.json:
                lines = (json.dumps(r, ensure_ascii=False) for r in scores.records())
                print("\n".join(lines), flush=True)
            else:
                print(scoring.format_answers(scores, color=sys.stdout.isatty()), flush=True)
            cut, total, last = cut + sum(scores.truncated or ()), total + len(scores), scores
            bar.update(len(scores))
    note = scoring.truncation_note(cut, total, last.kind, last.reader.length)
    if note:
        print(note, file=sys.stderr)


def _server_options(args: argparse.Namespace) -> dict | None:
    """None for ``--model`` (an export read in this process; a server's flag beside it is
    refused), else ``score_with_server``'s keyword arguments from the server's flags."""
    from keras_electra.serving.credentials import read_token

    names = ("timeout", "tls", "root_certificates", "client_certificate", "client_key")
    versions = ("model_version", "version_label")
    server_only = ("model_name", *versions, *names, "token_file", "insecure")
    if args.model:
        given = [
            f"--{name.replace('_', '-')}"
            for name in server_only
            if getattr(args, name) is not None and getattr(args, name) is not False
        ]
        if given:
            raise errors.ConfigError(
                f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for a server "
                f"(--server), not for --model '{args.model}', which scores in this process; "
                "leave them out, or pass --server."
            )
        return None
    if args.model_version is not None and args.version_label is not None:
        raise errors.ConfigError(
            f"--model-version {args.model_version} and --version-label "
            f"'{args.version_label}' both choose the version; pass one of them."
        )
    options = {name: getattr(args, name) for name in (*names, "insecure")}
    options |= {"version": args.model_version, "version_label": args.version_label}
    options = {name: value for name, value in options.items() if value is not None}
    return {
        **options,
        "token": read_token(args.token_file),
        "model_name": args.model_name or "electra",
    }


@command(
    "rerank",
    "re-rank n-best lists (a recognizer's or translator's) with an Electric export",
    "Order each n-best list by first-pass score + --weight x sentence score, the sentence "
    "score from an Electric export (pretrain --objective electric), in process (--model) or "
    "from TF Serving (--server). NBEST is JSON Lines, one list per line: "
    '{"id": "u1", "hypotheses": [{"text": "...", "score": -12.3}, ...], "reference": "..."}; '
    "hypotheses may be plain strings (no first-pass scores: ordered by the sentence score), "
    "id and reference are optional. With a reference on every list, the word error rate "
    "before and after is printed on stderr, and --tune chooses the weight.",
    flag("nbest", metavar="NBEST", help="the n-best lists (JSON Lines; - for standard input)"),
    *SERVED_BY,
    flag(
        "--weight",
        type=float,
        help="the sentence score's weight against the first pass's scores (default: 1; "
        "choose it with --tune on held-out lists)",
    ),
    flag(
        "--per-token",
        action="store_true",
        help="divide each sentence score by its word pieces (a sum of energies moves with "
        "a hypothesis's length)",
    ),
    flag(
        "--tune",
        action="store_true",
        help="print the word error rate at each weight of a grid (0, and two decades either "
        "side of the weight that gives both scores the same spread; every list needs a "
        "reference and first-pass scores) and the best weight, instead of the lists",
    ),
    flag(
        "--json",
        action="store_true",
        help="print one JSON object per list (its id, best hypothesis and every hypothesis "
        "with its score, sentence_score, total and first-pass place) instead of text; with "
        "--tune, one object: the best weight and its word error rate, the first pass's, and "
        "every weight's",
    ),
    flag(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="hide the progress bar (shown on a terminal while the hypotheses are scored)",
    ),
)
def _run_rerank(args: argparse.Namespace) -> None:
    import json

    from keras_electra import rerank

    if args.tune and args.weight is not None:
        raise errors.ConfigError(
            f"--weight {args.weight:g} and --tune: --tune chooses the weight; pass one of them."
        )
    args.weight = rerank.check_weight(1.0 if args.weight is None else args.weight)
    options = _server_options(args)  # checked before the lists are read
    lists = rerank.read_nbest(args.nbest)
    progress = args.progress and sys.stderr.isatty()
    if options is None:
        scorer = rerank.ElectricScorer(args.model, progress=progress)
    else:
        scorer = rerank.ElectricScorer(server=args.server, progress=progress, **options)
    if args.tune:
        rows = rerank.tune_weight(lists, scorer, per_token=args.per_token)
        before = _first_pass_wer(rerank, lists)
        table = sorted(rows, key=lambda row: row["weight"])
        if args.json:
            best = {"best": rows[0], "first_pass_wer": before, "lists": len(lists)}
            print(json.dumps({**best, "weights": table}))
            return
        for row in table:
            print(f"weight {row['weight']:g}: word error rate {100 * row['wer']:.2f}%")
        print(
            f"Best --weight {rows[0]['weight']:g}: {100 * rows[0]['wer']:.2f}% against "
            f"{100 * before:.2f}% for the first pass ({len(lists)} lists)."
        )
    else:
        ranked = rerank.rerank(lists, scorer, weight=args.weight, per_token=args.per_token)
        for item in ranked:
            if args.json:
                print(json.dumps(item.record(), ensure_ascii=False))
            else:
                was = item.hypotheses[0]["was"]
                moved = f"  (was #{was})" if was != 1 else ""
                print(f"{item.id}\t{item.best}{moved}")
        sys.stdout.flush()  # the summary after the lists it is about
        referenced = all(nbest.reference is not None for nbest in lists)
        if referenced and not rerank.has_reference_words(lists):  # silence: no words to count
            print("No word error rate: every reference is empty.", file=sys.stderr)
        elif referenced:
            after = rerank.word_error_rate([r.best for r in ranked], [n.reference for n in lists])
            before = _first_pass_wer(rerank, lists)
            print(
                f"Word error rate over {len(lists)} list{'s' * (len(lists) != 1)}: "
                f"{100 * before:.2f}% first pass, "
                f"{100 * after:.2f}% re-ranked (--weight {args.weight:g}).",
                file=sys.stderr,
            )
    note = scorer.truncation_note()
    if note:
        print(note, file=sys.stderr)


def _first_pass_wer(rerank, lists) -> float:
    best = [rerank.first_pass_best(nbest) for nbest in lists]
    return rerank.word_error_rate(best, [nbest.reference for nbest in lists])


@command(
    "finetune",
    "fine-tune a pretrained discriminator on a task",
    "Fine-tune for classify, regress (tables: .tsv/.csv/.jsonl), tag (CoNLL) or qa (SQuAD "
    "JSON). Writes OUT_DIR with the weights, config.json, vocab.txt, finetune.json, "
    "labels.txt and eval_metrics.json; `keras-electra export --run OUT_DIR` exports it. "
    "Unset hyperparameters take the paper's defaults for the model size.",
    [
        flag("--run", metavar="RUN_DIR", help="a pretraining run directory"),
        flag(
            "--init",
            metavar="DIR",
            help="a directory with config.json, vocab.txt and checkpoints/ (`keras-electra "
            "convert` writes one), or a Hugging Face model: hf:ORG/NAME",
        ),
    ],
    # Checked by the library, whose error names the choices in one sentence.
    flag("--task", required=True, metavar="TASK", help=" | ".join(TASKS)),
    flag("--train", required=True, metavar="FILE", help="training data"),
    flag("--eval", metavar="FILE", help="evaluation data (metrics to eval_metrics.json)"),
    flag("--output", required=True, metavar="OUT_DIR", help="fine-tuned model directory"),
    FinetuneOptions,  # --text-column for text_column, and so on
)
def _run_finetune(args: argparse.Namespace) -> None:
    import json

    from keras_electra.finetuning import finetune

    options = from_arguments(args, FinetuneOptions)
    result = finetune(
        args.run or args.init, args.task, args.train, args.eval, args.output, options=options
    )
    if args.dry_run:
        print(result.describe())
        return
    print(f"Fine-tuned model: {result.output_dir}")
    if result.metrics:
        print(f"Eval metrics: {json.dumps(result.metrics)}")
    print(
        f"Next: keras-electra export --run {result.output_dir} --output saved_models/NAME "
        f"(to serve it), or keras-electra predict --model {result.output_dir} --input FILE"
    )


@command(
    "predict",
    "run a fine-tuned model on a file and write JSON-lines predictions",
    "Read --input in the format and columns the model was fine-tuned on (labels are "
    "ignored) and write one JSON object per example. --model is a fine-tuned directory or "
    "its export (read in process, as `score --model` reads it).",
    flag(
        "--model",
        required=True,
        metavar="OUT_DIR",
        help="a fine-tuned model directory, or its export (saved_models/NAME or a version folder)",
    ),
    flag("--input", required=True, metavar="FILE", help="examples to predict"),
    flag("--output", metavar="FILE", help="JSON-lines output (default: stdout)"),
    flag(
        "--batch-size",
        type=int,
        default=MAX_BATCH_SIZE,
        help=f"texts the model runs at once (default: {MAX_BATCH_SIZE}, serving/batching.config's "
        "max_batch_size; memory grows with it)",
    ),
)
def _run_predict(args: argparse.Namespace) -> None:
    import json

    from keras_electra.finetuning import predict_file

    rows = predict_file(args.model, args.input, args.output, batch_size=args.batch_size)
    if args.output:
        print(f"Wrote {len(rows)} predictions to {args.output}")
    else:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    cut = sum("truncated" in row for row in rows)
    if cut:
        were, its, say = ("was", "its", "row says") if cut == 1 else ("were", "their", "rows say")
        sys.stdout.flush()  # after the predictions it is about, where both go to a terminal
        print(
            f"{cut} of {len(rows)} sentences {were} longer than the model's length: {its} "
            f'words past it are tagged O without being scored ({its} {say} "truncated": '
            "true); fine-tune with a larger --max-seq-length to tag them.",
            file=sys.stderr,
        )


@command(
    "convert",
    "convert google-research, Hugging Face or keras-hub checkpoints, and back",
    "--from FORMAT SRC: read another implementation's checkpoint into an init directory "
    "that `pretrain --init`, `finetune --init` and `export --run` accept. --to FORMAT --run "
    "DIR: write a run or init directory for another implementation.",
    [
        flag(
            "--from",
            dest="source_format",
            choices=("google", "hf", "keras-hub"),
            help="the source's format",
        ),
        flag("--to", dest="target", choices=("hf", "keras-hub"), help="write --run in this format"),
    ],
    flag(
        "source",
        nargs="?",
        metavar="SRC",
        help="with --from: TF1 checkpoint prefix or directory, Hugging Face "
        "discriminator directory or model id (hf:ORG/NAME), or keras-hub preset directory",
    ),
    flag("--run", metavar="DIR", help="with --to: the run or init directory to write"),
    flag(
        "--output",
        required=True,
        metavar="DIR",
        help="the directory to write: new, or empty (a directory with files is refused)",
    ),
    flag("--generator", metavar="DIR", help="hf: the generator's directory or hf:ORG/NAME"),
    flag("--vocab", metavar="FILE", help="google: vocab.txt (default: next to SRC)"),
    flag(
        "--preset",
        choices=PRESET_NAMES,
        help="google: expected sizes (default: read from the checkpoint)",
    ),
    flag(
        "--num-heads",
        type=int,
        help="google: discriminator attention heads (default: hidden size / 64)",
    ),
    flag("--cased", action="store_true", help="google: the vocabulary keeps case"),
)
def _run_convert(args: argparse.Namespace) -> None:
    from keras_electra.convert import convert, convert_run

    options = _convert_options(args)
    if args.target:
        result = convert_run(args.run, args.output, args.target)
    else:
        result = convert(args.source, args.output, args.source_format, **options)
    print(f"Wrote {result.output}")
    for note in result.notes:
        print(f"  note: {note}")


def _convert_options(args: argparse.Namespace) -> dict:
    """``convert``'s flags checked against each other (no TensorFlow needed), and the
    options of its ``--from`` format."""
    given = [  # --from's own flags given
        "--" + f.replace("_", "-")
        for f in ("generator", "vocab", "preset", "num_heads", "cased")
        if getattr(args, f) is not None and getattr(args, f) is not False  # 0 is given
    ]
    if args.target:
        if not args.run:
            raise errors.ConfigError("--to needs --run DIR, the run or init directory to convert.")
        if args.source or given:  # they were ignored: the run directory says everything
            what = f"SRC '{args.source}'" if args.source else given[0]
            raise errors.ConfigError(
                f"{what} applies to --from; --to {args.target} converts --run alone, so leave "
                "it out."
            )
        return {}
    if not args.source:
        raise errors.ConfigError("--from needs SRC, the checkpoint to convert.")
    if args.run:
        raise errors.ConfigError(
            f"--run applies to --to; --from {args.source_format} converts SRC "
            f"'{args.source}', so leave --run out."
        )
    google_only = [name for name in given if name != "--generator"]
    if args.source_format != "google" and google_only:
        raise errors.ConfigError(f"{google_only[0]} applies to --from google only.")
    if args.generator and args.source_format != "hf":
        raise errors.ConfigError("--generator applies to --from hf only.")
    if args.source_format == "google":
        options = dict(vocab=args.vocab, preset=args.preset, num_heads=args.num_heads)
        return {**options, "lowercase": not args.cased}
    return dict(generator=args.generator) if args.source_format == "hf" else {}


@command(
    "report",
    "draw a run's metrics and health into report.png / report.html",
    "Plot a pretraining run's (or fine-tuning directory's) metrics.jsonl over steps: "
    "losses, generator accuracy, detector AUC/precision/recall, the run-health probes, "
    "gradient norms, learning rate and throughput. Writes report.png, report.html and "
    "report.json into RUN_DIR (or --output) and prints the last window and any collapse "
    "warnings. Works on a run that is still going.",
    flag("run", metavar="RUN_DIR", help="a pretraining run or fine-tuning directory"),
    flag("--compare", nargs="+", default=[], metavar="RUN_DIR", help="more runs to overlay"),
    flag("--output", metavar="DIR", help="where to write the report (default: RUN_DIR)"),
)
def _run_report(args: argparse.Namespace) -> None:
    from keras_electra.report import report_text, write_report

    summary = write_report([args.run, *args.compare], args.output)
    print(report_text(summary))
    out = Path(args.output or args.run)
    print(f"Wrote {out / 'report.png'}, report.html and report.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-electra",
        description="Pretrain, fine-tune, export and serve ELECTRA text encoders.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_, description, flags, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=description)
        for item in flags:
            if isinstance(item, type):
                add_arguments(p, item)
            elif isinstance(item, list):  # one of them, required
                group = p.add_mutually_exclusive_group(required=True)
                for names, keywords in item:
                    group.add_argument(*names, **keywords)
            else:
                p.add_argument(*item[0], **item[1])
        p.set_defaults(func=run)
    return parser


def reference_markdown() -> str:
    """The command-line reference as Markdown, from the parser itself (whose flags
    :mod:`keras_electra.settings` generates), so the documentation cannot drift from
    the command: one section per subcommand, one table row per flag.

    Examples:
        >>> text = reference_markdown()
        >>> "## keras-electra pretrain" in text and "`--steps-per-execution N`" in text
        True
    """
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    lines = [f"{parser.description}", ""]
    for name, command in sub.choices.items():
        lines += [f"## keras-electra {name}", "", command.description or helps.get(name, ""), ""]
        lines += [f"Usage: `{' '.join(command.format_usage().split()[1:])}`", ""]
        lines += ["| flag | what it does | default |", "| --- | --- | --- |"]
        flags = [a for a in command._actions if a.option_strings and a.dest != "help"]
        lines += [f"| {_flag_cell(a)} | {_cell(a)} | {_default_cell(a)} |" for a in flags]
        lines.append("")
    return "\n".join(lines)


def _flag_cell(action: argparse.Action) -> str:
    value = ""
    if action.nargs != 0:
        if action.choices:
            value = " {" + ",".join(map(str, action.choices)) + "}"
        else:
            value = " " + (action.metavar or action.dest.upper())
            value += " ..." if action.nargs in ("+", "*") else ""
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _cell(action: argparse.Action) -> str:
    text = (action.help or "").removesuffix(f" {default_note(action.default)}")  # its column
    text = " ".join(text.replace("%%", "%").split()).replace("|", "\\|")
    return text + (" (required)" if action.required else "")


def _default_cell(action: argparse.Action) -> str:
    default = action.default
    if default is None or action.required or isinstance(action, argparse._StoreFalseAction):
        return ""
    if isinstance(default, bool):
        return "on" if default else "off"
    return f"`{default}`"


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow with stderr pointed at /dev/null, unless ``TF_CPP_MIN_LOG_LEVEL``
    is below 1: TensorFlow 2.21 writes six INFO lines (absl's "All log messages before
    absl::InitializeLog()...", oneDNN and CUDA notices) while it loads, whatever that level
    says, and a command's error must stay the one sentence on stderr. A failed import raises.
    """
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") < "1":
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            import tensorflow  # noqa: F401 - loaded once, quietly, for every command
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _not_utf8(args: argparse.Namespace) -> str | None:
    """The first argument that is not valid UTF-8, or None. Python hands a command line in
    another encoding over with its bytes escaped as lone surrogates, which no library call
    can encode."""
    for value in vars(args).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return item
    return None


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line parsed; for ``prepare``, flags it does not know are Apache Beam's
    pipeline options (``args.beam_options``, checked by Beam when the pipeline is made)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if getattr(args, "command", None) == "prepare":
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        prepare = sub.choices["prepare"]
        if meant := _own_flag_meant(unknown, prepare):
            prepare.error(meant)  # argparse's exit status, before Beam is asked
        args.beam_options = unknown
    elif unknown:
        parser.parse_args(argv)  # argparse's own message and exit status
    return args


def _own_flag_meant(unknown: list[str], command: argparse.ArgumentParser) -> str | None:
    """The message for a flag among ``unknown`` (taken for Beam pipeline options) that is
    one of ``command``'s own spelled with underscores (``--max_seq_length``) or mistyped
    with dashes (Beam's options are spelled with underscores), else None.

    Examples:
        >>> p = argparse.ArgumentParser()
        >>> _ = p.add_argument("--max-seq-length")
        >>> _own_flag_meant(["--max_seq_length=64"], p)
        'unrecognized argument --max_seq_length; did you mean --max-seq-length?'
        >>> _own_flag_meant(["--max-seq-lenght", "64"], p)
        'unrecognized argument --max-seq-lenght; did you mean --max-seq-length?'
        >>> _own_flag_meant(["--temp_location", "gs://b/t"], p) is None
        True
    """
    import difflib

    own = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
    for arg in unknown:
        name = arg.partition("=")[0]
        if not name.startswith("--"):
            continue
        dashed = "--" + name[2:].replace("_", "-")
        if dashed in own:
            return f"unrecognized argument {name}; did you mean {dashed}?"
        close = difflib.get_close_matches(name, own, n=1, cutoff=0.85) if "-" in name[2:] else []
        if close:
            return f"unrecognized argument {name}; did you mean {close[0]}?"
    return None


def _check_before_tensorflow(args: argparse.Namespace) -> None:
    """The checks that need no TensorFlow, made before it loads (seconds): a ``--corpus``
    path of ``pretrain`` or ``prepare`` that does not exist, a Hugging Face model id that
    is not one, ``convert``'s flags that do not go together, a ``--server`` address that
    is empty, holds a port outside 1-65535 or (gRPC) a path. The library (for ``convert``'s
    flags, the command) makes them again, in the same words."""
    if args.command in ("pretrain", "prepare") and getattr(args, "corpus", None):
        from keras_electra.data.files import check_corpus_paths_exist

        check_corpus_paths_exist(args.corpus)
        check_corpus_paths_exist(getattr(args, "validation", None) or [], "Validation file")
    from keras_electra.hub_ids import check_hub_id

    for name in ("init", "source", "generator"):
        check_hub_id(getattr(args, name, None))
    if args.command == "convert":
        _convert_options(args)
    if getattr(args, "server", None) is not None:
        from keras_electra.serving.address import check_server

        check_server(args.server)


@contextlib.contextmanager
def _stopped_while_loading():
    """A SIGTERM while the command loads (before the run's own handling): one sentence and
    exit 75, as a signal before training starts; it was the default's silent exit 143."""

    def stop(signum, frame):
        raise errors.TrainingInterrupted(
            "Stopped by SIGTERM while the command loaded; nothing was done: run the same "
            "command again.",
            step=0,
            signal_name="SIGTERM",
        )

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread sets handlers
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


INTERRUPTED = (
    "interrupted; run the command again (pretrain and finetune resume from their last "
    "checkpoint, prepare keeps the shards it finished)."
)


def _stop_behind(error: BaseException) -> tuple[str, int] | None:
    """The message and status of a stop (Ctrl-C, or SIGTERM's ``TrainingInterrupted``)
    that ``error`` was raised while handling: a signal's exception lands wherever the main
    thread is, and the code it interrupted (a thread pool starting a thread) may fail in
    turn. None when no stop is behind it."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt):
            return INTERRUPTED, 130
        if isinstance(error, errors.TrainingInterrupted):
            return str(error), errors.INTERRUPTED_EXIT_CODE
        error = error.__context__
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)

    def fail(message: str, status: int) -> int:
        print(f"keras-electra {args.command}: {message}", file=sys.stderr)
        # The sentence is the last word: TensorFlow's warnings as the process ends (a
        # checkpoint collected with values never restored, after a Ctrl-C) would follow it.
        logging.getLogger("tensorflow").setLevel(logging.ERROR)
        return status

    bad = _not_utf8(args)
    if bad is not None:
        shown = ascii(bad if len(bad) <= 60 else bad[:60] + "...")
        return fail(
            f"error: the argument {shown} is not valid UTF-8; pass arguments in UTF-8 (set a "
            "UTF-8 locale, or convert the text with iconv).",
            2,
        )
    try:
        with _stopped_while_loading():
            _check_before_tensorflow(args)
            _import_tensorflow_quietly()  # seconds, in which a Ctrl-C is common
        args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, not at the interpreter's exit
        return 0
    except errors.ElectraError as e:
        return fail(f"error: {e}", 2)
    except errors.TrainingInterrupted as e:
        return fail(str(e), errors.INTERRUPTED_EXIT_CODE)
    except BrokenPipeError:  # stdout's reader closed (`score ... | head`): stop without a word
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the last flush too
        return 128 + int(signal.SIGPIPE)  # as a shell reports a command its pipe ended
    except OSError as e:  # a write the library does not wrap: one sentence, not a traceback
        if (stop := _stop_behind(e)) is not None:
            return fail(*stop)
        where = f" '{e.filename}'" if e.filename else ""
        remedy = (
            errors.storage_remedy(e, e.filename) if e.filename else "free space or fix the path"
        )
        return fail(
            f"error: could not access{where} ({errors.storage_reason(e)}); {remedy}, "
            "then run the command again.",
            2,
        )
    except KeyboardInterrupt:
        return fail(INTERRUPTED, 130)
    except Exception as e:  # raised by code a stop's signal interrupted, or a bug
        if (stop := _stop_behind(e)) is None:
            raise
        return fail(*stop)


if __name__ == "__main__":
    sys.exit(main())
