"""Each task learns a small synthetic problem; fine-tuned exports answer like the Keras model.

The tasks are built from the tiny run's vocabulary so that a 1-layer model
learns them in seconds: classification by a keyword, pairs by which segment
holds the keyword, regression by keyword count, tagging of two word classes,
and SQuAD 2.0-style QA where the answer follows a marker word.
"""

import csv
import json
import random
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import assert_same_records, held_by_another_process, marker_squad, score_everywhere
from tfserving_standin import ModelServer, SignatureRunner, replay_warmup

from keras_electra import kernels
from keras_electra.cli import main
from keras_electra.errors import ConfigError, ElectraError, InputDataError
from keras_electra.export import export
from keras_electra.finetuning import (
    encode_pairs,
    finetune,
    load_backbone,
    load_finetuned,
    predict_file,
)
from keras_electra.serving.signatures import CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME

L = 32
PERSONS, PLACES = ["king", "queen", "duke", "lord"], ["london", "rome", "france", "england"]
KEYWORDS = {"good", "bad", "marker", *PERSONS, *PLACES}
FAST = dict(batch_size=16, max_seq_length=L, progress=False)


@pytest.fixture(scope="module")
def words(tiny_run):
    vocab = (tiny_run / "vocab.txt").read_text(encoding="utf-8").split("\n")
    chosen = [w for w in vocab if w.isalpha() and len(w) > 2 and w not in KEYWORDS]
    assert len(chosen) > 200
    return chosen


def texts(*values):
    return np.array([v.encode("utf-8") for v in values], object)


def write_csv(path, header, rows):
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def keyword_rows(words, n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        positive = rng.random() < 0.5
        sentence = rng.sample(words, rng.randint(4, 10))
        sentence.insert(rng.randrange(len(sentence) + 1), "good" if positive else "bad")
        rows.append([" ".join(sentence), "pos" if positive else "neg"])
    return rows


@pytest.fixture(scope="module")
def classify_data(words, tmp_path_factory):
    d = tmp_path_factory.mktemp("classify")
    return (
        write_csv(d / "train.csv", ["sentence", "label"], keyword_rows(words, 256, 0)),
        write_csv(d / "dev.csv", ["sentence", "label"], keyword_rows(words, 128, 1)),
    )


@pytest.fixture(scope="module")
def classifier(tiny_run, classify_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("finetuned") / "keyword"
    train, dev = classify_data
    return finetune(tiny_run, "classify", train, dev, out, text_column="sentence", epochs=3, **FAST)


@pytest.fixture(scope="module")
def classifier_export(classifier, tmp_path_factory):
    return export(classifier.output_dir, tmp_path_factory.mktemp("saved") / "keyword")


def keras_scores(finetuned, sentences, pairs=None):
    x = encode_pairs(finetuned.tokenizer, sentences, pairs, finetuned.settings.max_seq_length)
    return finetuned.model(x, training=False).numpy()


def serialized_examples(*features):
    examples = []
    for f in features:
        feature = {
            k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
            for k, v in f.items()
        }
        examples.append(
            tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        )
    return np.array(examples, object)


def label_records(labels, probs, sentences, pairs=None) -> list[dict]:
    """``score --json``'s records of a classifier: the inputs, the top label, every label's
    probability, most likely first."""
    records = []
    for i, p in enumerate(probs):
        order = np.argsort(-p, kind="stable")
        record = {"text": sentences[i], **({} if pairs is None else {"text_b": pairs[i]})}
        record["label"] = labels[order[0]]
        record["scores"] = {labels[k]: float(p[k]) for k in order}
        records.append(record)
    return records


# === Classification ===


def test_classifier_learns_a_keyword_and_writes_its_directory(classifier):
    assert classifier.metrics["accuracy"] >= 0.9, classifier.metrics
    out = classifier.output_dir
    assert json.loads((out / "eval_metrics.json").read_text()) == classifier.metrics
    assert (out / "labels.txt").read_text().split() == ["neg", "pos"]
    settings = json.loads((out / "finetune.json").read_text())
    assert settings["task"] == "classify" and settings["training"]["layer_decay"] == 0.8
    # The kernels the run trained with, as pretraining's run.json records them.
    chosen = kernels.choose()
    assert settings["training"]["kernels"] == f"{chosen.backend}: {chosen.reason}"
    assert {p.name for p in out.iterdir()} >= {"config.json", "vocab.txt", "checkpoints"}


def test_reloaded_classifier_gives_the_same_scores(classifier):
    sentences = ["a good day", "bad news", "neither"]
    loaded = load_finetuned(classifier.output_dir)
    np.testing.assert_allclose(
        keras_scores(loaded, sentences), keras_scores(classifier, sentences), atol=1e-6
    )


def test_a_classifier_predicts_plain_texts_from_python(classifier):
    # predict_examples(["a fine film"]) was "string indices must be integers".
    sentences = ["a good day", "bad news", "neither"]
    as_read = classifier.predict_examples([{"text": s} for s in sentences])
    assert classifier.predict_examples(sentences) == as_read
    with pytest.raises(InputDataError, match=r"^Example 1 is a tuple; a classify model takes"):
        classifier.predict_examples([("a good day", "bad news")])  # a pair, for one text
    # The model's own text column is a key too (it was refused, naming "text" only); none
    # is an empty list (it was Keras' UnboundLocalError).
    assert classifier.predict_examples([{"sentence": s} for s in sentences]) == as_read
    with pytest.raises(InputDataError) as refused:
        classifier.predict_examples([{"sentense": "a good day"}])
    assert str(refused.value) == (
        "Example 1 is a dict without 'text' (or the model's column names 'sentence'); its "
        "keys: 'sentense'."
    )
    assert classifier.predict_examples([]) == []


def test_a_list_of_training_files_is_one_sentence(tiny_run, classify_data):
    # Was pathlib's "expected str, bytes or os.PathLike object, not list".
    with pytest.raises(TypeError) as caught:
        finetune(tiny_run, "classify", [classify_data[0]], text_column="sentence", dry_run=True)
    assert str(caught.value) == "finetune's train is one path (a str or Path), not a list."


def test_classifier_export_matches_keras_and_serves_classify(classifier, classifier_export):
    sentences = ["the good king", "a bad end to it", "", "no keyword here"]
    expected = tf.nn.softmax(keras_scores(classifier, sentences)).numpy()
    with SignatureRunner(str(classifier_export)) as runner:
        sigs = runner.signatures
        assert sigs["classify"].method_name == CLASSIFY_METHOD_NAME
        assert sigs["serving_default"].method_name == "tensorflow/serving/predict"
        assert set(sigs["serving_default"].inputs) == {"text"}
        for name, alias in (("serving_default", "text"), ("classify", "inputs")):
            out = sigs[name].outputs
            assert out["scores"].dtype == tf.float32.as_datatype_enum
            assert out["classes"].dtype == tf.string.as_datatype_enum
            assert [d.size for d in out["scores"].tensor_shape.dim] == [-1, 2]
            assert [d.size for d in out["classes"].tensor_shape.dim] == [-1, 2]
            assert set(sigs[name].inputs) == {alias}
        got = runner.run("serving_default", {"text": texts(*sentences)})
        np.testing.assert_allclose(got["scores"], expected, atol=1e-5)
        assert got["classes"].tolist() == [[b"neg", b"pos"]] * 4
        examples = serialized_examples(*({"text": s} for s in sentences))
        np.testing.assert_allclose(
            runner.run("classify", {"inputs": examples})["scores"], expected, atol=1e-5
        )
    assert replay_warmup(str(classifier_export)) == 3

    from keras_electra.serving.grpc_client import GrpcClient
    from keras_electra.serving.rest_client import RestClient

    with ModelServer(classifier_export.parent, "keyword", method_name_check=True) as server:
        with GrpcClient(server.grpc_target, "keyword") as client:
            result = client.classify([{"text": s} for s in sentences])
        rest = RestClient(server.rest_url, "keyword").classify([{"text": s} for s in sentences])
    np.testing.assert_allclose([[s for _, s in r] for r in rest], expected, atol=1e-5)
    assert [[label for label, _ in r] for r in result] == [["neg", "pos"]] * 4
    np.testing.assert_allclose([[s for _, s in r] for r in result], expected, atol=1e-5)
    assert (classifier_export.parent / "1" / "assets.extra" / "finetune.json").is_file()


def test_predict_writes_json_lines(classifier, classify_data, tmp_path):
    out = tmp_path / "predictions.jsonl"
    rows = predict_file(classifier.output_dir, classify_data[1], out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines == rows and len(rows) == 128
    assert set(lines[0]) == {"text", "label", "scores"} and set(lines[0]["scores"]) == {
        "neg",
        "pos",
    }
    gold = [r["label"] for r in csv.DictReader(classify_data[1].open())]
    assert np.mean([r["label"] == g for r, g in zip(rows, gold, strict=True)]) >= 0.9


def test_pairs_through_the_command_line_export_and_classify(tiny_run, words, tmp_path, capsys):
    def rows(n, seed):
        rng = random.Random(seed)
        result = []
        for _ in range(n):
            first = rng.random() < 0.5
            a, b = rng.sample(words, 4), rng.sample(words, 4)
            (a if first else b).insert(rng.randrange(5), "good")
            result.append([" ".join(a), " ".join(b), "first" if first else "second"])
        return result

    train = write_csv(tmp_path / "train.csv", ["a", "b", "label"], rows(512, 2))
    dev = write_csv(tmp_path / "dev.csv", ["a", "b", "label"], rows(128, 3))
    out = tmp_path / "pairs"
    code = main(
        [
            "finetune",
            "--run",
            str(tiny_run),
            "--task",
            "classify",
            "--train",
            str(train),
            "--eval",
            str(dev),
            "--output",
            str(out),
            "--text-column",
            "a",
            "--text-pair-column",
            "b",
            "--epochs",
            "4",
            "--batch-size",
            "16",
            "--max-seq-length",
            str(L),
            "--quiet",
        ]
    )
    assert code == 0
    assert json.loads((out / "eval_metrics.json").read_text())["accuracy"] >= 0.9
    assert main(["export", "--run", str(out), "--output", str(tmp_path / "saved" / "pairs")]) == 0
    assert "Exported" in capsys.readouterr().out

    finetuned = load_finetuned(out)
    a, b = ["good one", "nothing"], ["nothing", "good one"]
    expected = tf.nn.softmax(keras_scores(finetuned, a, b)).numpy()
    with SignatureRunner(str(tmp_path / "saved" / "pairs" / "1")) as runner:
        assert set(runner.signatures["serving_default"].inputs) == {"text", "text_b"}
        got = runner.run("serving_default", {"text": texts(*a), "text_b": texts(*b)})
        np.testing.assert_allclose(got["scores"], expected, atol=1e-5)
        examples = serialized_examples(
            *({"text": x, "text_b": y} for x, y in zip(a, b, strict=True))
        )
        np.testing.assert_allclose(
            runner.run("classify", {"inputs": examples})["scores"], expected, atol=1e-5
        )
    assert main(["predict", "--model", str(out), "--input", str(dev)]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert set(first) == {"text", "text_b", "label", "scores"}

    # score takes a pair model's texts in pairs: text, text_b, text, text_b...
    exported = str(tmp_path / "saved" / "pairs")
    pairs = [text for pair in zip(a, b, strict=True) for text in pair]
    assert main(["score", "--model", exported, "--json", *pairs]) == 0
    records = json.loads(capsys.readouterr().out)
    assert_same_records(records, label_records(finetuned.settings.labels, expected, a, b), 2e-5)
    assert main(["score", "--model", exported, "good one"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "This classifier export reads texts in pairs (text, text_b) and got 1; pass text then "
        "text_b for each example."
    )
    assert len(err.splitlines()) == 1 and "Traceback" not in err


# === Regression ===


@pytest.fixture(scope="module")
def regressor(tiny_run, words, tmp_path_factory):
    def write(path, n, seed):
        rng = random.Random(seed)
        with path.open("w", encoding="utf-8") as f:
            for _ in range(n):
                k = rng.randint(0, 3)
                sentence = rng.sample(words, 5) + ["good"] * k
                rng.shuffle(sentence)
                f.write(json.dumps({"text": " ".join(sentence), "score": 5 * k / 3}) + "\n")
        return path

    d = tmp_path_factory.mktemp("regress")
    train, dev = write(d / "train.jsonl", 256, 4), write(d / "dev.jsonl", 128, 5)
    return finetune(
        tiny_run,
        "regress",
        train,
        dev,
        d / "sts",
        label_column="score",
        epochs=4,
        pooling="mean",  # the mean-pooled head through save, load and export
        **FAST,
    )


@pytest.fixture(scope="module")
def regressor_export(regressor, tmp_path_factory):
    return export(regressor.output_dir, tmp_path_factory.mktemp("saved") / "sts")


def test_regressor_learns_a_keyword_count_and_exports(regressor, regressor_export):
    result, exported = regressor, regressor_export
    assert result.settings.pooling == "mean"
    assert result.metrics["pearson"] >= 0.8 and result.metrics["spearman"] >= 0.8, result.metrics

    sentences = ["good good good", "nothing at all", "one good"]
    expected = keras_scores(result, sentences)
    assert expected.shape == (3, 1)
    with SignatureRunner(str(exported)) as runner:
        assert runner.signatures["regress"].method_name == REGRESS_METHOD_NAME
        out = runner.signatures["serving_default"].outputs["scores"]
        assert [d.size for d in out.tensor_shape.dim] == [-1, 1]
        got = runner.run("serving_default", {"text": texts(*sentences)})
        np.testing.assert_allclose(got["scores"], expected, atol=1e-5)
        examples = serialized_examples(*({"text": s} for s in sentences))
        np.testing.assert_allclose(
            runner.run("regress", {"inputs": examples})["outputs"], expected, atol=1e-5
        )


# === score and predict read every export ===


def test_score_gives_a_classifier_exports_labels_in_process_and_over_grpc_and_rest(
    classifier, classifier_export, capsys
):
    sentences = ["the good king", "a bad end to it"]
    probs = tf.nn.softmax(keras_scores(classifier, sentences)).numpy()
    expected = label_records(classifier.settings.labels, probs, sentences)
    found = score_everywhere(classifier_export, sentences, capsys)
    assert set(found) == {"model", "grpc", "rest"}
    for where, (shown, records) in found.items():
        assert_same_records(records, expected, 2e-5)  # labels most likely first
        lines = [
            f"{r['text']} -> " + " ".join(f"{label}({p:.2f})" for label, p in r["scores"].items())
            for r in records
        ]
        assert shown.splitlines() == lines, where


def test_score_gives_a_regressor_exports_value_in_process_and_over_grpc_and_rest(
    regressor, regressor_export, capsys
):
    sentences = ["good good good", "nothing at all"]
    values = keras_scores(regressor, sentences)[:, 0]
    expected = [{"text": s, "score": float(v)} for s, v in zip(sentences, values, strict=True)]
    for where, (shown, records) in score_everywhere(regressor_export, sentences, capsys).items():
        assert_same_records(records, expected, 2e-5)
        assert shown.splitlines() == [f"{r['text']} -> {r['score']:.4f}" for r in records], where


def test_predict_reads_a_classifier_or_regressor_export_as_its_directory(
    classifier, classifier_export, classify_data, regressor, regressor_export, capsys
):
    dev = classify_data[1]
    from_directory = predict_file(classifier.output_dir, dev)
    from_export = predict_file(classifier_export.parent, dev)  # saved_models/NAME: its latest
    # The same lines, scores most likely first in both (the directory's were in label order).
    assert_same_records(from_export, from_directory, 2e-5)
    capsys.readouterr()
    command = ["predict", "--model", str(classifier_export), "--input", str(dev)]
    assert main([*command, "--batch-size", "5"]) == 0  # 128 examples, 26 calls
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert_same_records(lines, from_export, 1e-5)  # batches of 5, not 32: float rounding

    dev = regressor.output_dir.parent / "dev.jsonl"
    from_directory = predict_file(regressor.output_dir, dev)
    assert_same_records(predict_file(regressor_export, dev), from_directory, 2e-5)
    assert set(from_directory[0]) == {"text", "score"}


def test_predict_on_no_model_is_one_sentence(classify_data, tmp_path, capsys):
    assert main(["predict", "--model", str(tmp_path), "--input", str(classify_data[1])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "is neither a fine-tuned model directory (no finetune.json) nor an export (no "
        "saved_model.pb); pass the --output of `keras-electra finetune` or of `keras-electra "
        "export`."
    )
    assert len(err.splitlines()) == 1


# === Tagging ===


def test_tagger_learns_two_word_classes(tiny_run, words, tmp_path):
    def write(path, n, seed):
        rng = random.Random(seed)
        with path.open("w", encoding="utf-8") as f:
            for _ in range(n):
                for _ in range(rng.randint(5, 10)):
                    x = rng.random()
                    if x < 0.15:
                        f.write(f"{rng.choice(PERSONS)} B-PER\n")
                    elif x < 0.3:
                        f.write(f"{rng.choice(PLACES).title()} NNP B-LOC\n")
                    else:
                        f.write(f"{rng.choice(words)} O\n")
                f.write("\n")
        return path

    train, dev = write(tmp_path / "train.conll", 256, 6), write(tmp_path / "dev.conll", 128, 7)
    result = finetune(tiny_run, "tag", train, dev, tmp_path / "ner", epochs=4, **FAST)
    assert result.metrics["f1"] >= 90.0, result.metrics
    assert result.settings.labels == ["O", "B-LOC", "B-PER"]
    rows = predict_file(tmp_path / "ner", dev)
    assert set(rows[0]) == {"words", "tags"} and len(rows[0]["words"]) == len(rows[0]["tags"])


# === Question answering ===


def test_qa_learns_the_word_after_a_marker_with_unanswerable_questions(tiny_run, words, tmp_path):
    def write(path, n, seed):
        path.write_text(json.dumps(marker_squad(words, n, seed)), encoding="utf-8")
        return path

    # 512 questions were too few: 14 epochs of them ended between EM 44 and 62 over seeds
    # 0-2 (a 1-layer model overfits them). 2,048 questions for 6 epochs (768 steps, ~15 s)
    # ended at EM 99.2, 99.2, 92.2, 99.2, 96.9 and 97.7 for seeds 0-5.
    train, dev = write(tmp_path / "train.json", 2048, 8), write(tmp_path / "dev.json", 128, 9)
    result = finetune(
        tiny_run,
        "qa",
        train,
        dev,
        tmp_path / "qa",
        version_2=True,
        epochs=6,
        max_query_length=8,
        doc_stride=16,
        **FAST,
    )
    # Always answering "" scores about 33; windows of 20 context pieces split long contexts.
    assert result.metrics["f1"] >= 85.0 and result.metrics["exact_match"] >= 85.0, result.metrics
    rows = predict_file(tmp_path / "qa", dev)
    assert set(rows[0]) == {"id", "question", "answer"}


def test_squad_2_data_without_squad_v2_is_refused_before_training(tiny_run, words, tmp_path):
    train = tmp_path / "train-v2.0.json"
    train.write_text(json.dumps(marker_squad(words, 12, seed=1)), encoding="utf-8")
    unanswerable = sum("is_impossible" in p["paragraphs"][0]["qas"][0]
                       for p in marker_squad(words, 12, seed=1)["data"])  # fmt: skip
    assert unanswerable > 1
    with pytest.raises(ConfigError) as error:
        finetune(tiny_run, "qa", train, output_dir=tmp_path / "qa", max_query_length=8, **FAST)
    assert str(error.value) == (
        f"{train} has {unanswerable} unanswerable questions (is_impossible: SQuAD 2.0); pass "
        "--squad-v2 to train a model that can decline to answer, or remove them."
    )
    assert not (tmp_path / "qa").exists()


def test_answers_in_no_window_are_counted_in_the_plan_and_the_run(
    tiny_run, words, tmp_path, capsys
):
    """They trained as no answer ([CLS]) without a word."""
    context = words[:40]
    start = len(" ".join(context[:10])) + 1
    long_answer = {"text": " ".join(context[10:30]), "answer_start": start}
    short_answer = {"text": context[2], "answer_start": len(" ".join(context[:2])) + 1}
    qas = [
        {"id": "long", "question": "what", "answers": [long_answer]},
        {"id": "short", "question": "what", "answers": [short_answer]},
    ]
    train = tmp_path / "train.json"
    squad = {"data": [{"paragraphs": [{"context": " ".join(context), "qas": qas}]}]}
    train.write_text(json.dumps(squad), encoding="utf-8")
    settings = dict(max_query_length=8, epochs=1, **FAST)
    # Windows of at most 32 - 3 - 1 = 28 pieces, 14 apart: pieces 10-29 are in none.
    note = (
        "1 of 2 training answers lie whole in no context window (they are longer than the "
        "windows' overlap), so they train as no answer; a smaller --doc-stride or a larger "
        "--max-seq-length keeps them."
    )
    plan = finetune(tiny_run, "qa", train, dry_run=True, **settings)
    assert plan.note == note
    assert re.search(r"^  warning +(.+)$", plan.describe(), re.M)[1] == note
    capsys.readouterr()
    finetune(tiny_run, "qa", train, **settings)
    assert f"Warning: {note}\n" in capsys.readouterr().err


# === Loading and bad input ===


def test_a_fine_tuning_reads_its_sources_config_and_vocabulary_once(
    tiny_run, classify_data, tmp_path, monkeypatch
):
    # They were read twice, and the tokenizer built twice (the data encoded with the first).
    from keras_electra.run_directory import RunDirectory

    real, reads = RunDirectory.config_and_vocab, []

    def counted(self):
        reads.append(self.path)
        return real(self)

    monkeypatch.setattr(RunDirectory, "config_and_vocab", counted)
    train, dev = classify_data
    out = tmp_path / "once"
    finetune(tiny_run, "classify", train, dev, out, text_column="sentence", epochs=1, **FAST)
    assert reads == [tiny_run]


def test_backbone_from_run_and_from_an_init_dir_equals_the_discriminator(tiny_run, tmp_path):
    from keras_electra.pretraining.run import load_run
    from keras_electra.training.checkpoints import RunCheckpoints

    model, tokenizer, _ = load_run(tiny_run)
    x = encode_pairs(tokenizer, ["To be or not to be."], None, L)
    expected = model.discriminator(x, training=False).numpy()
    backbone, _, _ = load_backbone(tiny_run)
    np.testing.assert_allclose(backbone(x, training=False).numpy(), expected, atol=1e-6)

    init = tmp_path / "init"
    (init / "checkpoints").mkdir(parents=True)
    for name in ("config.json", "vocab.txt"):
        (init / name).write_bytes((tiny_run / name).read_bytes())
    RunCheckpoints(init / "checkpoints", backbone, optimizer=None).save(7)  # discriminator only
    again, _, _ = load_backbone(init)
    np.testing.assert_allclose(again(x, training=False).numpy(), expected, atol=1e-6)


def test_unknown_task_is_one_clear_error(tiny_run, classify_data, tmp_path, capsys):
    with pytest.raises(ConfigError, match="Unknown task 'sentiment'; choose one of"):
        finetune(tiny_run, "sentiment", classify_data[0], output_dir=tmp_path / "x")
    code = main(
        [
            "finetune",
            "--run",
            str(tiny_run),
            "--task",
            "ner",
            "--train",
            str(classify_data[0]),
            "--output",
            str(tmp_path / "x"),
        ]
    )
    assert code == 2
    assert (
        "error: Unknown task 'ner'; choose one of: classify, regress, tag, qa."
        in capsys.readouterr().err
    )
    assert not (tmp_path / "x").exists()


def test_an_unknown_kernel_backend_stops_finetuning_before_any_work(
    tiny_run, classify_data, tmp_path, monkeypatch
):
    monkeypatch.setenv(kernels.ENV, "fastest")
    with pytest.raises(ConfigError, match="'fastest' is not a kernel backend"):
        finetune(tiny_run, "classify", classify_data[0], output_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_missing_column_is_one_clear_error(tiny_run, classify_data, tmp_path):
    with pytest.raises(
        InputDataError, match=r"train\.csv: no text column 'text' \(columns: sentence, label\)"
    ):
        finetune(tiny_run, "classify", classify_data[0], output_dir=tmp_path / "x")
    with pytest.raises(InputDataError, match=r"no label column 'sentiment'"):
        finetune(
            tiny_run,
            "classify",
            classify_data[0],
            text_column="sentence",
            label_column="sentiment",
            output_dir=tmp_path / "x",
        )


def test_eval_label_not_seen_in_training_is_one_clear_error(tiny_run, classify_data, tmp_path):
    dev = write_csv(
        tmp_path / "dev.csv", ["sentence", "label"], [["a good one", "pos"], ["meh", "neutral"]]
    )
    with pytest.raises(
        InputDataError, match=r"dev\.csv:3: label 'neutral' does not occur in the training data"
    ):
        finetune(
            tiny_run, "classify", classify_data[0], dev, tmp_path / "x", text_column="sentence"
        )
    assert not (tmp_path / "x").exists()


def test_empty_text_is_one_clear_error(tiny_run, tmp_path):
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [["fine", "a"], [" ", "b"]])
    with pytest.raises(
        InputDataError, match=r"train\.csv:3: the text is empty; remove the row or fill it in"
    ):
        finetune(tiny_run, "classify", train, output_dir=tmp_path / "x")


def test_not_a_run_directory_is_one_clear_error(tmp_path, classify_data):
    with pytest.raises(ElectraError, match="is not a run or init directory"):
        finetune(tmp_path, "classify", classify_data[0], output_dir=tmp_path / "x")
    # A path that is not there says so, not that a directory lacks config.json.
    with pytest.raises(ElectraError, match=r"'.*runs/demo' does not exist; check the path"):
        finetune(tmp_path / "runs/demo", "classify", classify_data[0], output_dir=tmp_path / "x")


def test_an_output_holding_a_pretraining_run_is_refused_before_any_training(
    tiny_run, classify_data, tmp_path
):
    # It was refused only when the trained model was saved: the dry run passed, the run
    # trained to the end, lost it and left its resume/ folder in the pretraining run.
    taken = tmp_path / "run"
    taken.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(tiny_run / name, taken / name)
    args = (tiny_run, "classify", classify_data[0])
    for dry_run in (True, False):
        with pytest.raises(ElectraError, match="holds a pretraining run; choose a new --output"):
            finetune(*args, output_dir=taken, text_column="sentence", dry_run=dry_run, **FAST)
    assert sorted(p.name for p in taken.iterdir()) == ["config.json", "vocab.txt"]


def test_an_output_holding_other_files_is_refused_and_they_are_kept(
    tiny_run, classify_data, tmp_path
):
    # A user's resume/cv.txt and checkpoints/mine.txt were removed without a word.
    args = (tiny_run, "classify", classify_data[0])
    for name in ("resume", "checkpoints", "notes"):
        taken = tmp_path / name
        (taken / name).mkdir(parents=True)
        (taken / name / "mine.txt").write_text("mine", encoding="utf-8")
        for dry_run in (True, False):
            with pytest.raises(ElectraError) as refused:
                finetune(*args, output_dir=taken, text_column="sentence", dry_run=dry_run, **FAST)
            assert str(refused.value) == (
                f"--output '{taken}' holds files fine-tuning did not write ({name}/), which it "
                "could replace or remove; choose a new or empty --output for the fine-tuned model."
            )
        assert (taken / name / "mine.txt").read_text(encoding="utf-8") == "mine"


def test_a_second_fine_tuning_on_the_same_output_is_refused_while_the_first_runs(
    tiny_run, classify_data, tmp_path
):
    # Two fine-tunings on one --output both wrote its resume/ checkpoints and saved over
    # each other's files.
    out = tmp_path / "cls"
    out.mkdir()
    args = (tiny_run, "classify", classify_data[0])
    with held_by_another_process(out):
        with pytest.raises(ElectraError) as refused:
            finetune(*args, output_dir=out, text_column="sentence", **FAST)
    assert str(refused.value) == (
        f"Another keras-electra process is writing into '{out}'; wait for it to end or stop "
        "it, or choose another --output."
    )
    assert not any(out.iterdir())
    # Once the holder has ended, the same call trains and saves, and again replaces it.
    for _ in range(2):
        finetune(*args, output_dir=out, text_column="sentence", epochs=1, **FAST)
        assert load_finetuned(out).settings.task == "classify"


def test_a_save_cut_short_is_finished_by_the_same_call_and_never_read_half_new(
    tiny_run, classify_data, tmp_path, monkeypatch
):
    # A Ctrl-C while the model was written left config.json without finetune.json: the
    # same call was refused ("holds a pretraining run"); replacing a model, the old
    # finetune.json stayed beside the new checkpoints and loaded without a word.
    from keras_electra.finetuning import saved

    args = (tiny_run, "classify", classify_data[0])
    options = dict(text_column="sentence", epochs=1, **FAST)
    out = tmp_path / "cls"
    real = saved._write_history

    def cut(*a, **k):
        raise KeyboardInterrupt

    for replacing in (False, True):
        monkeypatch.setattr(saved, "_write_history", cut)
        with pytest.raises(KeyboardInterrupt):
            finetune(*args, output_dir=out, **options)
        monkeypatch.setattr(saved, "_write_history", real)
        assert (out / "config.json").is_file() and not (out / "finetune.json").exists()
        with pytest.raises(ElectraError):
            load_finetuned(out)  # never a model half old, half new
        result = finetune(*args, output_dir=out, **options)
        assert load_finetuned(out).settings.task == "classify" and not (out / "resume").exists()
        assert result.output_dir == out, replacing


def test_report_draws_a_fine_tuning_directory(classifier, tmp_path):
    from keras_electra.report import write_report

    records = [json.loads(line) for line in (classifier.output_dir / "metrics.jsonl").open()]
    assert [r["epoch"] for r in records] == [1, 2, 3]
    summary = write_report([classifier.output_dir], tmp_path)
    drawn = {name for panel in summary["panels"] for name in panel["metrics"]}
    assert "loss" in drawn
    assert summary["eval_metrics"][str(classifier.output_dir)] == classifier.metrics
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_finetuning_shows_a_progress_bar_with_the_running_loss_unless_quiet(
    tiny_run, classify_data, tmp_path, capsys
):
    train, _ = classify_data
    args = ["finetune", "--run", str(tiny_run), "--task", "classify", "--train", str(train),
            "--text-column", "sentence", "--epochs", "2", "--batch-size", "64",
            "--max-seq-length", str(L)]  # fmt: skip
    assert main([*args, "--output", str(tmp_path / "shown")]) == 0
    shown = capsys.readouterr()
    # 256 examples in batches of 64, two epochs: 8 steps, each counted on the bar.
    assert re.search(r"finetune: 100%\|.*\| 8/8 \[", shown.err), shown.err[-2000:]
    assert "step/s" in shown.err or "s/step" in shown.err
    assert "loss=" in shown.err
    epochs = [line for line in shown.out.splitlines() if line.startswith("epoch ")]
    assert [line.split(" (")[0] for line in epochs] == ["epoch 1", "epoch 2"]
    # It ends saying where the model went and the commands that take it next.
    out = tmp_path / "shown"
    assert f"Fine-tuned model: {out}\n" in shown.out
    assert f"Next: keras-electra export --run {out} --output saved_models/NAME" in shown.out
    assert f"keras-electra predict --model {out} --input FILE" in shown.out
    assert main([*args, "--output", str(tmp_path / "quiet"), "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert "finetune:" not in quiet.err and "epoch 1" not in quiet.out


def test_a_fine_tuning_whose_loss_goes_nan_stops_in_one_sentence_and_saves_nothing(
    tiny_run, classify_data, tmp_path, capsys
):
    train, dev = classify_data
    out = tmp_path / "diverged"
    args = ["finetune", "--run", str(tiny_run), "--task", "classify", "--train", str(train),
            "--eval", str(dev), "--text-column", "sentence", "--epochs", "2",
            "--batch-size", "64", "--max-seq-length", str(L), "--learning-rate", "1e30",
            "--output", str(out)]  # fmt: skip
    assert main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()[-1]
    assert re.fullmatch(
        r"keras-electra finetune: error: Fine-tuning diverged at step [1-8] of 8: the loss "
        r"became NaN or infinite, so nothing was saved; lower --learning-rate \(now 1e\+30\) "
        r"and run the command again\.",
        err,
    ), err
    assert "Eval metrics" not in captured.out and "Next:" not in captured.out
    assert not (out / "finetune.json").exists()


def test_lp_ft_fits_the_head_on_a_frozen_backbone_then_fine_tunes_everything(
    tiny_run, classify_data
):
    import keras

    from keras_electra.finetuning.run import probe_head
    from keras_electra.finetuning.settings import FinetuneSettings
    from keras_electra.finetuning.source import load_backbone, read_source
    from keras_electra.finetuning.tasks import get_task

    train, dev = classify_data
    handler = get_task("classify")
    # Mean pooling: a barely pretrained [CLS] vector hardly varies, the tokens' mean does.
    settings = FinetuneSettings(
        task="classify", text_column="sentence", max_seq_length=L, pooling="mean"
    )
    _, tokenizer = read_source(tiny_run)
    examples = handler.read(train, settings)
    handler.set_labels(examples, settings)
    x, y, _ = handler.encode(examples, tokenizer, settings)
    keras.utils.set_random_seed(0)
    backbone, _, _ = load_backbone(tiny_run, dropout=0.1)
    model = handler.build_model(backbone, settings)
    model(x, training=False)
    frozen = [v.numpy().copy() for v in backbone.weights]
    head = [v.numpy().copy() for v in model.weights if not any(v is w for w in backbone.weights)]
    hyper = {"batch_size": 16, "probe_epochs": 2, "learning_rate": 1e-3}
    loss = handler.loss(settings)
    before = float(loss(y, model(x, training=False)))
    probe_head(model, backbone, loss, x, y, hyper, seed=0)
    after = float(loss(y, model(x, training=False)))
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(frozen, backbone.weights, strict=True))
    moved = [v for v in model.weights if not any(v is w for w in backbone.weights)]
    assert any(not np.array_equal(a, v.numpy()) for a, v in zip(head, moved, strict=True))
    assert after < before, (before, after)
    assert backbone.trainable  # fine-tuning trains the backbone again
    # Through finetune(): recorded in finetune.json's training settings, and it learns.
    result = finetune(
        tiny_run,
        "classify",
        train,
        dev,
        None,
        text_column="sentence",
        epochs=3,
        probe_epochs=1,
        pooling="mean",
        **FAST,
    )
    assert result.settings.training["probe_epochs"] == 1
    assert result.metrics["accuracy"] >= 0.9, result.metrics
    with pytest.raises(ConfigError, match="--probe-epochs must be 0 or more"):
        finetune(tiny_run, "classify", train, dev, None, probe_epochs=-1, **FAST)


def test_an_export_length_past_the_table_is_one_sentence_without_a_note_before_it(
    classifier, tmp_path, capsys
):
    # "this export reads 1024 tokens ..." came first, then the error that it cannot.
    command = ["export", "--run", str(classifier.output_dir), "--output", str(tmp_path / "m")]
    assert main([*command, "--max-length", "1024"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("--max-length must be between 4 and 128 (the model's position table), "
                         "got 1024."), line  # fmt: skip
