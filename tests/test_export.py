"""Exports load and answer the way TF Serving loads and runs them (2.21, and 2.20: its ops)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tfserving_standin import ModelServer, SignatureRunner, replay_warmup

from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError, ElectraError
from keras_electra.export import export, next_version
from keras_electra.pretraining.run import load_run

L = 32  # the tiny run's max_seq_length


@pytest.fixture(scope="module")
def export_dir(tiny_run, tmp_path_factory):
    base = tmp_path_factory.mktemp("saved_models") / "electra"
    return export(tiny_run, base)


@pytest.fixture(scope="module")
def runner(export_dir):
    r = SignatureRunner(str(export_dir))
    yield r
    r.close()


def texts(*values):
    return np.array([v if isinstance(v, bytes) else v.encode("utf-8") for v in values], object)


def test_export_writes_a_numbered_version_atomically(export_dir):
    base = export_dir.parent
    assert export_dir.name == "1"
    assert (export_dir / "saved_model.pb").is_file()
    assert (export_dir / "assets.extra" / "tf_serving_warmup_requests").is_file()
    assert json.loads((export_dir / "assets.extra" / "config.json").read_text())["num_layers"] == 1
    # Nothing but numeric version folders is left where TF Serving looks.
    assert [p.name for p in base.iterdir()] == ["1"]
    assert next_version(base) == 2


def test_export_refuses_to_overwrite_a_version(tiny_run, export_dir):
    with pytest.raises(ElectraError, match="already exists"):
        export(tiny_run, export_dir.parent, version=1)


def test_a_max_length_beyond_the_position_table_names_the_flag(tiny_run, tmp_path, capsys):
    # Was: "max_length must be between 4 and 128, got 100000." (the flag is --max-length).
    from keras_electra.cli import main

    command = ["export", "--run", str(tiny_run), "--output", str(tmp_path / "m")]
    assert main([*command, "--max-length", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "--max-length must be between 4 and 128 (the model's position table), got 100000."
    ), err
    assert not (tmp_path / "m").exists()


def test_export_refuses_a_version_folder_or_a_run_as_its_output(tiny_run, export_dir):
    # A version folder as --output would nest the new version where TF Serving never
    # looks; a run directory would mix versions into the run.
    with pytest.raises(ConfigError, match=r"is an export's version folder .*pass the model's"):
        export(tiny_run, export_dir)
    assert [p.name for p in export_dir.iterdir() if p.name.isdigit()] == []
    with pytest.raises(ConfigError, match=r"holds a run or a fine-tuned model \(config\.json\)"):
        export(tiny_run, tiny_run)
    assert not any(p.name.isdigit() for p in tiny_run.iterdir())


AUDIT = r"""
import json, sys
# Only core TensorFlow: ops that need tensorflow_text must be in TF Serving's tf-text set.
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry
sm = saved_model_pb2.SavedModel()
sm.ParseFromString(open(sys.argv[1] + "/saved_model.pb", "rb").read())
ops = set()
for mg in sm.meta_graphs:
    ops.update(n.op for n in mg.graph_def.node)
    for f in mg.graph_def.library.function:
        ops.update(n.op for n in f.node_def)
functions = {f.signature.name for mg in sm.meta_graphs for f in mg.graph_def.library.function}
ops -= functions
print(json.dumps({"ops": sorted(ops),
                  "not_core": sorted(o for o in ops if op_def_registry.get(o) is None),
                  "tf_text_imported": "tensorflow_text" in sys.modules}))
"""

# The tf-text ops of the tokenizers TF Serving (2.20, 2.21) links (FastBertTokenizer and
# BertTokenizer); RoundRobinTrimmer and other newer ops are deliberately absent.
TF_SERVING_TEXT_OPS = {
    "FastBertNormalize",
    "FastWordpieceTokenizeWithOffsets",
    "CaseFoldUTF8",
    "NormalizeUTF8",
    "RegexSplitWithOffsets",
    "WordpieceTokenizeWithOffsets",
}


def test_op_audit_every_op_is_core_or_in_tf_servings_tf_text_set(export_dir):
    result = subprocess.run(
        [sys.executable, "-c", AUDIT, str(export_dir)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    audit = json.loads(result.stdout.strip().splitlines()[-1])
    assert not audit["tf_text_imported"]
    assert "MatMul" in audit["ops"] or "BatchMatMulV2" in audit["ops"]
    assert set(audit["not_core"]) <= TF_SERVING_TEXT_OPS, audit["not_core"]
    assert "FastWordpieceTokenizeWithOffsets" in audit["not_core"]
    assert not [op for op in audit["ops"] if "RoundRobin" in op]


def test_every_op_of_the_export_is_one_tf_serving_2_20_has(export_dir):
    """An export made on this TensorFlow line still loads on a TF Serving 2.20 server
    (docs/installation.md's support matrix): its ops are TensorFlow 2.20's core ops
    (``tests/golden/tf_2.20_ops.txt``, recorded from TensorFlow 2.20.0) or the tf-text ops
    TF Serving links."""
    result = subprocess.run(
        [sys.executable, "-c", AUDIT, str(export_dir)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ops = set(json.loads(result.stdout.strip().splitlines()[-1])["ops"])
    recorded = Path(__file__).parent / "golden" / "tf_2.20_ops.txt"
    lines = recorded.read_text(encoding="utf-8").splitlines()
    serving_2_20 = {line for line in lines if line and not line.startswith("#")}
    assert len(serving_2_20) > 1500 and "MatMul" in serving_2_20
    assert not ops - serving_2_20 - TF_SERVING_TEXT_OPS, sorted(ops - serving_2_20)


def test_signature_audit_real_dtypes_names_and_batch_dimension(runner):
    sigs = runner.signatures
    assert set(sigs) >= {"serving_default", "score_pair"}
    expected = {
        "serving_default": ({"text"}, {"replaced_prob", "tokens", "token_ids", "num_tokens"}),
        "score_pair": (
            {"text_a", "text_b"},
            {"replaced_prob", "tokens", "token_ids", "num_tokens"},
        ),
    }
    for name, (inputs, outputs) in expected.items():
        sig = sigs[name]
        assert sig.method_name == "tensorflow/serving/predict"
        assert set(sig.inputs) == inputs and set(sig.outputs) == outputs
        for info in [*sig.inputs.values(), *sig.outputs.values()]:
            assert info.dtype != 0, "DT_INVALID (a ragged output?)"
            assert info.name
            assert info.tensor_shape.dim[0].size == -1
    out = sigs["serving_default"].outputs
    assert [d.size for d in out["replaced_prob"].tensor_shape.dim] == [-1, L]
    assert [d.size for d in out["tokens"].tensor_shape.dim] == [-1, L]
    assert out["replaced_prob"].dtype == tf.float32.as_datatype_enum
    assert out["tokens"].dtype == tf.string.as_datatype_enum
    assert out["token_ids"].dtype == tf.int32.as_datatype_enum
    assert out["num_tokens"].dtype == tf.int32.as_datatype_enum


def test_session_path_matches_the_keras_model(tiny_run, runner):
    model, tokenizer, _ = load_run(tiny_run)
    sentences = ["The king is dead, long live the king.", "What light through yonder window?"]
    got = runner.run("serving_default", {"text": texts(*sentences)})
    inputs = encode_texts(tokenizer, tf.constant(sentences), max_length=L)
    expected = tf.sigmoid(model(inputs, training=False)).numpy() * inputs["padding_mask"].numpy()
    np.testing.assert_allclose(got["replaced_prob"], expected, atol=1e-5)
    np.testing.assert_array_equal(got["token_ids"], inputs["token_ids"].numpy())
    np.testing.assert_array_equal(got["num_tokens"], inputs["padding_mask"].numpy().sum(1))
    assert got["tokens"][0][0] == b"[CLS]"
    n = got["num_tokens"][0]
    assert got["tokens"][0][n - 1] == b"[SEP]" and got["tokens"][0][n] == b""
    assert (got["replaced_prob"][0][n:] == 0).all()

    pair = runner.run("score_pair", {"text_a": texts(sentences[0]), "text_b": texts(sentences[1])})
    pair_inputs = encode_texts(
        tokenizer, tf.constant(sentences[:1]), tf.constant(sentences[1:]), max_length=L
    )
    expected = tf.sigmoid(model(pair_inputs)).numpy() * pair_inputs["padding_mask"].numpy()
    np.testing.assert_allclose(pair["replaced_prob"], expected, atol=1e-5)
    assert (pair["tokens"][0] == b"[SEP]").sum() == 2


def test_warmup_file_replays_without_error(export_dir):
    assert replay_warmup(str(export_dir)) == 3


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x" * 100_000,
        "emoji 🙂🎉 party",
        "中文字符和日本語のテキスト",
        "combining: e\u0301 a\u0308 n\u0303",
        "control\x00chars\x07and\x1b[31m escapes",
        b"invalid \xff\xfe utf-8 \xc3",
    ],
    ids=["empty", "100k-chars", "emoji", "cjk", "combining", "control", "invalid-utf8"],
)
def test_inputs_users_send_give_defined_outputs(runner, value):
    out = runner.run("serving_default", {"text": texts(value)})
    assert out["replaced_prob"].shape == (1, L)
    assert np.isfinite(out["replaced_prob"]).all()
    n = int(out["num_tokens"][0])
    assert 2 <= n <= L  # at least [CLS] [SEP]; long text is truncated to L
    assert (out["tokens"][0][:n] != b"").all() and (out["tokens"][0][n:] == b"").all()
    # The next request still works.
    assert runner.run("serving_default", {"text": texts("ok")})["num_tokens"][0] >= 3


def test_batches_of_zero_and_one_thousand(runner):
    empty = runner.run("serving_default", {"text": np.array([], object)})
    assert empty["replaced_prob"].shape == (0, L) and empty["num_tokens"].shape == (0,)
    many = runner.run(
        "serving_default", {"text": texts(*[f"sentence number {i}" for i in range(1000)])}
    )
    assert many["replaced_prob"].shape == (1000, L)
    assert (many["num_tokens"] > 2).all()


def test_mismatched_pair_lengths_are_one_clear_error(runner):
    from keras_electra.serving.errors import ServingError

    with pytest.raises(ServingError, match="text_a and text_b must have the same length"):
        runner.run("score_pair", {"text_a": texts("a", "b"), "text_b": texts("c")})
    ok = runner.run("score_pair", {"text_a": texts("a"), "text_b": texts("c")})
    assert ok["num_tokens"][0] == 5


def test_grpc_and_rest_clients_against_the_real_export(export_dir, runner):
    from keras_electra.serving.grpc_client import GrpcClient
    from keras_electra.serving.rest_client import RestClient

    sentences = texts("To be, or not to be.", b"bad \xff bytes")
    expected = runner.run("serving_default", {"text": sentences})
    with ModelServer(export_dir.parent, "electra") as server:
        with GrpcClient(server.grpc_target, "electra") as client:
            got = client.predict({"text": sentences})
            np.testing.assert_allclose(got["replaced_prob"], expected["replaced_prob"], atol=1e-6)
            np.testing.assert_array_equal(got["tokens"], expected["tokens"])
            assert client.status()[0]["version"] == 1
        rest = RestClient(server.rest_url, "electra")
        for fmt in ("columnar", "row"):
            got = rest.predict({"text": [b"To be, or not to be.", b"bad \xff bytes"]}, format=fmt)
            np.testing.assert_allclose(got["replaced_prob"], expected["replaced_prob"], atol=1e-5)
            np.testing.assert_array_equal(got["num_tokens"], expected["num_tokens"])


def test_cli_export_and_score(tiny_run, tmp_path, capsys):
    from keras_electra.cli import main

    assert main(["export", "--run", str(tiny_run), "--output", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "1" / "saved_model.pb").is_file()
    capsys.readouterr()
    assert main(["score", "--model", str(tmp_path / "m"), "--json", "The king is dead."]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records[0]["tokens"] == ["the", "king", "is", "dead", "."]
    assert all(0.0 <= p <= 1.0 for p in records[0]["replaced_prob"])
    assert (
        main(["export", "--run", str(tmp_path / "missing"), "--output", str(tmp_path / "m")]) == 2
    )
    assert "not a run directory" in capsys.readouterr().err


def test_cli_score_against_a_grpc_server(export_dir, runner, capsys):
    from keras_electra.cli import main

    expected = runner.run("serving_default", {"text": texts("To be, or not to be.")})
    with ModelServer(export_dir.parent, "electra") as server:
        capsys.readouterr()
        assert (
            main(["score", "--server", server.grpc_target, "--json", "To be, or not to be."]) == 0
        )
        record = json.loads(capsys.readouterr().out)[0]
    n = int(expected["num_tokens"][0])
    np.testing.assert_allclose(
        record["replaced_prob"], expected["replaced_prob"][0][1 : n - 1], atol=1e-6
    )
    assert record["tokens"] == [t.decode() for t in expected["tokens"][0][1 : n - 1]]
    # Nothing listening: one clear sentence, exit status 2.
    assert main(["score", "--server", "127.0.0.1:9", "--timeout", "0.5", "x"]) == 2
    assert "Traceback" not in capsys.readouterr().err
