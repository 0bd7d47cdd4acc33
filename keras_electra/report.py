"""``keras-electra report``: a run's ``metrics.jsonl`` drawn into ``report.png``,
``report.html`` and ``report.json`` (docs/run-health.md); matplotlib is imported only then."""

from __future__ import annotations

import base64
import fnmatch
import html
import io
import json
import math
import textwrap
from pathlib import Path

from keras_electra.atomic import check_writable
from keras_electra.errors import ConfigError
from keras_electra.pretraining.health import collapse_warnings
from keras_electra.run_directory import RunDirectory
from keras_electra.training.callbacks import read_metrics_records

# (title, metric-name patterns, y axis on a log scale)
PANELS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("Losses", ("loss", "mlm_loss", "cloze_loss", "disc_loss", "val_loss"), True),
    ("Generator (masked LM)", ("mlm_accuracy", "sampled_mlm_accuracy"), False),
    ("Cloze model (Electric)", ("cloze_accuracy", "resampled_original"), False),
    (
        "Detector",
        ("disc_auc", "disc_precision", "disc_recall", "disc_accuracy", "context_auc", "rarity_auc"),
        False,
    ),
    (
        "Detector on the probe",
        (
            "probe_auc",
            "probe_logit_std",
            "probe_mean_prob",
            "probe_replaced_fraction",
            "probe_identity_r2",
            "replaced_fraction",
        ),
        False,
    ),
    ("Token-vector cosine (per layer)", ("disc_cosine_*", "embedding_cosine"), False),
    ("Effective rank (final layer)", ("disc_effective_rank",), False),
    ("Gradient norm before clipping", ("grad_norm*",), True),
    ("Learning rate", ("learning_rate",), False),
    ("Throughput (tokens/s)", ("tokens_per_sec",), False),
)
NOT_DRAWN = {"step", "epoch", "health_seconds", "window_seconds", "warnings"}


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of ``RUN_DIR/metrics.jsonl`` (an unfinished fine-tuning's: of
    ``OUT_DIR/resume/metrics.jsonl``, :func:`metrics_source`); a line cut short by a crash
    is skipped."""
    return read_metrics_records(metrics_source(run_dir)[0])


def metrics_source(run_dir: str | Path) -> tuple[Path, bool]:
    """The ``metrics.jsonl`` the report reads, and whether it is an unfinished fine-tuning's.

    A fine-tuning writes ``OUT_DIR/metrics.jsonl`` once it is done; until then (running,
    stopped by a signal, or diverged) its epoch records are in ``OUT_DIR/resume/``, and
    those are the report's (newer than a fine-tuned model the run is to replace).

    Raises:
        ConfigError: one sentence on why the directory has no metrics to draw.
    """
    run = RunDirectory(run_dir)
    if run.resume_dir.metrics_file.is_file():
        return run.resume_dir.metrics_file, True
    path = run.metrics_file
    if path.is_file():
        return path, False
    if run.is_converted():
        raise ConfigError(
            f"'{run_dir}' is a converted checkpoint (keras-electra convert), which has no "
            "training metrics to draw; report the runs of `keras-electra pretrain` and "
            "`finetune`."
        )
    if run.is_saved_from_python():
        raise ConfigError(
            f"'{run_dir}' was written by save_run from your own training script, which keeps "
            f"no {path.name}; the report draws the runs of `keras-electra pretrain` and "
            "`finetune` (your fit's History holds its metrics)."
        )
    if stopped := run.stopped():
        raise ConfigError(
            f"'{run_dir}' has no metrics: its pretraining ended before its first logging "
            f"window. It said: {stopped}"
        )
    if run.has_config() or run.settings_file.is_file() or run.resume_dir.path.is_dir():
        raise ConfigError(
            f"'{run_dir}' has no metrics yet (no {path.name}): its run has not finished a "
            "logging window (--log-every steps; an epoch, for a fine-tuning); run the report "
            "again once it has."
        )
    raise ConfigError(
        f"'{run_dir}' holds no run ({run.lacks(path.name)}); pass a `keras-electra pretrain` "
        "or `finetune` output directory."
    )


def _unfinished(run_dir: str, source: tuple[Path, bool], records: list[dict]) -> str | None:
    """What the report says of a run that has not reached its end (None for one that has):
    an unfinished fine-tuning (its records are ``source``'s, in ``resume/``), a
    pretraining that stopped early (the sentence it stopped with), or one still short of
    its ``--steps`` (running, or killed without a word)."""
    path, partial = source
    last = records[-1] if records else {}
    if partial:
        if not _is_number(last.get("loss", 0.0)):
            return f"the fine-tuning diverged at step {last['step']} (its records: {path})"
        return f"the fine-tuning is interrupted or still running (its records so far: {path})"
    run = RunDirectory(run_dir)
    if run.is_finetuned():
        return None
    try:  # a damaged side file is said, and the metrics are drawn all the same
        stopped, steps = run.stopped(), run.settings().get("steps")
    except ConfigError as error:
        return str(error)
    if stopped:
        return stopped
    if isinstance(steps, int) and last and last["step"] < steps:
        return (
            f"the pretraining has logged step {last['step']:,} of {steps:,}: it is still "
            "running, or it was killed (run its command again to resume from the last "
            "checkpoint)"
        )
    return None


def panels_for(records: list[dict]) -> list[tuple[str, list[str], bool]]:
    """The panels with data, each with the metric names it draws, in order; metrics no
    panel claims (a fine-tuning task's own) get an "Other metrics" panel."""
    names = sorted(
        {k for r in records for k, v in r.items() if k not in NOT_DRAWN and _is_metric(v)},
        key=_natural,
    )
    out, claimed = [], set()
    for title, patterns, log in PANELS:
        drawn = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
        drawn = [n for n in drawn if n not in claimed]
        if drawn:
            claimed.update(drawn)
            out.append((title, drawn, log))
    rest = [n for n in names if n not in claimed]
    if rest:
        out.append(("Other metrics", rest, False))
    return out


def _samples_at_a_temperature(run_dir: str) -> bool:
    """Whether the run's objective samples at a temperature (``--temperature`` is one of
    its remedies); an objective this process does not know is taken to."""
    from keras_electra.pretraining import objectives

    try:  # an objective this process does not know, or a damaged run.json: taken to
        name = RunDirectory(run_dir).settings().get("objective", "electra")
        return "temperature" in objectives.get(name).sampling()
    except ConfigError:
        return True


def write_report(run_dirs: list[str | Path], output: str | Path | None = None) -> dict:
    """Draw the runs' metrics into ``report.png``, ``report.html`` and ``report.json``.

    Args:
        run_dirs: one run directory, or several to overlay (a sweep); the first
            run's directory receives the files unless ``output`` is given. A later one
            with no metrics to draw (a sweep's member before its first window) is left
            out, with the reason in the summary's ``skipped``.
        output: the directory to write the report into.

    Returns:
        The summary written to ``report.json``.

    Raises:
        ConfigError: a directory without ``metrics.jsonl``, or matplotlib missing.
    """
    if not run_dirs:
        raise ConfigError("Pass at least one run directory.")
    sources, skipped, unique = {}, {}, {}
    for d in run_dirs:  # runs/a/ and ./runs/a are one run
        unique.setdefault(Path(d).resolve(), str(d))
    for n, run_dir in enumerate(unique.values()):
        try:
            sources[run_dir] = metrics_source(run_dir)
        except ConfigError as error:
            if n == 0:  # the report's own run
                raise
            skipped[run_dir] = str(error)  # a sweep's member with no window yet, say
    kinds = {
        d: "a fine-tuning" if partial or RunDirectory(d).is_finetuned() else "a pretraining run"
        for d, (_, partial) in sources.items()
    }
    if len(set(kinds.values())) > 1:
        (first, kind), (other, second) = next(
            ((a, kinds[a]), (b, kinds[b])) for a in kinds for b in kinds if kinds[a] != kinds[b]
        )
        raise ConfigError(
            f"--compare overlays runs of one kind, but '{first}' is {kind} and '{other}' "
            f"{second}, whose losses measure different things; report them apart."
        )
    runs = {d: read_metrics_records(path) for d, (path, _) in sources.items()}
    empty = [d for d, records in runs.items() if not records]
    if len(empty) == len(runs):
        path = sources[empty[0]][0]
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
        if len(lines) > 1 or (lines and lines[0].rstrip().endswith(b"}")):  # not one cut short
            raise ConfigError(
                f"None of the {len(lines)} lines of '{path}' is a metrics record (a JSON object "
                "with a whole-number step): the file is damaged; restore it from a copy."
            )
        raise ConfigError(f"'{empty[0]}' has no complete metrics line yet; wait for a window.")
    out_dir = Path(output) if output is not None else Path(run_dirs[0])
    if output is not None:
        check_writable(output)  # a file there was "could not access (file exists)"
    out_dir.mkdir(parents=True, exist_ok=True)

    panels = panels_for([r for records in runs.values() for r in records])
    warnings = {
        d: collapse_warnings(records, temperature=_samples_at_a_temperature(d))
        for d, records in runs.items()
    }
    unfinished = {d: _unfinished(d, source, runs[d]) for d, source in sources.items()}
    png = _draw(runs, panels, warnings, unfinished)
    (out_dir / "report.png").write_bytes(png)

    summary = {
        "runs": list(runs),
        "unfinished": unfinished,
        "panels": [{"title": t, "metrics": names} for t, names, _ in panels],
        "last_window": {d: (records[-1] if records else {}) for d, records in runs.items()},
        "warnings": {d: [w["message"] for w in ws] for d, ws in warnings.items()},
        # An unfinished fine-tuning's evaluation is to come (one there is a replaced model's).
        "eval_metrics": {d: {} if sources[d][1] else _eval_metrics(d) for d in runs},
        "health_overhead": {d: _health_overhead(records) for d, records in runs.items()},
        "skipped": skipped,
    }
    # Strict JSON: a diverged window's NaN or infinite metric as the string "nan" or "inf".
    text = json.dumps(_finite(summary), indent=2, allow_nan=False)
    (out_dir / "report.json").write_text(text + "\n", encoding="utf-8")
    (out_dir / "report.html").write_text(_html(summary, png), encoding="utf-8")
    return summary


def report_text(summary: dict) -> str:
    """What the command prints: each run's last window in a line, then its warnings."""
    lines = []
    for run in summary["runs"]:
        last = summary["last_window"][run]
        if not last:
            lines.append(f"{run}: no complete metrics line yet")
            continue
        keys = ("step", "loss", "disc_auc", "disc_recall", "probe_auc", "context_auc", "rarity_auc")
        shown = ", ".join(f"{k}={_fmt(last[k])}" for k in keys if k in last)
        lines.append(f"{run}: {shown}")
        if summary["unfinished"].get(run):
            lines.append(f"  unfinished: {summary['unfinished'][run]}")
        overhead = summary["health_overhead"].get(run)
        if overhead is not None:
            lines.append(f"  health probe: {100 * overhead:.1f}% of the training time")
        lines += [f"  WARNING: {message}" for message in summary["warnings"][run]]
    lines += [f"{run}: not drawn: {why}" for run, why in summary.get("skipped", {}).items()]
    return "\n".join(lines)


def _draw(runs: dict[str, list[dict]], panels, warnings, unfinished) -> bytes:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            "keras-electra report needs matplotlib: pip install 'keras-electra[report]'."
        ) from None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    named = run_names(list(runs))
    compare = len(runs) > 1
    columns = 3
    rows = max(1, math.ceil(len(panels) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.6 * rows), squeeze=False)
    styles = ("-", "--", ":", "-.")
    for ax, (title, names, log) in zip(axes.flat, panels, strict=False):
        for n_run, (run, records) in enumerate(runs.items()):
            for n_metric, name in enumerate(names):
                label = f"{name} ({named[run]})" if compare else name
                # Several runs: a colour per run, a line style per metric; else a colour each.
                color, line = (n_run, n_metric) if compare else (n_metric, 0)
                style = dict(linestyle=styles[line % len(styles)], color=f"C{color % 10}")
                points = [(r["step"], r[name]) for r in records if _is_number(r.get(name))]
                if points:
                    steps, values = zip(*points, strict=True)
                    marker = "." if len(steps) < 30 else None
                    ax.plot(steps, values, marker=marker, label=label, **style)
                # A window whose metric is NaN or infinite (a diverged run): a line at its step.
                broken = [r["step"] for r in records if _is_broken(r.get(name))]
                if broken:
                    style["linestyle"] = "--"
                    ax.axvline(broken[0], label=f"{label}: not finite", linewidth=2, **style)
            for w in warnings[run]:  # in the run's own colour when there are several
                ax.axvline(w["since"], color=f"C{n_run % 10}" if compare else "red", alpha=0.5)
        shown = [r[n] for rs in runs.values() for r in rs for n in names if _is_number(r.get(n))]
        if log and shown and all(v > 0 for v in shown):
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(
            fontsize=7 if len(ax.get_lines()) <= 8 else 5,
            loc="best",
            ncols=1 + (len(ax.get_lines()) > 8),
        )
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    notes = [f"{named[run]}: {w['message']}" for run, ws in warnings.items() for w in ws]
    notes += [f"{named[run]}: unfinished: {note}" for run, note in unfinished.items() if note]
    notes = [textwrap.shorten(note, 160, placeholder=" ...") for note in notes]
    title = " vs ".join(named[r] for r in runs)
    fig.suptitle(title + ("\n" + "\n".join(notes) if notes else ""), fontsize=10, color="black")
    fig.tight_layout(rect=(0, 0, 1, 0.97 - 0.02 * len(notes)))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def run_names(run_dirs: list[str]) -> dict[str, str]:
    """Each run's name on the plot: its folder's name, with as many parent folders as
    tell the runs apart (``runs/a`` and ``other/a``; ``.`` is its real folder's name).

    Examples:
        >>> run_names(["/x/runs/a", "/x/other/a", "/x/runs/b"])
        {'/x/runs/a': 'runs/a', '/x/other/a': 'other/a', '/x/runs/b': 'runs/b'}
        >>> run_names(["/x/runs/a", "/x/runs/b"])
        {'/x/runs/a': 'a', '/x/runs/b': 'b'}
    """
    parts = {d: Path(d).resolve().parts for d in run_dirs}
    longest = max(len(p) for p in parts.values())
    for depth in range(1, longest + 1):
        names = {d: "/".join(p[-depth:]) for d, p in parts.items()}
        if len(set(names.values())) == len(names):
            return names
    return {d: str(Path(d).resolve()) for d in run_dirs}


def _html(summary: dict, png: bytes) -> str:
    image = base64.b64encode(png).decode("ascii")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>keras-electra report</title>",
        "<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        ".warn{color:#b00}</style></head><body>",
        f"<h1>Report: {html.escape(', '.join(summary['runs']))}</h1>",
        f"<img alt='metrics over steps' src='data:image/png;base64,{image}'>",
    ]

    def table(head: str, values: dict) -> list[str]:
        rows = [f"<tr><td>{html.escape(k)}</td><td>{_fmt(v)}</td></tr>" for k, v in values.items()]
        return [head, *rows, "</table>"]

    for run in summary["runs"]:
        parts.append(f"<h2>{html.escape(run)}</h2>")
        if summary["unfinished"].get(run):
            parts.append(f"<p>Unfinished: {html.escape(summary['unfinished'][run])}</p>")
        parts += [
            f"<p class='warn'>WARNING: {html.escape(m)}</p>" for m in summary["warnings"][run]
        ]
        last = {k: v for k, v in summary["last_window"][run].items() if _is_metric(v)}
        parts += table("<table id='last-window'><tr><th>metric</th><th>last window</th></tr>", last)
        if summary["eval_metrics"].get(run):
            parts += table("<h3>eval_metrics.json</h3><table>", summary["eval_metrics"][run])
    parts.append("</body></html>")
    return "\n".join(parts)


def _eval_metrics(run_dir: str) -> dict:
    try:
        return RunDirectory(run_dir).eval_metrics() or {}
    except ValueError:
        return {}


def _health_overhead(records: list[dict]) -> float | None:
    """The probe's time as a fraction of the training time, over the whole run."""
    # The first window's times include tracing the probe and the training step (a cost
    # paid once per process, not a share of every window), and so does the first window
    # after each resume: counted only when no other window is.
    counted = [r for i, r in enumerate(records) if i and not r.get("resumed")] or records
    probe = sum(r.get("health_seconds", 0.0) for r in counted)
    train = sum(r.get("window_seconds", 0.0) for r in counted)
    return round(probe / train, 4) if train > 0 and probe > 0 else None


def _is_metric(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """A finite metric value (one a plot can draw)."""
    return _is_metric(value) and math.isfinite(value)


def _is_broken(value) -> bool:
    """A metric value that is NaN or infinite."""
    return _is_metric(value) and not math.isfinite(value)


def _finite(value):
    """``value`` with every NaN or infinite float as the string ``str`` gives it."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return str(value) if _is_broken(value) else value


def _natural(name: str):
    """Sort ``disc_cosine_10`` after ``disc_cosine_9``."""
    head, _, tail = name.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))
