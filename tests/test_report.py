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


def test_report_on_a_run_still_writing_its_first_window(tmp_path):
    run = write_metrics(tmp_path / "young", [])
    with pytest.raises(ConfigError, match="no complete metrics line yet"):
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
