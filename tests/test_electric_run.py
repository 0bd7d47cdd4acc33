"""An Electric run end to end: ``keras-electra pretrain --objective electric --preset
tiny`` with its health metrics and report, its export's energies and sentence scores in
process and from the TF Serving stand-in (gRPC and REST, through the clients), and the
formats that cannot hold it refusing in one sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tfserving_standin import ModelServer

from keras_electra.cli import main
from keras_electra.convert import convert_run
from keras_electra.errors import ConfigError
from keras_electra.scoring import score_with_saved_model, score_with_server
from keras_electra.serving.export_reader import SentenceScore, export_reader
from keras_electra.serving.grpc_client import GrpcClient
from keras_electra.serving.rest_client import RestClient

TEXTS = ["the king is dead", "long live the king"]


@pytest.fixture(scope="module")
def electric_run(tmp_path_factory, small_corpus) -> Path:
    run_dir = tmp_path_factory.mktemp("electric") / "run"
    main(
        ["pretrain", "--objective", "electric", "--preset", "tiny", "--corpus", str(small_corpus)]
        + ["--output", str(run_dir), "--steps", "4", "--batch-size", "8"]
        + ["--max-seq-length", "32", "--vocab-size", "2000", "--log-every", "2", "--no-progress"]
        + ["--sample", TEXTS[0]]
    )
    return run_dir


@pytest.fixture(scope="module")
def electric_export(electric_run, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("saved") / "electric"
    main(["export", "--run", str(electric_run), "--output", str(base)])
    return base


def test_the_cli_run_records_electrics_metrics_health_and_report(electric_run, capsys):
    run = json.loads((electric_run / "run.json").read_text())
    config = json.loads((electric_run / "config.json").read_text())
    assert run["objective"] == "electric" and config["temperature"] == 1.0
    last = json.loads((electric_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 4
    assert {"cloze_loss", "cloze_accuracy", "disc_loss", "disc_auc", "grad_norm_generator"} <= set(
        last
    )
    # Health: the probe's own corruption (the cloze model's samples) and the fixed ones.
    assert {"context_auc", "rarity_auc", "probe_replaced_fraction", "disc_effective_rank"} <= set(
        last
    )
    assert 0.05 < last["probe_replaced_fraction"] < 0.3
    assert main(["report", str(electric_run)]) == 0
    report = json.loads((electric_run / "report.json").read_text())
    assert "cloze_loss" in json.dumps(report)
    assert (electric_run / "report.png").stat().st_size > 0


def test_the_export_scores_sentences_in_process_and_from_tf_serving(electric_export, capsys):
    local = score_with_saved_model(electric_export, TEXTS)
    assert local.kind == "sentence_score"
    first = local[0]
    assert isinstance(first, SentenceScore)
    assert [t for t, _ in first.tokens] == ["the", "king", "is", "dead"]
    assert first.score == pytest.approx(-sum(e for _, e in first.tokens), abs=1e-4)

    capsys.readouterr()
    main(["score", "--model", str(electric_export), "--json", *TEXTS])
    rows = json.loads(capsys.readouterr().out)
    assert [r["text"] for r in rows] == TEXTS
    assert {"tokens", "energy", "sentence_score"} <= set(rows[0])
    assert rows[1]["sentence_score"] == pytest.approx(local[1].score, abs=1e-5)
    main(["score", "--model", str(electric_export), TEXTS[0]])
    assert "sentence_score" in capsys.readouterr().out

    with ModelServer(electric_export, "electric") as server:
        for target in (server.grpc_target, server.rest_url):
            served = score_with_server(target, "electric", TEXTS)
            assert served.kind == "sentence_score"
            np.testing.assert_allclose([a.score for a in served], [a.score for a in local], 1e-5)
        main(
            ["score", "--server", server.grpc_target, "--model-name", "electric", "--json"] + TEXTS
        )
        assert json.loads(capsys.readouterr().out)[0]["sentence_score"] == rows[0]["sentence_score"]
        # The clients' own calls, read by the export reader.
        with GrpcClient(server.grpc_target, "electric") as client:
            reader = export_reader(client.metadata()["signatures"])
            outputs = client.predict({"text": TEXTS})
        rest = RestClient(server.rest_url, "electric").predict({"text": TEXTS})
        assert reader.kind == "sentence_score"
        np.testing.assert_allclose(outputs["sentence_score"], rest["sentence_score"], 1e-6)
        assert outputs["energy"].shape == (2, 32)
        assert reader.read(outputs)[0].score == pytest.approx(local[0].score, abs=1e-5)


def test_formats_that_cannot_hold_an_electric_run_refuse_in_one_sentence(electric_run, tmp_path):
    for target in ("hf", "keras-hub"):
        with pytest.raises(ConfigError, match=r"^'.*' was pretrained with the electric objective"):
            convert_run(electric_run, tmp_path / target, target)
