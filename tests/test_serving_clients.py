"""Tests of the TF Serving clients against an in-process TF Serving stand-in.

Everything runs on 127.0.0.1: small SavedModels built here (with the exact
signature names and outputs of keras-electra's exports) are served by
``tfserving_standin.ModelServer`` (``tests/tfserving_standin``) over real gRPC
and HTTP, and the clients' results are compared with ``SignatureRunner`` (TF
Serving's loader semantics) and with ``tf.saved_model.load``. Golden REST bodies in
``tests/golden`` come from https://www.tensorflow.org/tfx/serving/api_rest
(see ``tests/golden/README.md``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow_serving.apis import prediction_log_pb2  # noqa: E402
from tfserving_standin import ModelServer, SignatureRunner, replay_warmup  # noqa: E402

from keras_electra.errors import InputDataError  # noqa: E402
from keras_electra.limits import MAX_BATCH_SIZE, MAX_TEXT_CHARS, QA_PADDING_LOGIT  # noqa: E402
from keras_electra.scoring import score_with_saved_model, score_with_server  # noqa: E402
from keras_electra.serving.errors import ServingError  # noqa: E402
from keras_electra.serving.export_reader import (  # noqa: E402
    KINDS,
    Classification,
    export_reader,
    saved_model_signatures,
)
from keras_electra.serving.grpc_client import GrpcClient  # noqa: E402
from keras_electra.serving.rest_client import RestClient, predict_body  # noqa: E402
from keras_electra.serving.signatures import (  # noqa: E402
    CLASSIFY_METHOD_NAME,
    PREDICT_METHOD_NAME,
    REGRESS_METHOD_NAME,
    check_classify_signature,
    set_signature_method_name,
)
from keras_electra.serving.tensors import make_example  # noqa: E402
from keras_electra.serving.warmup import predict_log, write_warmup_requests  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"
LABELS = ["negative", "positive"]
TEXTS = ["the chef cooked the meal", "a cat", "x"]


# -- test SavedModels ---------------------------------------------------------------


def _token_outputs(tokens: tf.RaggedTensor) -> dict[str, tf.Tensor]:
    """Deterministic stand-in for ELECTRA's discriminator outputs."""
    dense = tokens.to_tensor(default_value="")
    mask = tf.not_equal(dense, "")
    lengths = tf.cast(tf.strings.length(dense), tf.float32)
    return {
        "replaced_prob": tf.where(mask, 1.0 / (1.0 + lengths), 0.0),
        "tokens": dense,
        "token_ids": tf.where(
            mask, tf.cast(tf.strings.to_hash_bucket_fast(dense, 1000), tf.int32) + 1, 0
        ),
        "num_tokens": tf.cast(tokens.row_lengths(), tf.int32),
    }


class _Discriminator(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        return _token_outputs(tf.strings.split(text))

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="text_a"),
            tf.TensorSpec([None], tf.string, name="text_b"),
        ]
    )
    def score_pair(self, text_a: tf.Tensor, text_b: tf.Tensor) -> dict[str, tf.Tensor]:
        return _token_outputs(
            tf.concat([tf.strings.split(text_a), tf.strings.split(text_b)], axis=1)
        )


def _class_outputs(length: tf.Tensor) -> dict[str, tf.Tensor]:
    positive = tf.sigmoid((tf.cast(length, tf.float32) - 10.0) / 5.0)
    return {
        "scores": tf.stack([1.0 - positive, positive], axis=1),
        "classes": tf.tile(tf.constant([LABELS]), [tf.shape(length)[0], 1]),
    }


class _Classifier(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        return _class_outputs(tf.strings.length(text))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        features = tf.io.parse_example(
            inputs,
            {
                "text": tf.io.FixedLenFeature([], tf.string),
                "text_b": tf.io.FixedLenFeature([], tf.string, default_value=""),
            },
        )
        return _class_outputs(
            tf.strings.length(features["text"]) + tf.strings.length(features["text_b"])
        )


def _expected_scores(text: str, text_b: str = "") -> list[tuple[str, float]]:
    length = len(text.encode()) + len(text_b.encode())
    positive = float(tf.sigmoid((np.float32(length) - 10.0) / 5.0))
    return [(LABELS[0], 1.0 - positive), (LABELS[1], positive)]


class _Unknown(tf.Module):
    """A model of no kind keras-electra exports."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": 2.0 * x}


class _BatchEcho(tf.Module):
    """Each text back with the size of the batch it came in, as the export's outputs."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        n = tf.shape(text)[0]
        size = tf.fill([n], tf.strings.as_string(n))
        return {
            "tokens": tf.stack([text, size], axis=1),
            "replaced_prob": tf.stack([tf.zeros([n]), tf.cast(tf.fill([n], n), tf.float32)], 1),
            "num_tokens": tf.fill([n], 2),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        text = tf.io.parse_example(inputs, {"text": tf.io.FixedLenFeature([], tf.string)})
        n = tf.shape(inputs)[0]
        return {
            "classes": tf.stack([text["text"], tf.strings.as_string(tf.fill([n], n))], axis=1),
            "scores": tf.cast(tf.stack([tf.range(n), tf.fill([n], n)], axis=1), tf.float32),
        }


class _Windows(tf.Module):
    """A question-answering signature's logits: per question, one window a word of its
    context, each window's logits -1; a batch pads its shorter questions' windows with
    the export's padding logit, as a QA export does."""

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None], tf.string, name="context"),
        ]
    )
    def serve(self, question: tf.Tensor, context: tf.Tensor) -> dict[str, tf.Tensor]:
        windows = tf.strings.split(context).row_lengths()
        real = tf.sequence_mask(windows, tf.reduce_max(windows))[:, :, None]
        logits = tf.where(tf.tile(real, [1, 1, 4]), -1.0, QA_PADDING_LOGIT)
        return {"start_logits": logits, "end_logits": logits, "answer": question}


class _RegressEcho(tf.Module):
    """A regression signature giving each example's ``n`` times 100 plus the size of the
    batch it came in."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        n = tf.io.parse_example(inputs, {"n": tf.io.FixedLenFeature([], tf.float32)})["n"]
        size = tf.cast(tf.shape(inputs)[0], tf.float32)
        return {"outputs": tf.expand_dims(100.0 * n + size, 1)}


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("saved_models")
    discriminator = _Discriminator()
    tf.saved_model.save(
        discriminator,
        str(base / "electra" / "1"),
        signatures={"serving_default": discriminator.serve, "score_pair": discriminator.score_pair},
    )
    classifier = _Classifier()
    tf.saved_model.save(
        classifier,
        str(base / "classifier" / "1"),
        signatures={"serving_default": classifier.serve, "classify": classifier.classify},
    )
    set_signature_method_name(base / "classifier" / "1", "classify", CLASSIFY_METHOD_NAME)
    echo = _BatchEcho()
    tf.saved_model.save(
        echo,
        str(base / "echo" / "1"),
        signatures={"serving_default": echo.serve, "classify": echo.classify},
    )
    set_signature_method_name(base / "echo" / "1", "classify", CLASSIFY_METHOD_NAME)
    windows = _Windows()
    tf.saved_model.save(
        windows, str(base / "windows" / "1"), signatures={"serving_default": windows.serve}
    )
    unknown = _Unknown()
    signatures = {"serving_default": unknown.serve, "double": unknown.serve}
    tf.saved_model.save(unknown, str(base / "unknown" / "1"), signatures=signatures)
    regress_echo = _RegressEcho()
    path = base / "regress_echo" / "1"
    tf.saved_model.save(regress_echo, str(path), signatures={"regress": regress_echo.regress})
    set_signature_method_name(path, "regress", REGRESS_METHOD_NAME)
    names = ("electra", "classifier", "echo", "windows", "unknown", "regress_echo")
    return {name: base / name for name in names}


@pytest.fixture(scope="module")
def regressor_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fine-tuned regressor's export as `keras-electra export` writes it (its module and
    export code), of a one-layer ELECTRA left untrained: its values are arbitrary but the
    same wherever the export runs."""
    import keras

    from keras_electra.config import ElectraConfig
    from keras_electra.data import SPECIAL_TOKENS, ElectraTokenizer
    from keras_electra.export.classifier import TextClassifierModule
    from keras_electra.export.saved_model import export_module
    from keras_electra.finetuning.models import ElectraRegressor
    from keras_electra.finetuning.saved import FinetunedModel
    from keras_electra.finetuning.settings import FinetuneSettings
    from keras_electra.finetuning.tasks import get_task
    from keras_electra.layers.backbone import ElectraBackbone

    keras.utils.set_random_seed(0)
    vocab = [*SPECIAL_TOKENS, *sorted(set(" ".join(TEXTS + ["a dog ran far"]).split()))]
    config = ElectraConfig.from_preset("tiny", vocab_size=len(vocab), num_layers=1)
    model = ElectraRegressor(ElectraBackbone(config))
    ids = np.ones((1, 8), "int32")
    model({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids})
    settings = FinetuneSettings(task="regress", max_seq_length=16)
    finetuned = FinetunedModel(
        model, ElectraTokenizer(vocab), settings, get_task("regress"), config
    )
    return export_module(
        TextClassifierModule(finetuned), tmp_path_factory.mktemp("saved_models") / "regressor"
    )


SHORT = 8  # the sequence length of short_exports' models, [CLS] and [SEP] included
SHORT_WORDS = "the cat sat on a mat by dog ran far".split()


@pytest.fixture(scope="module")
def short_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A replaced-token, an Electric and a tagger export as `keras-electra export` writes
    them (their modules and export code), of one-layer models left untrained, with
    ``L = SHORT`` tokens: answers arbitrary, lengths real."""
    import keras

    from keras_electra.config import ElectraConfig
    from keras_electra.data import SPECIAL_TOKENS, ElectraTokenizer
    from keras_electra.export.saved_model import EnergyModule, ReplacedTokenModule, export_module
    from keras_electra.export.tagger import TextTaggerModule
    from keras_electra.finetuning.models import ElectraTagger
    from keras_electra.finetuning.saved import FinetunedModel
    from keras_electra.finetuning.settings import FinetuneSettings
    from keras_electra.finetuning.tasks import get_task
    from keras_electra.layers.backbone import ElectraBackbone
    from keras_electra.pretraining.pretrainer import ElectraPretrainer

    keras.utils.set_random_seed(0)
    vocab = [*SPECIAL_TOKENS, *SHORT_WORDS]
    tokenizer = ElectraTokenizer(vocab)
    sizes = dict(vocab_size=len(vocab), num_layers=1, max_position_embeddings=16)
    ids = np.ones((1, SHORT), "int32")
    x = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids}
    pretrainer = ElectraPretrainer.from_preset("tiny", seed=1, **sizes)
    pretrainer(x)
    backbone, head = pretrainer.discriminator_backbone(), pretrainer.token_head
    specials = (pretrainer.config.cls_token_id, pretrainer.config.sep_token_id)
    config = ElectraConfig.from_preset("tiny", **sizes)
    tagger = ElectraTagger(ElectraBackbone(config), 2)
    tagger(x)
    settings = FinetuneSettings(task="tag", labels=["O", "B-PER"], max_seq_length=SHORT)
    finetuned = FinetunedModel(tagger, tokenizer, settings, get_task("tag"), config)
    modules = {
        "electra": ReplacedTokenModule(tokenizer, backbone, head, SHORT),
        "electric": EnergyModule(tokenizer, backbone, head, specials, SHORT),
        "tagger": TextTaggerModule(finetuned),
    }
    base = tmp_path_factory.mktemp("short_exports")
    return {name: export_module(module, base / name) for name, module in modules.items()}


@pytest.fixture(scope="module")
def electra_server(exports: dict[str, Path]) -> Iterator[ModelServer]:
    with ModelServer(exports["electra"], "electra") as server:
        yield server


@pytest.fixture(scope="module")
def classifier_server(exports: dict[str, Path]) -> Iterator[ModelServer]:
    # The stricter method-name check proves the rewritten method name is what TF Serving wants.
    with ModelServer(
        exports["classifier"], "classifier", version_labels={"stable": 1}, method_name_check=True
    ) as server:
        yield server


@pytest.fixture(scope="module")
def electra_runner(exports: dict[str, Path]) -> Iterator[SignatureRunner]:
    with SignatureRunner(exports["electra"] / "1") as runner:
        yield runner


def _assert_same(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


# -- predict --------------------------------------------------------------------------


def test_predict_agrees_across_grpc_rest_runner_and_tf_load(
    exports: dict[str, Path], electra_server: ModelServer, electra_runner: SignatureRunner
) -> None:
    expected = electra_runner.run("serving_default", {"text": TEXTS})
    loaded = tf.saved_model.load(str(exports["electra"] / "1"))
    eager = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    _assert_same(expected, {name: tensor.numpy() for name, tensor in eager.items()})
    assert expected["tokens"][1].tolist() == [b"a", b"cat", b"", b"", b""]
    np.testing.assert_array_equal(expected["num_tokens"], [5, 2, 1])
    assert expected["replaced_prob"][1, 2] == 0.0  # padding

    with GrpcClient(electra_server.grpc_target, "electra") as client:
        _assert_same(client.predict({"text": TEXTS}), expected)
    rest = RestClient(electra_server.rest_url, "electra")
    _assert_same(rest.predict({"text": TEXTS}, format="columnar"), expected)
    _assert_same(rest.predict({"text": TEXTS}, format="row"), expected)


def test_score_pair_with_two_inputs_in_both_rest_formats(
    electra_server: ModelServer, electra_runner: SignatureRunner
) -> None:
    pair = {"text_a": ["the cat", "a"], "text_b": ["sat down", "b c"]}
    expected = electra_runner.run("score_pair", pair)
    np.testing.assert_array_equal(expected["num_tokens"], [4, 3])
    with GrpcClient(electra_server.grpc_target, "electra") as client:
        _assert_same(client.predict(pair, "score_pair"), expected)
    rest = RestClient(electra_server.rest_url, "electra")
    for request_format in ("row", "columnar"):
        _assert_same(rest.predict(pair, "score_pair", format=request_format), expected)


def test_invalid_utf8_bytes_travel_as_b64_and_come_back_unchanged(
    electra_server: ModelServer, electra_runner: SignatureRunner
) -> None:
    texts = [b"\xff\xfe caf\xc3\xa9", b"plain"]
    assert predict_body({"text": texts}, None, "columnar")["inputs"]["text"][0] == {
        "b64": "//4gY2Fmw6k="
    }
    expected = electra_runner.run("serving_default", {"text": texts})
    assert expected["tokens"][0, 0] == b"\xff\xfe"
    with GrpcClient(electra_server.grpc_target, "electra") as client:
        _assert_same(client.predict({"text": texts}), expected)
    rest = RestClient(electra_server.rest_url, "electra")
    for request_format in ("row", "columnar"):
        _assert_same(rest.predict({"text": texts}, format=request_format), expected)


def test_a_large_batch_goes_in_chunks_of_at_most_max_batch_size_in_order(
    exports: dict[str, Path], electra_server: ModelServer, electra_runner: SignatureRunner
) -> None:
    """70 texts of different lengths through both clients with chunks of 32 (the default)
    and of 4: each request holds at most that many, and the joined outputs are the one
    batch's, row for row (the shorter chunks' rows padded as one batch pads them)."""
    texts = [" ".join(["w"] * (i % 9)) + f" t{i}" for i in range(70)]
    expected = electra_runner.run("serving_default", {"text": texts})

    def assert_joined(actual: dict[str, np.ndarray]) -> None:  # floats: a batch's rounding
        assert sorted(actual) == sorted(expected)
        for name, value in expected.items():
            assert actual[name].dtype == value.dtype, name
            if value.dtype.kind == "f":
                np.testing.assert_allclose(actual[name], value, rtol=1e-6, err_msg=name)
            else:
                np.testing.assert_array_equal(actual[name], value, err_msg=name)

    for size in (None, 4):
        options = {} if size is None else {"max_batch_size": size}
        with GrpcClient(electra_server.grpc_target, "electra", **options) as client:
            assert_joined(client.predict({"text": texts}))
        rest = RestClient(electra_server.rest_url, "electra", **options)
        for request_format in ("columnar", "row"):
            assert_joined(rest.predict({"text": texts}, format=request_format))
    with ModelServer(exports["echo"], "echo") as server:
        for size in (MAX_BATCH_SIZE, 4):
            with GrpcClient(server.grpc_target, "echo", max_batch_size=size) as client:
                grpc_rows = client.predict({"text": texts})
                grpc_classes = client.classify([{"text": t} for t in texts])
            rest = RestClient(server.rest_url, "echo", max_batch_size=size)
            rest_rows = rest.predict({"text": texts})
            rest_classes = rest.classify([{"text": t} for t in texts])
            sizes = [min(size, 70 - start) for start in range(0, 70, size)]
            per_row = [n for n in sizes for _ in range(n)]
            for rows in (grpc_rows, rest_rows):
                assert [t.decode() for t in rows["tokens"][:, 0]] == texts  # all, in order
                assert rows["replaced_prob"][:, 1].astype(int).tolist() == per_row
            for classes in (grpc_classes, rest_classes):
                assert [label for (label, _), _ in classes] == texts
                assert [int(float(n)) for _, (n, _) in classes] == per_row
        # score, against the server and in process: the same rows, at most 32 at a time
        for rows in (
            score_with_server(server.grpc_target, "echo", texts),
            score_with_server(server.rest_url, "echo", texts),
            score_with_saved_model(str(exports["echo"]), texts),
        ):
            assert [row[0][0] for row in rows] == texts
            assert {row[1][0] for row in rows} == {"32", "6"}


def test_qa_logits_joined_from_chunks_are_padded_as_one_batch_pads_them(
    exports: dict[str, Path],
) -> None:
    # 40 questions in chunks of 32: the first chunk's windows were padded with 0 where one
    # batch pads them with the export's -10000, and an argmax over the logits took padding.
    contexts = ["a"] * 32 + ["a b c d e"] * 8
    inputs = {"question": [f"q{i}" for i in range(40)], "context": contexts}
    with ModelServer(exports["windows"], "windows") as server:
        with GrpcClient(server.grpc_target, "windows", max_batch_size=None) as client:
            whole = client.predict(inputs)
        with GrpcClient(server.grpc_target, "windows") as client:
            chunked = client.predict(inputs)
        rest = RestClient(server.rest_url, "windows").predict(inputs)
    assert whole["start_logits"].shape == (40, 5, 4)
    assert whole["start_logits"][0, 1, 0] == QA_PADDING_LOGIT
    for joined in (chunked, rest):
        for name in ("start_logits", "end_logits"):
            np.testing.assert_array_equal(joined[name], whole[name], err_msg=name)


def test_an_empty_list_of_texts_is_a_batch_of_none(electra_server: ModelServer) -> None:
    # numpy makes [] float64: gRPC sent DT_DOUBLE and the server refused it ("Expects arg[0]
    # to be string but double is provided").
    with GrpcClient(electra_server.grpc_target, "electra") as client:
        out = client.predict({"text": []})
    assert out["num_tokens"].shape == (0,) and out["replaced_prob"].shape[0] == 0
    out = RestClient(electra_server.rest_url, "electra").predict({"text": []})
    assert out["num_tokens"].size == 0


def test_an_empty_batch_has_the_same_answer_from_both_clients_and_in_process(
    exports: dict[str, Path],
) -> None:
    """No texts give what many give, with no rows: predict() the outputs in their rank and
    dtype (REST gave ``(0,)`` where gRPC gave ``(0, 2)``; its row format an HTTP 400),
    classify() and regress() an empty list (both raised the server's refusal of an empty
    request, in other words over gRPC and REST), the scorers no answers."""
    cases = {"electra": ["a cat"], "classifier": ["a fine film"]}
    for name, texts in cases.items():
        with ModelServer(exports[name], name) as server:
            with GrpcClient(server.grpc_target, name) as grpc:
                rest = RestClient(server.rest_url, name)
                full = grpc.predict({"text": texts})
                none = grpc.predict({"text": []})  # the server's tensors, of no rows
                answers = [
                    rest.predict({"text": []}),
                    rest.predict({"text": []}, format="row"),
                    rest.predict({"text": np.array([], object)}),
                ]
                for answer in [none, *answers]:
                    assert answer.keys() == full.keys()
                    for key, value in full.items():
                        assert answer[key].shape == none[key].shape, (key, answer[key].shape)
                        assert answer[key].shape[0] == 0 and answer[key].ndim == value.ndim
                        assert answer[key].dtype == value.dtype, key
                        if key == "scores":  # [-1, 2]: the classes are known
                            assert answer[key].shape == (0, 2)
                if name == "classifier":
                    assert grpc.classify([]) == rest.classify([]) == []
            for target in (server.grpc_target, server.rest_url):
                assert list(score_with_server(target, name, [])) == []
        assert list(score_with_saved_model(exports[name], [])) == []
    with ModelServer(exports["regress_echo"], "regress_echo") as server:
        with GrpcClient(server.grpc_target, "regress_echo") as grpc:
            assert grpc.regress([]) == []
        assert RestClient(server.rest_url, "regress_echo").regress([]) == []


@pytest.mark.parametrize("name", ["electra", "electric", "tagger"])
def test_score_says_which_texts_the_export_cut_at_its_length(name, short_exports, capsys):
    """A text longer than the export's L tokens was scored on its first L without a word:
    now one line on stderr counts them, and their --json rows say "truncated": true, in
    process and through TF Serving's gRPC and REST alike. A text that fits says nothing."""
    import json

    from keras_electra.cli import main

    export_dir = short_exports[name]
    fits, cut = "the cat sat", " ".join(SHORT_WORDS)  # 3 and 10 word pieces; 6 fit
    if name == "tagger":
        said = "1 of 3 texts was longer than the export's length: its words past it are "
        said += "tagged O without being scored"
    else:
        said = f"1 of 3 texts was cut at the export's length of {SHORT} tokens: its scores "
        said += f"cover the first {SHORT - 2} word pieces only"
    said += ' (its --json row says "truncated": true).'
    with ModelServer(export_dir, "served") as server:
        for where in (["--model", str(export_dir)],
                      ["--server", server.grpc_target, "--model-name", "served"],
                      ["--server", server.rest_url, "--model-name", "served"]):  # fmt: skip
            capsys.readouterr()
            assert main(["score", *where, fits, cut, "a cat"]) == 0
            out, err = capsys.readouterr()
            assert err == said + "\n", (where, err)
            assert main(["score", *where, "--json", fits, cut, "a cat"]) == 0
            out, err = capsys.readouterr()
            assert err == said + "\n", (where, err)
            rows = json.loads(out)
            assert [row.get("truncated") for row in rows] == [None, True, None], where
            assert main(["score", *where, fits, "a cat"]) == 0
            assert capsys.readouterr().err == "", where
    scores = score_with_saved_model(export_dir, [fits, cut, fits])
    assert scores.truncated == [False, True, False]
    note = score_with_saved_model(export_dir, [cut, fits, cut]).truncation_note()
    assert note.startswith("2 of 3 texts were ") and 'their --json rows say "t' in note, note
    note = score_with_saved_model(export_dir, [cut]).truncation_note()
    assert note.startswith("The text was ") and 'its --json row says "t' in note, note
    if name != "tagger":  # the cut text's scores are its first L - 2 pieces'
        tokens = scores[1] if name == "electra" else scores[1].tokens
        assert [token for token, _ in tokens] == SHORT_WORDS[: SHORT - 2]


def test_a_kind_whose_outputs_do_not_say_is_never_marked_cut(exports) -> None:
    # A classifier's answer does not say how many tokens it read; a token export of no
    # fixed length (the stand-in here) cannot be told to have filled it.
    for name in ("classifier", "electra"):
        scores = score_with_saved_model(exports[name], ["x " * 600])
        assert scores.truncated is None and scores.truncation_note() is None, name
        assert "truncated" not in scores.records()[0]


def test_texts_are_cut_as_the_export_cuts_them(exports: dict[str, Path]) -> None:
    long_text = "é" * (MAX_TEXT_CHARS + 7)
    long_bytes = b"x" * (4 * MAX_TEXT_CHARS + 7)
    with ModelServer(exports["echo"], "echo") as server:
        with GrpcClient(server.grpc_target, "echo") as client:
            grpc_rows = client.predict({"text": [long_text, long_bytes]})
        rest_rows = RestClient(server.rest_url, "echo").predict({"text": [long_text, long_bytes]})
    for rows in (grpc_rows, rest_rows):
        assert rows["tokens"][0, 0].decode() == "é" * MAX_TEXT_CHARS
        assert len(rows["tokens"][1, 0]) == 4 * MAX_TEXT_CHARS
    (row,) = score_with_saved_model(str(exports["echo"]), [long_text])
    assert row[0][0] == "é" * MAX_TEXT_CHARS


def test_every_text_input_of_every_export_kind_is_cut() -> None:
    from keras_electra.limits import TEXT_INPUTS, cap_texts
    from keras_electra.serving.export_reader import KINDS

    names = {name for kind in KINDS for layout in kind.layouts for name in layout}
    names |= {"text_a", "text_b"}  # score_pair's inputs
    assert names == set(TEXT_INPUTS)
    long_text = "q" * (MAX_TEXT_CHARS + 3)
    capped = cap_texts({name: [long_text, "short"] for name in names} | {"n": [long_text]})
    assert all(capped[name] == ["q" * MAX_TEXT_CHARS, "short"] for name in names)
    assert capped["n"] == [long_text]


def test_score_names_an_argument_that_is_not_utf8_in_one_sentence(exports, tmp_path) -> None:
    """Bytes that are not UTF-8 on the command line reach Python as lone surrogates, which
    no library call can encode: one sentence, exit status 2, no traceback."""
    import subprocess
    import sys

    from keras_electra.errors import InputDataError

    with pytest.raises(InputDataError, match="Text 2 is not valid UTF-8 .at character 3.") as err:
        score_with_saved_model(str(exports["echo"]), ["fine", "ab\udcff"])
    assert "\n" not in str(err.value)
    root = Path(__file__).resolve().parents[1]
    for argv in ([b"--model", str(exports["echo"]).encode(), b"caf\xe9"],
                 [b"--model", str(tmp_path).encode() + b"/\xff", b"fine"],
                 [b"--server", b"127.0.0.1:9", b"--json", b"\xff\xfe"]):  # fmt: skip
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"keras_electra.cli", b"score", *argv],
            cwd=root, capture_output=True, timeout=300,
        )  # fmt: skip
        err_text = done.stderr.decode("utf-8", "replace").strip()
        assert done.returncode == 2, err_text
        assert "Traceback" not in err_text and len(err_text.splitlines()) == 1, err_text
        assert "is not valid UTF-8" in err_text


def test_score_refuses_an_empty_text_as_predict_does(exports, capsys) -> None:
    """An empty or all-whitespace text has no tokens to score: one sentence naming it (and
    its input, for a two-input export) before any scoring, in the library and the command."""
    from keras_electra import scoring
    from keras_electra.cli import main
    from keras_electra.errors import InputDataError
    from keras_electra.serving.export_reader import KINDS, ExportReader

    with pytest.raises(InputDataError, match="^Text 2 is empty; pass text to score"):
        score_with_saved_model(str(exports["echo"]), ["fine", " \t "])
    qa = ExportReader(KINDS[-1], ("question", "context"))
    with pytest.raises(InputDataError, match="^The context of example 2 is empty"):
        scoring._inputs(qa, ["Who ran?", "Ann ran.", "Why?", b" "])
    capsys.readouterr()
    assert main(["score", "--model", str(exports["echo"]), "fine", ""]) == 2
    said = capsys.readouterr().err.strip()
    assert said.endswith("Text 2 is empty; pass text to score, or leave it out."), said


# -- classify -------------------------------------------------------------------------


def test_classify_over_grpc_and_rest_matches_the_model(
    exports: dict[str, Path], classifier_server: ModelServer
) -> None:
    examples = [{"text": "a wonderful film"}, {"text": "bad", "text_b": "very bad indeed"}]
    expected = [_expected_scores("a wonderful film"), _expected_scores("bad", "very bad indeed")]
    with SignatureRunner(exports["classifier"] / "1") as runner:
        serialized = [make_example(example).SerializeToString() for example in examples]
        direct = runner.run("classify", {"inputs": serialized})
    np.testing.assert_allclose(direct["scores"], [[s for _, s in row] for row in expected])

    with GrpcClient(classifier_server.grpc_target, "classifier") as client:
        grpc_result = client.classify(examples)
    rest_result = RestClient(classifier_server.rest_url, "classifier").classify(examples)
    for result in (grpc_result, rest_result):
        assert [[label for label, _ in row] for row in result] == [LABELS, LABELS]
        np.testing.assert_allclose(
            [[score for _, score in row] for row in result],
            direct["scores"],
            rtol=1e-6,
        )
    # REST prints float32 scores at float32 precision, so both APIs give the same numbers.
    assert rest_result == grpc_result


def test_method_name_rewrite_is_what_classify_needs(
    exports: dict[str, Path], tmp_path: Path
) -> None:
    export = tmp_path / "1"
    shutil.copytree(exports["classifier"] / "1", export)
    loaded = tf.saved_model.load(str(export))  # the rewritten model still loads in TF2
    scores = loaded.signatures["classify"](
        inputs=tf.constant([make_example({"text": "good"}).SerializeToString()])
    )["scores"]
    assert scores.shape == (1, 2)

    set_signature_method_name(export, "classify", PREDICT_METHOD_NAME)  # as tf.saved_model.save
    with ModelServer(export, "plain", method_name_check=True) as server:
        with GrpcClient(server.grpc_target, "plain", retries=0) as client:
            with pytest.raises(ServingError, match="method_name to be tensorflow/serving/classify"):
                client.classify([{"text": "good"}])
            assert client.status()[0]["state"] == "AVAILABLE"  # still serving

    with SignatureRunner(export) as runner:
        with pytest.raises(ServingError, match="input named 'inputs'"):
            check_classify_signature("serving_default", runner.signatures["serving_default"])


# -- regress --------------------------------------------------------------------------


def test_regress_over_grpc_and_rest_matches_the_model(regressor_export: Path) -> None:
    """A regressor export's ``regress`` signature through TF Serving's Regress API gives the
    values it gives in process, one per example, in order (regress() was missing)."""
    examples = [{"text": text} for text in [*TEXTS, "a dog ran far", ""]]
    with SignatureRunner(regressor_export) as runner:
        assert runner.signatures["regress"].method_name == REGRESS_METHOD_NAME
        serialized = [make_example(example).SerializeToString() for example in examples]
        direct = runner.run("regress", {"inputs": serialized})["outputs"]
        served = runner.run("serving_default", {"text": [e["text"] for e in examples]})
    assert direct.shape == (5, 1) and len(set(direct[:, 0].tolist())) == 5
    loaded = tf.saved_model.load(str(regressor_export))
    eager = loaded.signatures["regress"](inputs=tf.constant(serialized))["outputs"].numpy()
    for in_process in (eager, served["scores"]):
        np.testing.assert_allclose(in_process, direct, rtol=1e-6)

    # Its warmup file warms the Regress API too, as a classifier's warms Classify.
    assert replay_warmup(regressor_export) == 3
    warmup = regressor_export / "assets.extra" / "tf_serving_warmup_requests"
    kinds = [
        prediction_log_pb2.PredictionLog.FromString(record).WhichOneof("log_type")
        for record in tf.data.TFRecordDataset(str(warmup)).as_numpy_iterator()
    ]
    assert kinds == ["predict_log", "predict_log", "regress_log"], kinds

    # The method-name check proves the export's method name is the one TF Serving wants.
    with ModelServer(regressor_export, "regressor", method_name_check=True) as server:
        with GrpcClient(server.grpc_target, "regressor") as client:
            grpc_values = client.regress(examples)
        rest_values = RestClient(server.rest_url, "regressor").regress(examples)
        pinned = RestClient(server.rest_url, "regressor", version=1).regress(examples)
    assert all(isinstance(value, float) for value in grpc_values + rest_values)
    np.testing.assert_allclose(grpc_values, direct[:, 0], rtol=1e-6)
    # REST prints float32 values at float32 precision, so both APIs give the same numbers.
    assert rest_values == grpc_values == pinned


def test_a_regress_batch_goes_in_parts_of_at_most_max_batch_size_joined_in_order(
    exports: dict[str, Path],
) -> None:
    """70 examples with chunks of 32 (the default) and of 4: each value is its example's
    (``n``), from a request of at most that many examples (the batch size it saw)."""
    examples = [{"n": float(i), "text": "x" * (i % 5)} for i in range(70)]
    with ModelServer(exports["regress_echo"], "echo", method_name_check=True) as server:
        for size in (MAX_BATCH_SIZE, 4):
            sizes = [min(size, 70 - start) for start in range(0, 70, size)]
            expected = [100.0 * i + n for i, n in enumerate(n for n in sizes for _ in range(n))]
            with GrpcClient(server.grpc_target, "echo", max_batch_size=size) as client:
                assert client.regress(examples) == expected
            rest = RestClient(server.rest_url, "echo", max_batch_size=size)
            assert rest.regress(examples) == expected
        with GrpcClient(server.grpc_target, "echo", max_batch_size=None) as client:
            assert client.regress(examples) == [100.0 * i + 70 for i in range(70)]


def _refusals(api: str, server: ModelServer, model: str, signature: str | None) -> list:
    """The errors of ``api`` (``classify`` or ``regress``) on ``signature`` over gRPC and
    REST (an HTTP 400)."""
    errors = []
    with GrpcClient(server.grpc_target, model, retries=0) as client:
        with pytest.raises(ServingError) as grpc_err:
            getattr(client, api)([{"text": "good"}], signature)
        errors.append(grpc_err.value)
    with pytest.raises(ServingError) as rest_err:
        getattr(RestClient(server.rest_url, model, retries=0), api)([{"text": "good"}], signature)
    assert rest_err.value.http_status == 400
    return [*errors, rest_err.value]


def test_regress_with_a_signature_that_cannot_regress_is_one_sentence(
    exports: dict[str, Path], classifier_server: ModelServer, regressor_export: Path
) -> None:
    """A classifier's ``classify`` signature (with TF Serving's method-name check or
    without, its default) and a regressor's ``serving_default``, which TF Serving refuses
    with the whole SignatureDef over many lines: one sentence saying the signature is not a
    regression signature, with the server's reason; the server keeps serving."""

    refusals = functools.partial(_refusals, "regress")

    fix = (
        "; pass the signature_name of one (method tensorflow/serving/regress, input 'inputs', "
        "one float output 'outputs', as a fine-tuned export's 'regress'), or call classify() "
        "for a classifier."
    )
    checked = "Expected regression signature method_name to be tensorflow/serving/regress. Was: "
    with ModelServer(exports["classifier"], "plain") as unchecked:  # TF Serving's default
        cases = [
            (refusals(classifier_server, "classifier", "classify"), "classifier", "classify",
             checked + CLASSIFY_METHOD_NAME),
            (refusals(unchecked, "plain", "classify"), "plain", "classify",
             "Expected one output Tensor"),
        ]  # fmt: skip
    with ModelServer(regressor_export, "regressor") as server:
        cases.append(
            (refusals(server, "regressor", None), "regressor", "serving_default",
             "No regression inputs found in SignatureDef")
        )  # fmt: skip
        with GrpcClient(server.grpc_target, "regressor") as client:
            assert len(client.regress([{"text": "good"}])) == 1  # still serving
    for errors, model, signature, reason in cases:
        for err in errors:
            message = str(err)
            assert message.endswith(
                f"cannot regress with signature '{signature}' of model '{model}', which is not "
                f"a regression signature ({reason}){fix}"
            ), message
            assert message.startswith("TF Serving at ") and "\n" not in message, message
            assert err.code == "INVALID_ARGUMENT" and err.details.startswith(reason)
    assert "\n" in cases[-1][0][0].details  # the SignatureDef, cut from the sentence


def test_a_signature_that_cannot_classify_is_one_sentence(regressor_export) -> None:
    """Classify on a signature TF Serving's Classify API refuses (a regressor's
    ``regress``; a ``serving_default`` without an ``inputs`` input, whose refusal goes on
    with the whole SignatureDef) is one sentence naming it, over gRPC and REST."""

    refusals = functools.partial(_refusals, "classify")

    with ModelServer(regressor_export, "regressor", method_name_check=True) as server:
        cases = [
            (refusals(server, "regressor", "regress"), "regress",
             "Expected classification signature method_name to be "
             f"tensorflow/serving/classify. Was: {REGRESS_METHOD_NAME}"),
        ]  # fmt: skip
    with ModelServer(regressor_export, "plain") as server:  # TF Serving's default: no check
        cases.append(
            (refusals(server, "plain", None), "serving_default",
             "No classification inputs found in SignatureDef")
        )  # fmt: skip
        with GrpcClient(server.grpc_target, "plain") as client:
            assert len(client.regress([{"text": "good"}])) == 1  # still serving
    for errors, signature, reason in cases:
        for err in errors:
            message = str(err)
            assert message.startswith("TF Serving at ") and "\n" not in message, message
            assert f"cannot classify with signature '{signature}'" in message, message
            assert f"which is not a classification signature ({reason});" in message, message
            assert message.endswith("or call regress() for a regressor."), message
            assert err.details.startswith(reason)
    assert "\n" in cases[-1][0][0].details  # the SignatureDef, cut from the sentence


# -- metadata and status ----------------------------------------------------------------


def test_metadata_and_status_agree_over_grpc_and_rest(classifier_server: ModelServer) -> None:
    with GrpcClient(classifier_server.grpc_target, "classifier") as client:
        grpc_metadata, grpc_status = client.metadata(), client.status()
    rest = RestClient(classifier_server.rest_url, "classifier")
    assert rest.metadata() == grpc_metadata
    assert (
        rest.status()
        == grpc_status
        == [{"version": 1, "state": "AVAILABLE", "error_code": "OK", "error_message": ""}]
    )
    signatures = grpc_metadata["signatures"]
    assert grpc_metadata["model_name"] == "classifier" and grpc_metadata["version"] == 1
    assert sorted(signatures) == ["classify", "serving_default"]
    assert signatures["classify"]["method_name"] == CLASSIFY_METHOD_NAME
    assert signatures["serving_default"]["method_name"] == PREDICT_METHOD_NAME
    assert signatures["classify"]["inputs"] == {"inputs": {"dtype": "DT_STRING", "shape": [-1]}}
    assert signatures["serving_default"]["outputs"]["scores"] == {
        "dtype": "DT_FLOAT",
        "shape": [-1, 2],
    }


# -- the export reader --------------------------------------------------------------------


def _signatures(inputs: list[str], outputs: list[str]) -> dict:
    spec = {"dtype": "DT_STRING", "shape": [-1]}
    return {
        "serving_default": {
            "inputs": {name: spec for name in inputs},
            "outputs": {name: spec for name in outputs},
        }
    }


def test_the_reader_tells_every_kind_of_export_from_its_signatures() -> None:
    qa_outputs = ["answer", "answer_start_word", "answer_end_word", "answer_score", "tokens"]
    cases = {
        ("replaced_token", ("text",)): (["text"], ["replaced_prob", "tokens", "num_tokens"]),
        ("sentence_score", ("text",)): (
            ["text"],
            ["energy", "sentence_score", "tokens", "token_ids", "num_tokens"],
        ),
        ("classify", ("text",)): (["text"], ["scores", "classes"]),
        ("classify", ("text", "text_b")): (["text_b", "text"], ["scores", "classes"]),
        ("regress", ("text",)): (["text"], ["scores"]),
        ("regress", ("text", "text_b")): (["text", "text_b"], ["scores"]),
        ("tag", ("text",)): (["text"], ["tag_probs", "tags", "words", "num_words"]),
        ("qa", ("question", "context")): (["context", "question"], qa_outputs),
    }
    for (kind, layout), (inputs, outputs) in cases.items():
        reader = export_reader(_signatures(inputs, outputs))
        assert (reader.kind, reader.inputs, reader.signature) == (kind, layout, "serving_default")
    names = ["replaced_token", "sentence_score", "classify", "regress", "tag", "qa"]
    assert [k.name for k in KINDS] == names
    pair = export_reader(_signatures(["text", "text_b"], ["scores", "classes"]))
    assert pair.feeds(["a", "b", "c", "d"]) == {"text": ["a", "c"], "text_b": ["b", "d"]}
    odd = (
        r"^This classifier export reads texts in pairs \(text, text_b\) and got 3; pass text "
        r"then text_b for each example\.$"
    )
    with pytest.raises(InputDataError, match=odd):
        pair.feeds(["a", "b", "c"])
    other = "takes the inputs text, text_b, each as long as the others, not text .2.; pass those"
    with pytest.raises(InputDataError, match=other):
        pair.check_inputs({"text": ["a", "b"]})
    # Labels most likely first; rows of a whole batch.
    classes = np.array([[b"x", b"y"]] * 2, object)
    answers = pair.read({"classes": classes, "scores": np.array([[0.1, 0.9], [0.7, 0.3]])})
    assert [a.label for a in answers] == ["y", "x"]
    assert isinstance(answers[0], Classification) and [n for n, _ in answers[1].scores] == [
        "x",
        "y",
    ]
    assert pair.record(answers[0]) == {"label": "y", "scores": {"y": 0.9, "x": 0.1}}


def test_a_loaded_export_and_its_server_show_the_reader_the_same_signatures(
    exports: dict[str, Path], classifier_server: ModelServer
) -> None:
    loaded = saved_model_signatures(tf.saved_model.load(str(exports["classifier"] / "1")))
    with GrpcClient(classifier_server.grpc_target, "classifier") as client:
        served = client.metadata()["signatures"]
    assert loaded == {
        name: {part: signature[part] for part in ("inputs", "outputs")}
        for name, signature in served.items()
    }
    assert export_reader(loaded).kind == export_reader(served).kind == "classify"


def test_score_asks_a_server_for_a_model_version_or_a_version_label(classifier_server, capsys):
    # score had no way to choose among the versions a server serves (only the latest).
    from keras_electra.cli import main

    def score(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["score", "--model-name", "classifier", "--json", *argv, "fine"])
        out, err = capsys.readouterr()
        return code, out, err.strip()

    for server in (classifier_server.grpc_target, classifier_server.rest_url):
        for chosen in (("--model-version", "1"), ("--version-label", "stable")):
            code, out, err = score("--server", server, *chosen)
            assert code == 0, err
            assert {row["label"] for row in json.loads(out)} <= set(LABELS)
        for chosen in (("--model-version", "2"), ("--version-label", "canary")):
            code, _, err = score("--server", server, *chosen)
            assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
            assert (
                "the server has no version 2 of 'classifier' loaded" in err
                if chosen[0] == "--model-version"
                else "Unrecognized servable version label: canary" in err
                and "the server has no version label 'canary' for 'classifier'" in err
            ), err
    code, _, err = score(
        "--server", classifier_server.grpc_target, "--model-version", "1", "--version-label", "x"
    )
    assert code == 2 and "both choose the version; pass one of them" in err, err
    code, _, err = score("--model", "saved_models/x", "--version-label", "stable")
    assert code == 2 and "--model-name, --version-label are for a server (--server)" in err, err


def test_an_export_of_no_known_kind_is_one_sentence_naming_its_signatures(
    exports: dict[str, Path], capsys
) -> None:
    from keras_electra.cli import main

    named = (
        "has the signatures double(x -> y), serving_default(x -> y), none of which "
        "keras-electra reads (the replaced-token, sentence-score, classifier, regressor, tagger "
        "and QA exports of `keras-electra export`)"
    )
    with pytest.raises(ServingError, match=rf"^The export at '.*unknown.1' {re.escape(named)}"):
        score_with_saved_model(exports["unknown"], ["1.0"])
    with ModelServer(exports["unknown"], "unknown") as server:
        for where in (
            ["--model", str(exports["unknown"])],
            ["--server", server.grpc_target, "--model-name", "unknown"],
            ["--server", server.rest_url, "--model-name", "unknown", "--json"],
        ):
            capsys.readouterr()
            assert main(["score", *where, "1.0"]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "Traceback" not in err, err
            assert named in err, err
            assert err.endswith("call it with GrpcClient or RestClient's predict() instead.")


def test_predict_on_a_pretrained_export_is_one_sentence(exports: dict[str, Path], tmp_path) -> None:
    from keras_electra.errors import ConfigError
    from keras_electra.finetuning import predict_file

    data = tmp_path / "x.csv"
    data.write_text("text\na b c\n", encoding="utf-8")
    message = (
        r"^The export at '.*electra.1' holds no fine-tuned model \(no "
        r"assets.extra/finetune.json\); score a pretrained export with `keras-electra score` "
        r"\(`--input FILE` for a file of texts, one per line\)"
    )
    with pytest.raises(ConfigError, match=message):
        predict_file(exports["electra"], data)


def test_version_labels_and_unknown_versions(classifier_server: ModelServer) -> None:
    stable = RestClient(classifier_server.rest_url, "classifier", version_label="stable")
    assert stable.status()[0]["version"] == 1
    with GrpcClient(classifier_server.grpc_target, "classifier", version_label="stable") as client:
        assert client.metadata()["version"] == 1
    with pytest.raises(ServingError, match="Unrecognized servable version label: beta"):
        RestClient(classifier_server.rest_url, "classifier", version_label="beta").status()
    with GrpcClient(classifier_server.grpc_target, "classifier", version=7, retries=0) as client:
        with pytest.raises(ServingError, match=r"Specific\(classifier, 7\)") as grpc_err:
            client.metadata()
    assert grpc_err.value.code == "NOT_FOUND"
    with pytest.raises(ServingError, match=r"Specific\(classifier, 7\)") as rest_err:
        RestClient(classifier_server.rest_url, "classifier", version=7).metadata()
    assert rest_err.value.http_status == 404


# -- errors -------------------------------------------------------------------------


def test_bad_requests_raise_the_servers_message_and_the_server_keeps_serving(
    electra_server: ModelServer,
) -> None:
    with GrpcClient(electra_server.grpc_target, "electra", retries=0) as client:
        with pytest.raises(ServingError, match=r"Missing but required: \{text_b\}") as missing:
            client.predict({"text_a": ["a"]}, "score_pair")
        assert missing.value.code == "INVALID_ARGUMENT"
        assert "rejected Predict for model 'electra'" in str(missing.value)
        with pytest.raises(ServingError, match="to be string but float is provided") as dtype:
            client.predict({"text": np.array([1.0], np.float32)})
        assert dtype.value.code == "INVALID_ARGUMENT"
        assert client.predict({"text": ["still fine"]})["num_tokens"].tolist() == [2]

    rest = RestClient(electra_server.rest_url, "electra", retries=0)
    with pytest.raises(ServingError, match="Missing named input: text_b") as missing_rest:
        rest.predict({"text_a": ["a"]}, "score_pair")
    assert missing_rest.value.http_status == 400
    with pytest.raises(ServingError, match="is not of expected type: string") as dtype_rest:
        rest.predict({"text": [1.5]}, format="row")
    assert dtype_rest.value.http_status == 400
    with pytest.raises(ServingError, match='signature name: "nope" not found'):
        rest.predict({"text": ["a"]}, "nope")
    assert rest.predict({"text": ["still fine"]}, format="row")["num_tokens"].tolist() == [2]


def test_an_example_without_the_text_feature_is_one_line_naming_it(classifier_server) -> None:
    # Was: the server's message as TensorFlow framed it, over three lines: "Graph execution
    # error:", a blank line, the reason, then "[[{{node ParseExample/ParseExampleV2}}]]".
    server = classifier_server
    clients = [
        GrpcClient(server.grpc_target, "classifier", retries=0),
        RestClient(server.rest_url, "classifier", retries=0),
    ]
    for client in clients:
        with pytest.raises(ServingError) as caught:
            client.classify([{"txt": "a wonderful film"}])
        said = str(caught.value)
        assert "\n" not in said and "{{node" not in said and "  " not in said, said
        assert "Feature: text (data type: string) is required but could not be found" in said
        assert "[[{{node" in caught.value.details  # the server's own words, kept as sent
        # One example, not a list of them, was "'str' object has no attribute 'items'".
        for wrong in ({"text": "a film"}, ["a film"], "a film"):
            with pytest.raises(InputDataError, match=r"^Pass the examples as a list of dicts"):
                client.classify(wrong)
    clients[0].close()


def test_predict_takes_a_dict_of_inputs_else_one_sentence(electra_server: ModelServer) -> None:
    # Was: "ValueError: dictionary update sequence element #0 has length 1; 2 is required".
    clients = [
        GrpcClient(electra_server.grpc_target, "electra", retries=0),
        RestClient(electra_server.rest_url, "electra", retries=0),
    ]
    for client in clients:
        for wrong in (["a film"], "a film", [("text", "a film")]):
            with pytest.raises(InputDataError) as caught:
                client.predict(wrong)
            assert str(caught.value) == (
                'Pass the inputs as a dict of input names to values, such as {"text": ["a film"]}.'
            )
    with pytest.raises(InputDataError, match="^Pass the inputs as a dict"):
        clients[1].predict(["a film"], format="row")
    clients[0].close()


def test_an_input_rest_cannot_send_is_the_grpc_clients_sentence(electra_server) -> None:
    # Was: REST raised a bare TypeError ("cannot encode a NoneType value as a JSON tensor
    # element") where gRPC raised ServingError "Input 'text' cannot be sent to TF Serving".
    grpc_client = GrpcClient(electra_server.grpc_target, "electra", retries=0)
    rest = RestClient(electra_server.rest_url, "electra", retries=0)
    cases = {
        "None": (lambda: [None], "cannot hold a NoneType value."),
        "generator": (lambda: (t for t in TEXTS), "cannot hold a generator value."),
        "ragged": (lambda: [["a"], ["b", "c"]], "a tensor must be a regular nested list"),
    }
    calls = [(grpc_client, {}), (rest, {"format": "columnar"}), (rest, {"format": "row"})]
    for case, (value, said) in cases.items():
        for client, options in calls:
            with pytest.raises(ServingError) as caught:
                client.predict({"text": value()}, **options)
            message = str(caught.value)
            assert message.startswith("Input 'text' cannot be sent to TF Serving: "), (
                case,
                message,
            )
            assert said in message and "\n" not in message, (case, message)
    assert rest.predict({"text": ["still fine"]})["num_tokens"].tolist() == [2]
    grpc_client.close()


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "soon"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(timeout, capsys) -> None:
    # Was: accepted; gRPC said it "did not answer ... within -1 s", REST "[Errno 115]
    # Operation now in progress".
    from keras_electra.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["score", "--server", "localhost:8500", "--timeout", timeout, "a cat"])
    assert stopped.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    said = f"argument --timeout: '{timeout}' is not a positive number of seconds (such as 10)"
    assert last == f"keras-electra score: error: {said}"
    if timeout == "soon":
        return
    for make in (GrpcClient, RestClient):
        with pytest.raises(ServingError, match=r"is not a positive number of seconds; pass how"):
            make("localhost:8500", "electra", timeout=float(timeout))
    with pytest.raises(ServingError, match="^The timeout True is not"):
        RestClient("localhost:8501", "electra", timeout=True)


SERVER_ADDRESSES = {
    # Was: gRPC wrapped the port round (99999 to 34463) and called 127.0.0.1:34463.
    "localhost:99999": "The port of 'localhost:99999' is 99999, outside 1-65535; pass TF "
    "Serving's port (8500 for gRPC, 8501 for REST by default).",
    "localhost:0": "The port of 'localhost:0' is 0, outside 1-65535",
    "http://localhost:99999": "The port of 'http://localhost:99999' is 99999, outside 1-65535",
    "https://localhost:http": "The port of 'https://localhost:http' is not a number",
    # Was: four lines of gRPC's core logs, then "the target uri is not valid".
    "": "The server address is empty; pass TF Serving's gRPC port as HOST:PORT (such as "
    "localhost:8500), or its REST API's http:// or https:// URL.",
    "http://": "The server address is empty",
    # Was: retried four times, then "check that the server is running".
    "localhost:8500/": "The gRPC address 'localhost:8500/' holds a path; gRPC takes HOST:PORT "
    "alone, such as 'localhost:8500' (a REST API's path goes in an http:// or https:// URL).",
    "localhost:8500/v1/models/electra": "The gRPC address 'localhost:8500/v1/models/electra' "
    "holds a path; gRPC takes HOST:PORT alone, such as 'localhost:8500'",
    "localhost:": "The gRPC address 'localhost:' has no port after its colon",
}


def test_a_server_address_that_cannot_be_called_is_one_sentence_at_once(capsys) -> None:
    from keras_electra.cli import main

    for address, said in SERVER_ADDRESSES.items():
        capsys.readouterr()
        assert main(["score", "--server", address, "a cat"]) == 2, address
        err = capsys.readouterr().err
        assert err.startswith(f"keras-electra score: error: {said}"), err
        assert err.count("\n") == 1, err
        rest = address.startswith("http") or address == ""
        make = RestClient if rest else GrpcClient
        with pytest.raises(ServingError, match=f"^{re.escape(said)}"):
            make(address, "electra")
    with pytest.raises(ServingError, match="^The server address is empty"):
        GrpcClient("", "electra")
    for fine in ("localhost", "dns:///localhost:8500", "[::1]:8500", "unix:/tmp/tfs.sock",
                 "ipv4:127.0.0.1:8500,127.0.0.2:8500", "dns://8.8.8.8/localhost:8500"):  # fmt: skip
        GrpcClient(fine, "electra").close()
    for fine in ("localhost:8501", "https://models.example.com/prefix", "http://[::1]:8501"):
        RestClient(fine, "electra")


def test_the_standin_answers_rest_past_ten_thousand_requests(electra_server) -> None:
    # Was: its HTTP loop stopped after 10,000 requests with the socket still open, so
    # clients timed out and curl hung.
    request = b"GET /v1/models/nope HTTP/1.0\r\n\r\n"
    for _ in range(10_001):
        with socket.create_connection(("127.0.0.1", electra_server.rest_port), timeout=5) as s:
            s.sendall(request)
            while s.recv(65536):
                pass
    rest = RestClient(electra_server.rest_url, "electra", retries=0, timeout=5)
    assert rest.predict({"text": ["still answering"]})["num_tokens"].tolist() == [2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_fails_clearly_after_bounded_retries() -> None:
    port = _free_port()
    start = time.monotonic()
    with GrpcClient(f"127.0.0.1:{port}", "electra", retries=2, backoff=0.01, timeout=2) as client:
        with pytest.raises(ServingError, match=f"127.0.0.1:{port} after 3 attempts") as grpc_err:
            client.status()
    assert grpc_err.value.code == "UNAVAILABLE"
    rest = RestClient(f"127.0.0.1:{port}", "electra", retries=2, backoff=0.01, timeout=2)
    with pytest.raises(ServingError, match="after 3 attempts") as rest_err:
        rest.status()
    assert f"http://127.0.0.1:{port}/v1/models/electra" in str(rest_err.value)
    assert time.monotonic() - start < 10
    # A host alone: gRPC dials 443, which the sentence did not say (TF Serving's is 8500).
    with GrpcClient("127.0.0.1", "electra", retries=0, backoff=0.01, timeout=2) as client:
        with pytest.raises(ServingError) as no_port:
            client.status()
    assert str(no_port.value).endswith(
        "serving gRPC on that address (it names no port, so gRPC dialed 443; TF Serving's "
        "gRPC port is 8500 by default: pass 127.0.0.1:8500)."
    ), no_port.value


@pytest.mark.parametrize("url", ["http://localhost:8500", "https://serving.example.com:443/"])
def test_a_url_given_to_the_grpc_client_is_one_sentence_at_once(url: str) -> None:
    # Was: accepted, then every call retried 4 times with backoff and failed with gRPC's
    # "errors resolving http://localhost:8500: ... Misformatted domain name".
    address = url.split("://")[1].rstrip("/")
    with pytest.raises(ServingError, match="takes the gRPC port as HOST:PORT") as caught:
        GrpcClient(url, "electra")
    assert f"pass '{address}'" in str(caught.value) and "RestClient" in str(caught.value)


def test_rest_server_that_closes_without_answering_fails_in_one_sentence() -> None:
    # urllib wraps only errors raised while connecting: a server (or proxy) that reads the
    # request and hangs up raises RemoteDisconnected bare, past the URLError handler.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def hang_up() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        rest = RestClient(f"127.0.0.1:{port}", "electra", retries=0, timeout=10)
        with pytest.raises(ServingError, match="closed the connection without an answer") as err:
            rest.status()
        thread.join(timeout=10)
    assert "\n" not in str(err.value) and err.value.code == "UNAVAILABLE"


def test_rest_retries_a_reset_connection_then_succeeds() -> None:
    """A reset (a proxy restarting) is transient: retried, then the answer is read."""
    body = json.dumps(_status_body()).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    answer += str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(2)
        port = listener.getsockname()[1]

        def reset_then_answer() -> None:
            connection, _ = listener.accept()
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            connection.close()  # linger 0: the client reads a reset
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(answer)

        thread = threading.Thread(target=reset_then_answer, daemon=True)
        thread.start()
        status = RestClient(f"127.0.0.1:{port}", "m", retries=2, backoff=0.01).status()
        thread.join(timeout=10)
    assert status[0]["state"] == "AVAILABLE"


class _StubHandler(BaseHTTPRequestHandler):
    """Answers from ``server.script``: a list of (status, body) consumed in order."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        self.server.seen.append((self.command, self.path, body))  # type: ignore[attr-defined]
        status, payload = self.server.answer(self.command, self.path, body)  # type: ignore[attr-defined]
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


class _Stub:
    """A one-purpose HTTP server on 127.0.0.1 serving a bounded number of requests."""

    def __init__(self, answer: Any, max_requests: int) -> None:
        self.server = HTTPServer(("127.0.0.1", 0), _StubHandler)
        self.server.seen = []  # type: ignore[attr-defined]
        self.server.answer = answer  # type: ignore[attr-defined]
        self.server.timeout = 5
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=lambda: [self.server.handle_request() for _ in range(max_requests)], daemon=True
        )

    def __enter__(self) -> _Stub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(timeout=10)
        self.server.server_close()

    @property
    def seen(self) -> list[tuple[str, str, bytes | None]]:
        return self.server.seen  # type: ignore[attr-defined]


def test_rest_retries_transient_503_then_succeeds() -> None:
    answers = iter(
        [(503, {"error": "warming up"}), (503, {"error": "warming up"}), (200, _status_body())]
    )
    with _Stub(lambda *request: next(answers), max_requests=3) as stub:
        status = RestClient(stub.url, "m", retries=3, backoff=0.01).status()
    assert len(stub.seen) == 3
    assert status[0]["state"] == "AVAILABLE"


def _status_body() -> dict[str, Any]:
    return json.loads((GOLDEN / "rest_status_half_plus_three.json").read_text())["response"]["body"]


# -- warmup -----------------------------------------------------------------------------


def test_warmup_replay_runs_every_record_and_reports_failures(
    exports: dict[str, Path], tmp_path: Path
) -> None:
    export = tmp_path / "1"
    shutil.copytree(exports["electra"] / "1", export)
    assert replay_warmup(export) == 0  # no warmup file: fine, as in TF Serving
    write_warmup_requests(
        export,
        [
            predict_log({"text": ["the chef cooked the meal"]}),
            predict_log({"text_a": ["a dog"], "text_b": ["a cat"]}, "score_pair"),
            predict_log({"text": [b"\xff bytes"]}),
        ],
    )
    assert replay_warmup(export) == 3

    write_warmup_requests(
        export, [predict_log({"text": ["ok"]}), predict_log({"text_a": ["x"]}, "score_pair")]
    )
    with pytest.raises(ServingError, match=r"Warmup record 2 .*Missing but required: \{text_b\}"):
        replay_warmup(export)

    (export / "assets.extra" / "tf_serving_warmup_requests").write_bytes(b"not a tfrecord")
    with pytest.raises(ServingError, match="TFRecord"):
        replay_warmup(export)


# -- golden REST bodies from the TF Serving documentation ------------------------------


def _strictly_equal(left: Any, right: Any) -> bool:
    """JSON equality that also tells 1 from 1.0 and True from 1."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_strictly_equal(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_strictly_equal, left, right))
    return left == right


GOLDEN_CALLS = {
    "rest_status_half_plus_three.json": ("saved_model_half_plus_three", lambda c: c.status()),
    "rest_predict_row_half_plus_three.json": (
        "saved_model_half_plus_three",
        lambda c: c.predict({"x": [1.0, 2.0, 5.0]}, None, format="row"),
    ),
    "rest_predict_error_not_found.json": (
        "half",
        lambda c: c.predict({"x": np.array([1.0, 5.0], np.float32)}, None, format="row"),
    ),
    "rest_predict_row_scalars.json": (
        "model",
        lambda c: c.predict({"x": ["foo", "bar", "baz"]}, None, format="row"),
    ),
    "rest_predict_row_nested.json": (
        "model",
        lambda c: c.predict({"x": np.array([[[1, 2]], [[3, 4]]])}, None, format="row"),
    ),
    "rest_predict_row_named_inputs.json": (
        "model",
        lambda c: c.predict(_NAMED_INPUTS, None, format="row"),
    ),
    "rest_predict_columnar_named_inputs.json": (
        "model",
        lambda c: c.predict(_NAMED_INPUTS, None, format="columnar"),
    ),
    "rest_regress_half_plus_three.json": (
        "half_plus_three",
        lambda c: c.regress([{"x": 1.0}, {"x": 2.0}], "tensorflow/serving/regress"),
    ),
    "rest_classify_b64.json": (
        "model",
        lambda c: c.classify(
            [
                {"image": b"image bytes", "caption": "seaside"},
                {"image": b"awesome image bytes", "caption": "mountains"},
            ],
            "classify_objects",
        ),
    ),
}
_NAMED_INPUTS = {
    "tag": ["foo", "bar"],
    "signal": np.array([[1, 2, 3, 4, 5], [3, 4, 1, 2, 5]]),
    "sensor": np.array([[[1, 2], [3, 4]], [[4, 5], [6, 8]]]),
}


def test_golden_files_are_all_covered() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.json")) == sorted(GOLDEN_CALLS)


@pytest.mark.parametrize("name", sorted(GOLDEN_CALLS))
def test_rest_client_matches_documented_bodies(name: str) -> None:
    golden = json.loads((GOLDEN / name).read_text())
    want, reply = golden["request"], golden["response"]
    no_reply = {"error": "the documentation shows no response for this request"}

    def answer(method: str, path: str, body: bytes | None) -> tuple[int, Any]:
        sent = None if body is None else json.loads(body)
        if (method, path) != (want["method"], want["path"]) or not _strictly_equal(
            sent, want["body"]
        ):
            return 400, {"error": f"request differs from the golden {name}"}
        return (reply["status"], reply["body"]) if reply else (400, no_reply)

    model_name, call = GOLDEN_CALLS[name]
    client = RestClient("127.0.0.1:1", model_name, retries=0, typed_outputs=False)
    with _Stub(answer, max_requests=1) as stub:  # the address, known once it listens
        client.base_url = stub.url
        try:
            result, error = call(client), None
        except ServingError as err:
            result, error = None, err
    method, path, body = stub.seen[0]
    assert (method, path) == (want["method"], want["path"])
    assert _strictly_equal(None if body is None else json.loads(body), want["body"])

    if reply is None:
        assert error is not None and no_reply["error"] in str(error)
    elif reply["status"] != 200:
        assert error is not None and error.http_status == reply["status"]
        assert reply["body"]["error"] in str(error) and error.code == "NOT_FOUND"
    elif name.startswith("rest_status"):
        assert result == [
            {"version": 123, "state": "AVAILABLE", "error_code": "OK", "error_message": ""}
        ]
    elif name.startswith("rest_regress"):
        assert error is None and result == [3.5, 4.0]
    else:
        assert error is None and list(result) == ["predictions"]
        assert result["predictions"].dtype == np.float32
        np.testing.assert_array_equal(result["predictions"], [3.5, 4.0, 5.5])


# -- deployment files -------------------------------------------------------------------

SERVING_DIR = Path(__file__).resolve().parents[1] / "serving"
# tensorflow_model_server flags (tensorflow_serving/model_servers/main.cc, 2.x).
TF_SERVING_FLAGS = {
    "port", "grpc_socket_path", "rest_api_port", "rest_api_num_threads",
    "rest_api_timeout_in_ms", "rest_api_enable_cors_support", "enable_batching",
    "allow_version_labels_for_unavailable_models", "batching_parameters_file",
    "enable_per_model_batching_parameters", "model_config_file",
    "model_config_file_poll_wait_seconds", "model_name", "model_base_path",
    "num_load_threads", "num_unload_threads", "max_num_load_retries",
    "load_retry_interval_micros", "file_system_poll_wait_seconds", "flush_filesystem_caches",
    "tensorflow_session_parallelism", "tensorflow_session_config_file",
    "tensorflow_intra_op_parallelism", "tensorflow_inter_op_parallelism",
    "use_alts_credentials", "ssl_config_file", "platform_config_file",
    "per_process_gpu_memory_fraction", "saved_model_tags", "grpc_channel_arguments",
    "grpc_max_threads", "enable_model_warmup", "num_request_iterations_for_warmup",
    "monitoring_config_file", "remove_unused_fields_from_bundle_metagraph",
    "enable_signature_method_name_check", "xla_cpu_compilation_enabled", "enable_profiler",
    "thread_pool_factory_config_file",
}  # fmt: skip


def _config_message(name: str) -> Any:
    """Builds TF Serving's BatchingParameters / MonitoringConfig messages (not in the pip API)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    fdp = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(
        name="serving_configs.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    # session_bundle_config.proto and monitoring_config.proto in tensorflow/serving.
    batching = file.message_type.add(name="BatchingParameters")
    for number, field in enumerate(
        ["max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads"], 1
    ):
        batching.field.add(
            name=field,
            number=number,
            type=fdp.TYPE_MESSAGE,
            type_name=".google.protobuf.Int64Value",
        )
    batching.field.add(
        name="thread_pool_name",
        number=5,
        type=fdp.TYPE_MESSAGE,
        type_name=".google.protobuf.StringValue",
    )
    batching.field.add(
        name="allowed_batch_sizes", number=6, type=fdp.TYPE_INT64, label=fdp.LABEL_REPEATED
    )
    batching.field.add(name="pad_variable_length_inputs", number=7, type=fdp.TYPE_BOOL)
    prometheus = file.message_type.add(name="PrometheusConfig")
    prometheus.field.add(name="enable", number=1, type=fdp.TYPE_BOOL)
    prometheus.field.add(name="path", number=2, type=fdp.TYPE_STRING)
    monitoring = file.message_type.add(name="MonitoringConfig")
    monitoring.field.add(
        name="prometheus_config",
        number=1,
        type=fdp.TYPE_MESSAGE,
        type_name=".tensorflow.serving.PrometheusConfig",
    )
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.serving.{name}"))


def test_deployment_configs_parse_as_tf_serving_protos() -> None:
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    models = text_format.Parse(
        (SERVING_DIR / "models.config").read_text(), model_server_config_pb2.ModelServerConfig()
    )
    (config,) = models.model_config_list.config
    assert (config.name, config.base_path, config.model_platform) == (
        "electra",
        "/models/electra",
        "tensorflow",
    )
    assert dict(config.version_labels) == {"stable": 1, "canary": 1}
    assert list(config.model_version_policy.specific.versions) == [1]

    batching = text_format.Parse(
        (SERVING_DIR / "batching.config").read_text(), _config_message("BatchingParameters")()
    )
    assert 0 < batching.batch_timeout_micros.value <= 10_000
    assert batching.num_batch_threads.value >= 1
    # One setting: the clients, score and predict send at most what the server batches.
    assert batching.max_batch_size.value == MAX_BATCH_SIZE
    monitoring = text_format.Parse(
        (SERVING_DIR / "monitoring.config").read_text(), _config_message("MonitoringConfig")()
    )
    assert monitoring.prometheus_config.enable
    assert monitoring.prometheus_config.path == "/monitoring/prometheus/metrics"


def test_compose_and_readme_use_real_server_flags_and_mounted_files() -> None:
    import re

    yaml = pytest.importorskip("yaml")
    service = yaml.safe_load((SERVING_DIR / "compose.yaml").read_text())["services"]["tfserving"]
    assert service["image"] == "tensorflow/serving:2.21.0"
    # Bound to this host only: TF Serving has no authentication.
    assert set(service["ports"]) == {"127.0.0.1:8500:8500", "127.0.0.1:8501:8501"}
    flags = dict(re.fullmatch(r"--(\w+)=(.*)", arg).groups() for arg in service["command"])
    assert set(flags) <= TF_SERVING_FLAGS
    assert (flags["port"], flags["rest_api_port"]) == ("8500", "8501")
    mounts = dict(volume.split(":")[1::-1] for volume in service["volumes"])
    for flag in ("model_config_file", "batching_parameters_file", "monitoring_config_file"):
        host_file = mounts[flags[flag]]
        assert (SERVING_DIR / host_file).is_file(), flag
    assert mounts["/models"] == "../saved_models"

    readme = (SERVING_DIR / "README.md").read_text()
    docker_run = readme[readme.index("docker run --rm -p 127.0.0.1:8500") :].split("```")[0]
    readme_flags = set(re.findall(r"--([a-z_]+)=", docker_run))
    assert readme_flags <= TF_SERVING_FLAGS and {"model_config_file", "enable_batching"} <= (
        readme_flags
    )


def test_rest_client_imports_without_tensorflow() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from keras_electra.serving import RestClient, ServingError; "
        "assert 'tensorflow' not in sys.modules, 'RestClient pulled in TensorFlow'"
    )
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_score_input_reads_a_file_of_texts_in_chunks_as_the_arguments_are_scored(
    short_exports, tmp_path, capsys, monkeypatch
):
    """``score --input FILE`` (``-``: standard input) answers as the same texts given as
    arguments, in process and from TF Serving's gRPC and REST: the export loaded once, the
    texts scored a chunk at a time (two here), ``--json`` as one object per line, and one
    note for the texts cut in any chunk."""
    import io
    import json

    from keras_electra import scoring
    from keras_electra.cli import main

    monkeypatch.setattr(scoring, "CHUNK", 2)
    export_dir = short_exports["electra"]
    fits, cut = "the cat sat", " ".join(SHORT_WORDS)
    texts = [fits, cut, "a dog ran", cut, "by the mat"]  # three chunks: 2, 2 and 1
    # A corpus's blank lines between documents, CRLF endings, a BOM (it was the first
    # text's: "\ufeffthe cat sat" echoed, a tagger's first word "\ufeffJohn").
    path = tmp_path / "texts.txt"
    lines = [fits, cut, "", "a dog ran", cut, "  ", "by the mat"]
    path.write_bytes("\ufeff".join(["", "".join(t + "\r\n" for t in lines)]).encode("utf-8"))
    note = f"2 of 5 texts were cut at the export's length of {SHORT} tokens"
    with ModelServer(export_dir, "served") as server:
        for where in (["--model", str(export_dir)],
                      ["--server", server.grpc_target, "--model-name", "served"],
                      ["--server", server.rest_url, "--model-name", "served"]):  # fmt: skip
            capsys.readouterr()
            assert main(["score", *where, "--json", *texts]) == 0
            expected = json.loads(capsys.readouterr().out)
            assert main(["score", *where, "--input", str(path), "--json"]) == 0
            out, err = capsys.readouterr()
            assert [json.loads(line) for line in out.splitlines()] == expected, where
            assert err.startswith(note) and err.count("\n") == 1, (where, err)
            assert main(["score", *where, *texts]) == 0
            shown = capsys.readouterr().out
            assert main(["score", *where, "--input", str(path)]) == 0
            assert capsys.readouterr().out == shown, where
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert main(["score", "--model", str(export_dir), "--input", "-"]) == 0
    assert capsys.readouterr().out == shown
    loads = []
    real = scoring.LoadedExport.__init__
    monkeypatch.setattr(
        scoring.LoadedExport, "__init__", lambda s, p: loads.append(p) or real(s, p)
    )
    calls = []
    score = scoring.LoadedExport.score
    monkeypatch.setattr(
        scoring.LoadedExport, "score", lambda s, t, **k: calls.append(len(t)) or score(s, t, **k)
    )
    assert main(["score", "--model", str(export_dir), "--input", str(path)]) == 0
    assert len(loads) == 1 and calls == [2, 2, 1]  # one load for three chunks


@pytest.mark.parametrize(
    "content, said",
    [
        (b"the cat\t\n", "Line 1 of 'bad.txt' has an empty text beside a tab; write both"),
        # Invisible characters alone: refused per chunk as "Text 276 is empty" after the
        # first chunk's answers were printed.
        (b"the cat\n\xe2\x80\x8b\n", "Line 2 of 'bad.txt' holds only characters the "
         "tokenizer drops (invisible ones or accents alone); write its text or remove"),
        (b"the cat\t\xcc\x81\n", "Line 1 of 'bad.txt' has an empty text beside a tab"),
        (b"caf\xe9\n", "Line 1 of 'bad.txt' is not UTF-8 (at byte 4); convert the file"),
        (b"a\tb\n\nc\n", "Line 3 of 'bad.txt' has 1 text where the first example has 2; "
         "give every line"),
        (b"a\tb\tc\n", "Line 1 of 'bad.txt' has 3 tab-separated texts; an example has one, "),
        (b"\n \n", "Input file 'bad.txt' has no texts; write one example per line."),
        (b"the cat\tsat\n", "'bad.txt' has 2 tab-separated texts per line, but the export "
         "takes text; write one text per line."),
        (None, "Input file 'bad.txt' does not exist; pass a file of texts, one per line"),
    ],
)  # fmt: skip
def test_score_input_names_the_line_that_cannot_be_scored_before_scoring_any(
    short_exports, tmp_path, capsys, monkeypatch, content, said
):
    from keras_electra.cli import main

    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "bad.txt").write_bytes(content)
    status = main(["score", "--model", str(short_exports["electra"]), "--input", "bad.txt"])
    out, err = capsys.readouterr()
    assert status == 2 and out == "" and err.count("\n") == 1, err
    assert f"keras-electra score: error: {said}" in err, err


def test_score_takes_texts_or_an_input_file(short_exports, tmp_path, capsys):
    from keras_electra.cli import main

    export_dir = str(short_exports["electra"])
    (tmp_path / "t.txt").write_text("the cat\n", encoding="utf-8")
    for argv, said in (
        ([], "Pass the texts to score, or --input FILE (one example per line; - for"),
        (["the cat", "--input", str(tmp_path / "t.txt")], "Pass the texts to score or --input "
         "FILE (one example per line), not both."),
    ):  # fmt: skip
        assert main(["score", "--model", export_dir, *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err


def test_score_input_shows_a_progress_bar_on_the_terminal_when_its_answers_go_to_a_file(
    short_exports, tmp_path
):
    """The bar goes to a terminal's stderr while the answers go to a file; with the answers
    on the terminal too (or stderr not a terminal) there is none to mix with them."""
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    path = tmp_path / "texts.txt"
    path.write_text("the cat sat\na dog ran\n", encoding="utf-8")
    argv = [sys.executable, "-m", "keras_electra.cli", "score"]
    argv += ["--model", str(short_exports["electra"]), "--input", str(path), "--json"]

    def run(stdout_tty: bool) -> tuple[str, str]:
        err_main, err_side = pty.openpty()
        out_main, out_side = pty.openpty() if stdout_tty else (None, None)
        # A terminal 100 columns wide (a new pty has none, and tqdm draws no bar in none).
        fcntl.ioctl(err_side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        with open(tmp_path / "out.jsonl", "wb") as out:
            subprocess.run(argv, stdout=out_side or out, stderr=err_side, check=True, timeout=300)
        chunks = []
        for fd, side in ((err_main, err_side), (out_main, out_side)):
            if fd is None:
                chunks.append((tmp_path / "out.jsonl").read_text(encoding="utf-8"))
                continue
            os.close(side)
            data = b""
            while True:
                try:
                    piece = os.read(fd, 65536)
                except OSError:  # the other side is closed and everything is read
                    break
                if not piece:
                    break
                data += piece
            os.close(fd)
            chunks.append(data.decode("utf-8", "replace"))
        return chunks[0], chunks[1]

    err, out = run(stdout_tty=False)
    assert "Scoring: 100%" in err and "2/2" in err, err[-500:]
    assert [json.loads(line)["text"] for line in out.splitlines()] == ["the cat sat", "a dog ran"]
    err, out = run(stdout_tty=True)
    assert "Scoring" not in err and '"the cat sat"' in out, err[-500:]
