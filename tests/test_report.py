"""`keras-electra report`: the figure, its data, and the collapse warnings."""

import json
import shutil

import pytest
from conftest import HEALTH  # noqa: I001
from test_health import collapsed_run, healthy_run

from keras_electra.cli import main
from keras_electra.errors import ConfigError
from keras_electra.report import write_report


def write_metrics(run_dir, records):
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records]
    # A line cut short by a crash is skipped, not fatal.
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 70', encoding="utf-8")
    # So is a line that is not UTF-8 (a damaged block): it was a UnicodeDecodeError traceback.
    with open(run_dir / "metrics.jsonl", "ab") as out:
        out.write(b"\n\xff\xfe garbage")
    return run_dir


def decoded_png(path):
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 800
    assert pixels.std() > 0.05  # not a blank canvas
    return pixels


def test_report_of_a_short_pretraining_run(tiny_run, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(tiny_run), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "step=4" in printed and "probe_auc=" in printed and "WARNING" not in printed
    decoded_png(out / "report.png")
    summary = json.loads((out / "report.json").read_text())
    drawn = {name for panel in summary["panels"] for name in panel["metrics"]}
    titles = [panel["title"] for panel in summary["panels"]]
    assert titles[:3] == ["Losses", "Generator (masked LM)", "Detector"]
    assert HEALTH <= drawn
    assert {"loss", "disc_auc", "grad_norm", "learning_rate", "tokens_per_sec"} <= drawn
    last = summary["last_window"][str(tiny_run)]
    assert last["step"] == 4
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert f"<td>context_auc</td><td>{last['context_auc']:.4g}</td>" in html


def test_a_collapsed_run_is_flagged_and_a_healthy_one_is_not(tmp_path, capsys):
    collapsed = write_metrics(tmp_path / "collapsed", collapsed_run())
    healthy = write_metrics(tmp_path / "healthy", healthy_run())
    assert main(["report", str(collapsed), "--compare", str(healthy)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((collapsed / "report.json").read_text())
    assert summary["runs"] == [str(collapsed), str(healthy)]
    assert len(summary["warnings"][str(collapsed)]) == 2
    assert summary["warnings"][str(healthy)] == []
    assert printed.count("WARNING") == 2
    assert "stopped detecting replacements at step 200" in printed
    assert "WARNING" in (collapsed / "report.html").read_text()
    decoded_png(collapsed / "report.png")
    # The broken last line was skipped: 12 windows each.
    assert summary["last_window"][str(healthy)]["step"] == 600


def test_an_electric_runs_warnings_name_no_temperature(tmp_path):
    # Electric samples from its cloze model as it is: --temperature is not its remedy.
    runs = {
        name: write_metrics(tmp_path / name, collapsed_run()) for name in ("electra", "electric")
    }
    for name, run in runs.items():
        (run / "run.json").write_text(json.dumps({"objective": name}), encoding="utf-8")
    summary = write_report(list(runs.values()), tmp_path / "out")
    electra, electric = (summary["warnings"][str(run)] for run in runs.values())
    assert len(electra) == len(electric) == 2
    assert all("--temperature" in message for message in electra)
    assert not any("--temperature" in message for message in electric)


def test_report_refuses_a_directory_without_metrics(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "(no metrics.jsonl)" in err and err.count("\n") == 1
    # A file is not said not to exist (it was), and a run not yet one window old is a run.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a line.\n", encoding="utf-8")
    assert main(["report", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert "holds no run (it is a file, not a directory); pass a" in err
    (tmp_path / "run.json").write_text("{}", encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has no metrics yet (no metrics.jsonl): its run has not finished a logging" in err
    assert err.count("\n") == 1
    # Directories that will never have metrics were told to wait for them.
    (tmp_path / "run.json").write_text('{"saved_by": "keras_electra.pretraining.save_run"}')
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"keras-electra report: error: '{tmp_path}' was written by save_run from your own "
        "training script, which keeps no metrics.jsonl; the report draws the runs of "
        "`keras-electra pretrain` and `finetune` (your fit's History holds its metrics).\n"
    )
    (tmp_path / "convert.json").write_text("{}", encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 2
    assert "is a converted checkpoint (keras-electra convert), which has no training" in (
        capsys.readouterr().err
    )


def test_report_names_its_files_under_an_output_given_with_a_slash(tmp_path, capsys):
    run = write_metrics(tmp_path / "run", healthy_run()[:2])
    assert main(["report", str(run), "--output", f"{tmp_path}/out/"]) == 0
    assert f"Wrote {tmp_path}/out/report.png, report.html" in capsys.readouterr().out


def test_report_refuses_a_file_as_its_output(tmp_path, capsys):
    run = write_metrics(tmp_path / "run", healthy_run()[:2])
    (tmp_path / "notes.txt").write_text("mine\n", encoding="utf-8")
    assert main(["report", str(run), "--output", str(tmp_path / "notes.txt")]) == 2
    assert capsys.readouterr().err == (  # it was "(file exists); free space or fix the ..."
        f"keras-electra report: error: --output '{tmp_path / 'notes.txt'}' is a file; pass a "
        "directory.\n"
    )
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine\n"


def test_report_on_a_run_still_writing_its_first_window(tmp_path):
    run = tmp_path / "young"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 70, "loss": 3.', encoding="utf-8")
    with pytest.raises(ConfigError, match="no complete metrics line yet"):
        write_report([run])


@pytest.mark.parametrize(
    "text", [b"\xff\xfe garbage\n\x00\x01\x02\n", b'{"step": 10.0, "loss": 3.0}\n']
)
def test_a_damaged_metrics_file_is_said_to_be_one_not_to_wait_for(tmp_path, text):
    # Garbage, or records whose step is not a whole number, was "wait for a window".
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(text)
    lines = len(text.strip().splitlines())
    with pytest.raises(ConfigError, match=rf"^None of the {lines} lines of '.*metrics.jsonl' is"):
        write_report([run])


def test_report_draws_an_unfinished_fine_tuning_from_its_resume_records(tmp_path, capsys):
    """Until a fine-tuning is done its records are only in OUT_DIR/resume/metrics.jsonl:
    the report said the directory held no run when it was interrupted (exit 75), still
    running or diverged."""
    out = tmp_path / "qa"
    (out / "resume" / "checkpoints").mkdir(parents=True)
    (out / "resume" / "state.json").write_text('{"fingerprint": "0123"}', encoding="utf-8")
    assert main(["report", str(out)]) == 2  # still in its first epoch
    assert "has no metrics yet (no metrics.jsonl): its run has not finished a logging " in (
        capsys.readouterr().err
    )
    records = [{"step": 3, "epoch": 1, "loss": 0.69}, {"step": 4, "epoch": 1.3333, "loss": 0.6}]
    write_metrics(out / "resume", records)
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    where = out / "resume" / "metrics.jsonl"
    assert printed.startswith(
        f"{out}: step=4, loss=0.6\n  unfinished: the fine-tuning is interrupted or still "
        f"running (its records so far: {where})\n"
    ), printed
    summary = json.loads((out / "report.json").read_text())
    assert summary["last_window"][str(out)] == records[-1]
    assert "Unfinished: the fine-tuning is interrupted" in (out / "report.html").read_text()
    # A diverged one says so; a fine-tuned model it was to replace is not what it reports.
    write_metrics(out / "resume", [*records, {"step": 5, "epoch": 1.6667, "loss": float("nan")}])
    write_metrics(out, [{"step": 9, "epoch": 3, "loss": 0.1}])
    (out / "eval_metrics.json").write_text('{"accuracy": 0.9}', encoding="utf-8")
    summary = write_report([out])
    assert summary["unfinished"][str(out)] == (
        f"the fine-tuning diverged at step 5 (its records: {where})"
    )
    assert summary["last_window"][str(out)]["step"] == 5 and summary["eval_metrics"] == {
        str(out): {}
    }
    # Once done, the fine-tuning removes resume/: the finished model's records.
    shutil.rmtree(out / "resume")
    summary = write_report([out])
    assert summary["unfinished"] == {str(out): None}
    assert summary["last_window"][str(out)]["step"] == 9
    assert summary["eval_metrics"] == {str(out): {"accuracy": 0.9}}


def test_a_diverged_windows_nan_is_shown_drawn_and_strict_json(tmp_path, capsys):
    """A fine-tuning that diverged in its first epoch: the HTML table dropped the NaN loss,
    the figure was a blank canvas (no finite point), and report.json held a bare NaN, which
    strict JSON readers refuse."""
    out = tmp_path / "ft"
    write_metrics(out / "resume", [{"step": 3, "epoch": 1, "loss": float("nan")}])
    summary = write_report([out])
    assert summary["panels"] == [{"title": "Losses", "metrics": ["loss"]}]
    text = (out / "report.json").read_text()
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert strict["last_window"][str(out)]["loss"] == "nan"
    assert "<td>loss</td><td>nan</td>" in (out / "report.html").read_text()
    pixels = decoded_png(out / "report.png")
    blue = (pixels[..., 2] > 0.6) & (pixels[..., 0] < 0.3)  # the loss's line at step 3
    assert blue.sum() > 100
    # Windows before it stay drawn; the NaN one is marked at its step, not dropped.
    records = [{"step": 1, "epoch": 1, "loss": 0.7}, {"step": 2, "epoch": 2, "loss": 0.6}]
    write_metrics(out / "resume", [*records, {"step": 3, "epoch": 3, "loss": float("inf")}])
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "step=3, loss=inf" in printed and "the fine-tuning diverged at step 3" in printed
    assert json.loads((out / "report.json").read_text())["last_window"][str(out)]["loss"] == "inf"


def test_a_pretraining_that_stopped_early_says_why_in_its_report(tmp_path, capsys):
    """A pretraining that diverged, was stopped or killed got no note (its records look
    like a finished run's); one that stopped before its first window was told to wait."""
    from keras_electra.run_directory import RunDirectory

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"steps": 600}', encoding="utf-8")
    stopped = "Training diverged at step 7: the loss or gradient norm was NaN or infinite."
    RunDirectory(run).record_stop(stopped)
    assert main(["report", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"keras-electra report: error: '{run}' has no metrics: its pretraining ended before "
        f"its first logging window. It said: {stopped}\n"
    )
    write_metrics(run, healthy_run()[:2])  # steps 50 and 100
    assert main(["report", str(run)]) == 0
    assert f"  unfinished: {stopped}\n" in capsys.readouterr().out
    assert f"Unfinished: {stopped}" in (run / "report.html").read_text()
    # Without a stop on record, a run short of its --steps is running or was killed.
    RunDirectory(run).clear_stop()
    assert write_report([run])["unfinished"][str(run)] == (
        "the pretraining has logged step 100 of 600: it is still running, or it was killed "
        "(run its command again to resume from the last checkpoint)"
    )
    (run / "run.json").write_text('{"steps": 100}', encoding="utf-8")
    assert write_report([run])["unfinished"][str(run)] is None


def test_compare_draws_what_it_can_and_tells_the_runs_apart(tmp_path, capsys, monkeypatch):
    # A member with no metrics.jsonl yet failed the whole report; runs named alike were
    # drawn as "a vs a"; one run given twice (runs/a/ and ./runs/a) was drawn twice.
    from keras_electra.report import run_names

    monkeypatch.chdir(tmp_path)
    first = write_metrics(tmp_path / "runs" / "a", healthy_run()[:2])
    other = write_metrics(tmp_path / "other" / "a", healthy_run()[:3])
    (tmp_path / "sweep" / "b").mkdir(parents=True)
    (tmp_path / "sweep" / "b" / "run.json").write_text('{"steps": 600}', encoding="utf-8")
    argv = ["report", "runs/a/", "--compare", "./runs/a", "other/a", "sweep/b"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    summary = json.loads((first / "report.json").read_text())
    assert summary["runs"] == ["runs/a/", "other/a"]
    assert "sweep/b: not drawn: 'sweep/b' has no metrics yet" in out
    assert run_names(summary["runs"]) == {"runs/a/": "runs/a", "other/a": "other/a"}
    assert run_names([str(other), "."]) == {str(other): "a", ".": tmp_path.name}
    decoded_png(first / "report.png")


def test_a_damaged_side_file_is_said_and_the_metrics_drawn(tmp_path, capsys):
    run = write_metrics(tmp_path / "run", healthy_run()[:2])
    (run / "run.json").write_text('{"steps": 6', encoding="utf-8")  # cut short
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "  unfinished: " in out and "run.json" in out, out
    decoded_png(run / "report.png")


def test_compare_with_a_run_without_a_window_says_so(tmp_path, capsys):
    healthy = write_metrics(tmp_path / "healthy", healthy_run()[:2])
    young = write_metrics(tmp_path / "young", [])
    assert main(["report", str(healthy), "--compare", str(young)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{young}: no complete metrics line yet" in lines  # it was "{young}: "


def test_the_health_probe_share_leaves_out_the_first_windows_tracing(tmp_path):
    records = [
        {"step": 10, "loss": 1.0, "health_seconds": 5.0, "window_seconds": 10.0},
        {"step": 20, "loss": 0.9, "health_seconds": 0.1, "window_seconds": 2.0},
        {"step": 30, "loss": 0.8, "health_seconds": 0.1, "window_seconds": 2.0},
    ]
    run = write_metrics(tmp_path / "run", records)
    assert write_report([run])["health_overhead"][str(run)] == 0.05  # 0.2 s of 4 s, not 5.2/14
    run = write_metrics(tmp_path / "one", records[:1])
    assert write_report([run])["health_overhead"][str(run)] == 0.5
    # A resumed process traces again in its first window: 101.3% was reported after a resume.
    restarted = {"step": 40, "loss": 0.7, "health_seconds": 9.0, "window_seconds": 6.0}
    run = write_metrics(tmp_path / "resumed", [*records, {**restarted, "resumed": True}])
    assert write_report([run])["health_overhead"][str(run)] == 0.05


def test_compare_refuses_a_pretraining_run_beside_a_fine_tuning(tmp_path, capsys):
    # Their "loss" lines (25 for ELECTRA's, 0.74 a cross-entropy) shared one axis and colour.
    pretrained = write_metrics(tmp_path / "pretrained", healthy_run())
    tuned = write_metrics(tmp_path / "tuned", [{"step": 3, "epoch": 1, "loss": 0.74}])
    (tuned / "finetune.json").write_text("{}", encoding="utf-8")
    assert main(["report", str(pretrained), "--compare", str(tuned)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"keras-electra report: error: --compare overlays runs of one kind, but '{pretrained}' "
        f"is a pretraining run and '{tuned}' a fine-tuning, whose losses measure different "
        "things; report them apart."
    )
