"""Fine-tuned taggers and QA models export, and TF Serving answers as the Keras model does.

Each task fine-tunes the tiny run briefly on small synthetic data (the scores
need not be good, only equal), exports it with ``keras-electra export``, loads
the SavedModel the way TF Serving does (:class:`SignatureRunner`) and compares
scores and decoded tags or answers with the Keras side
(:meth:`FinetunedModel.predict_examples`) on ordinary and edge-case inputs.
"""

import json
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import assert_same_records, marker_squad, score_everywhere
from tfserving_standin import SignatureRunner, replay_warmup

from keras_electra.cli import main
from keras_electra.errors import ConfigError
from keras_electra.export import TextClassifierModule
from keras_electra.export.qa import MAX_WINDOWS, PADDING_LOGIT
from keras_electra.finetuning import finetune, load_finetuned, predict_file, save_finetuned
from keras_electra.finetuning.readers import QAExample, TaggedSentence
from keras_electra.finetuning.tasks.tagging import align_words
from keras_electra.serving.errors import ServingError

L = 32
FAST = dict(batch_size=16, max_seq_length=L, progress=False)
PERSONS, PLACES = ["king", "queen", "duke", "lord"], ["london", "rome", "france", "england"]
KEYWORDS = {"marker", *PERSONS, *PLACES}
LONG_WORD = ",".join(["x"] * 40)  # one whitespace word of 79 pieces: longer than L


@pytest.fixture(scope="module")
def words(tiny_run):
    vocab = (tiny_run / "vocab.txt").read_text(encoding="utf-8").split("\n")
    return [w for w in vocab if w.isalpha() and len(w) > 2 and w not in KEYWORDS]


def texts(*values):
    return np.array([v.encode("utf-8") for v in values], object)


def export(model_dir, output) -> str:
    assert main(["export", "--run", str(model_dir), "--output", str(output)]) == 0
    return str(output / "1")


def dims(info) -> list[int]:
    return [d.size for d in info.tensor_shape.dim]


def audit_ops(export_dir: str) -> None:
    """Every op is core TF or one of the tf-text ops TF Serving links (as in test_export)."""
    from test_export import AUDIT, TF_SERVING_TEXT_OPS

    result = subprocess.run(
        [sys.executable, "-c", AUDIT, export_dir], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    audit = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(audit["not_core"]) <= TF_SERVING_TEXT_OPS, audit["not_core"]


# === Tagging ===


@pytest.fixture(scope="module")
def tagger(tiny_run, words, tmp_path_factory):
    d = tmp_path_factory.mktemp("tagger")
    rng = random.Random(0)
    with (d / "train.conll").open("w", encoding="utf-8") as f:
        for _ in range(128):
            for _ in range(rng.randint(4, 12)):
                x = rng.random()
                if x < 0.15:
                    f.write(f"{rng.choice(PERSONS)} B-PER\n")
                elif x < 0.3:
                    f.write(f"{rng.choice(PLACES).title()} B-LOC\n")
                else:
                    f.write(f"{rng.choice(words)} O\n")
            f.write("\n")
    # Enough epochs that the tagger predicts B-PER, so the parity covers more than "O".
    return finetune(tiny_run, "tag", d / "train.conll", output_dir=d / "ner", **FAST, epochs=8)


@pytest.fixture(scope="module")
def tagger_export(tagger, tmp_path_factory):
    return export(tagger.output_dir, tmp_path_factory.mktemp("saved") / "ner")


def tag_inputs(words):
    rng = random.Random(1)
    return [
        "the king rode to London",
        "",
        "   ",
        f"a {LONG_WORD} king",  # the long word cuts the sentence after "a"
        " ".join(rng.sample(words, 40)),  # more words than fit in L
        "Ünïcödé  queen\u3000in\u00a0Rome 🙂 中文",  # Unicode words and whitespace
        "\u0301 lord",  # a word with no pieces is [UNK]
    ]


def test_tagger_export_matches_keras_scores_and_tags(tagger, tagger_export, words):
    loaded = load_finetuned(tagger.output_dir)
    labels = loaded.settings.labels
    sentences = tag_inputs(words)
    split = [s.split() for s in sentences]
    examples = [TaggedSentence(w, ["O"] * len(w), 1) for w in split]
    keras_tags = [row["tags"] for row in loaded.predict_examples(examples)]
    assert {"O", "B-PER"} <= {tag for row in keras_tags for tag in row}
    x, _, positions = align_words(loaded.tokenizer, split, None, L)
    probs = tf.nn.softmax(loaded.model(x, training=False)).numpy()

    with SignatureRunner(tagger_export) as runner:
        sig = runner.signatures["serving_default"]
        assert set(sig.inputs) == {"text"} and dims(sig.inputs["text"]) == [-1]
        t = len(labels)
        expected = {
            "tag_probs": (tf.float32, [-1, -1, t]),
            "tags": (tf.string, [-1, -1]),
            "words": (tf.string, [-1, -1]),
            "word_mask": (tf.int32, [-1, -1]),
            "num_words": (tf.int32, [-1]),
            "tag_names": (tf.string, [-1, t]),
        }
        assert set(sig.outputs) == set(expected)
        for name, (dtype, shape) in expected.items():
            assert sig.outputs[name].dtype == dtype.as_datatype_enum, name
            assert dims(sig.outputs[name]) == shape, name
        got = runner.run("serving_default", {"text": texts(*sentences)})
        empty = runner.run("serving_default", {"text": np.array([], object)})

    width = max(len(w) for w in split)
    assert got["tag_probs"].shape == (len(sentences), width, t)
    assert got["tag_names"].tolist() == [[n.encode() for n in labels]] * len(sentences)
    for i, words_i in enumerate(split):
        n, kept = len(words_i), len(positions[i])
        assert got["num_words"][i] == n
        assert [w.decode() for w in got["words"][i][:n]] == words_i
        assert [tag.decode() for tag in got["tags"][i][:n]] == keras_tags[i]
        assert (got["tags"][i][n:] == b"").all() and (got["words"][i][n:] == b"").all()
        assert got["word_mask"][i].tolist() == [1] * kept + [0] * (width - kept)
        np.testing.assert_allclose(got["tag_probs"][i][:kept], probs[i, positions[i]], atol=1e-5)
        assert (got["tag_probs"][i][kept:] == 0).all()
    assert got["num_words"][:3].tolist() == [5, 0, 0]
    assert got["word_mask"][3].sum() == 1 and got["tags"][3][2] == b"O"  # cut words are O
    assert 0 < got["word_mask"][4].sum() < 40
    assert got["tag_probs"].dtype == np.float32 and empty["tag_probs"].shape == (0, 0, t)


def test_tagger_export_keeps_assets_warms_up_and_uses_serving_ops(tagger_export):
    assets = set(tf.io.gfile.listdir(tagger_export + "/assets.extra"))
    assert {"config.json", "vocab.txt", "finetune.json", "labels.txt"} <= assets
    assert replay_warmup(tagger_export) == 2
    audit_ops(tagger_export)


def test_score_gives_a_tagger_exports_tags_in_process_and_over_grpc_and_rest(
    tagger, tagger_export, words, capsys
):
    # (An empty text is refused by score, as by predict; the export's answer to one is
    # tests/test_export.py's.)
    sentences = ["the king rode to London", "Ünïcödé  queen\u3000in\u00a0Rome 🙂 中文"]
    split = [s.split() for s in sentences]
    examples = [TaggedSentence(w, ["O"] * len(w), 1) for w in split]
    rows = load_finetuned(tagger.output_dir).predict_examples(examples)
    expected = [{"text": s, **row} for s, row in zip(sentences, rows, strict=True)]
    for where, (shown, records) in score_everywhere(tagger_export, sentences, capsys).items():
        assert records == expected, where
        lines = [" ".join(f"{w}/{t}" for w, t in zip(*row.values(), strict=True)) for row in rows]
        assert shown.split("\n")[:-1] == lines, where


def test_predict_reads_a_tagger_export_as_its_directory(tagger, tagger_export):
    train = tagger.output_dir.parent / "train.conll"
    from_directory = predict_file(tagger.output_dir, train)
    assert predict_file(tagger_export, train) == from_directory
    assert set(from_directory[0]) == {"words", "tags"} and len(from_directory) == 128


def test_predict_marks_a_sentence_longer_than_the_model_on_the_run_and_its_export(
    tagger, tagger_export, words, tmp_path, capsys
):
    long, short = random.Random(5).sample(words, 60), ["the", "king", "rode"]
    conll = tmp_path / "long.conll"
    conll.write_text("\n".join(long) + "\n\n" + "\n".join(short) + "\n", encoding="utf-8")
    rows = predict_file(tagger.output_dir, conll)
    assert predict_file(tagger_export, conll) == rows
    assert [row.get("truncated") for row in rows] == [True, None]
    assert len(rows[0]["tags"]) == 60 and rows[0]["tags"][-1] == "O"
    assert main(["predict", "--model", str(tagger_export), "--input", str(conll)]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line) for line in out.splitlines()] == rows
    assert err.strip().splitlines()[-1] == (
        "1 of 2 sentences was longer than the model's length: its words past it are tagged O "
        'without being scored (its row says "truncated": true); fine-tune with a larger '
        "--max-seq-length to tag them."
    )


def test_an_export_of_another_kind_into_a_models_folder_is_refused(tagger, reader, tmp_path):
    # A QA export written as version 2 of a tagger's folder would have switched every
    # client of that model name from tags to answers.
    from keras_electra.export import export as export_run

    base = tmp_path / "ner"
    assert export_run(tagger.output_dir, base).name == "1"
    with pytest.raises(ConfigError) as error:
        export_run(reader.output_dir, base)
    assert str(error.value) == (
        f"--output '{base}' serves a tag model (version 1), and a qa export as its next "
        "version would switch every client of that model name to other answers; export to a "
        "new folder (saved_models/OTHER_NAME), or remove the old versions first."
    )
    assert sorted(p.name for p in base.iterdir()) == ["1"]
    assert export_run(tagger.output_dir, base).name == "2"  # a new version of the same kind


def test_an_export_at_another_length_than_the_fine_tunings_says_so(tagger, tmp_path, capsys):
    # Exported at --max-length 128, a classifier fine-tuned at 32 flipped labels against
    # `predict` on its directory, without a word.
    from keras_electra.export import export as export_run

    trained = tagger.settings.max_seq_length
    capsys.readouterr()
    export_run(tagger.output_dir, tmp_path / "same")
    assert "Note:" not in capsys.readouterr().err
    export_run(tagger.output_dir, tmp_path / "longer", max_length=trained * 2)
    assert capsys.readouterr().err == (
        f"Note: '{tagger.output_dir}' was fine-tuned on {trained}-token inputs and this export "
        f"reads {trained * 2}, so a text longer than {trained} pieces scores otherwise than "
        f"with `predict --model {tagger.output_dir}` (the export reads on, at positions the "
        f"fine-tuning never trained); leave --max-length out to export at {trained}.\n"
    )
    # A new fine-tuning into the same directory, interrupted: the export is of the old model.
    resume = tagger.output_dir / "resume"
    resume.mkdir()
    try:
        (resume / "state.json").write_text('{"fingerprint": "0"}', encoding="utf-8")
        export_run(tagger.output_dir, tmp_path / "during")
    finally:
        shutil.rmtree(resume)
    assert capsys.readouterr().err == (
        f"Note: '{resume}' holds a fine-tuning that has not finished, which will replace "
        "this model when it does; this export is of the model before it.\n"
    )


def test_classifier_module_refuses_other_tasks(tagger):
    with pytest.raises(ConfigError, match=r"use export\(\)"):
        TextClassifierModule(tagger)


# === Question answering ===


@pytest.fixture(scope="module")
def reader(tiny_run, words, tmp_path_factory):
    d = tmp_path_factory.mktemp("qa")
    (d / "train.json").write_text(
        json.dumps(marker_squad(words, 96, 2, max_words=30)), encoding="utf-8"
    )
    settings = dict(version_2=True, max_query_length=8, doc_stride=8, max_answer_length=4)
    result = finetune(
        tiny_run, "qa", d / "train.json", output_dir=d / "qa", **settings, **FAST, epochs=2
    )
    # Brief training leaves every answerability logit about the same: move the threshold
    # between them so that the test inputs exercise both answers and the null decision.
    best = sorted(max(a for *_, a in rows) for rows in keras_windows(result, qa_examples(words)))
    half = len(best) // 2
    bias = result.model.answerable_head.bias
    bias.assign(bias - (best[half - 1] + best[half]) / 2)
    save_finetuned(result, result.output_dir)
    return result


@pytest.fixture(scope="module")
def reader_export(reader, tmp_path_factory):
    return export(reader.output_dir, tmp_path_factory.mktemp("saved") / "qa")


def qa_inputs(words):
    rng = random.Random(3)
    question = "what follows the marker?"
    pairs = [(question, " ".join(rng.sample(words, 8) + ["marker", "rome"] + rng.sample(words, 4)))]
    pairs += [(question, " ".join(rng.sample(words, k))) for k in (5, 25, 45)]  # 1 to 6 windows
    pairs += [
        (question, ""),
        ("", "an answer without a question"),
        (question + " " + " ".join(rng.sample(words, 20)), "the question is cut to 8 pieces"),
        (question, f"the {LONG_WORD} marker king spans windows"),
        ("wo ist der Ünïcödé? 🙂", "Ünïcödé\u3000steht  hier\u00a0中文 marker 🙂 und"),
        (question, "\u0301 marker \u0301"),
    ]
    return pairs


def qa_examples(words) -> list[QAExample]:
    return [QAExample(str(i), q, c) for i, (q, c) in enumerate(qa_inputs(words))]


def keras_windows(loaded, examples):
    """Per question, the Keras model's (start, end, answerable) per window."""
    x, _, features = loaded.task.encode(examples, loaded.tokenizer, loaded.settings, labelled=False)
    out = {k: np.asarray(v) for k, v in loaded.model(x, training=False).items()}
    windows = [[] for _ in examples]
    for r, feature in enumerate(features):
        windows[feature[0]].append(
            (out["start_logits"][r], out["end_logits"][r], out["answerable"][r])
        )
    return windows


def test_qa_export_matches_keras_logits_and_answers(reader, reader_export, words):
    loaded = load_finetuned(reader.output_dir)
    pairs, examples = qa_inputs(words), qa_examples(words)
    answers = [row["answer"] for row in loaded.predict_examples(examples)]
    windows = keras_windows(loaded, examples)

    with SignatureRunner(reader_export) as runner:
        sig = runner.signatures["serving_default"]
        assert set(sig.inputs) == {"question", "context"}
        expected = {
            "answer": (tf.string, [-1]),
            "answer_start_word": (tf.int32, [-1]),
            "answer_end_word": (tf.int32, [-1]),
            "answer_score": (tf.float32, [-1]),
            "answerable": (tf.float32, [-1]),
            "start_logits": (tf.float32, [-1, -1, L]),
            "end_logits": (tf.float32, [-1, -1, L]),
            "tokens": (tf.string, [-1, -1, L]),
            "num_windows": (tf.int32, [-1]),
            "context_cut": (tf.bool, [-1]),
        }
        assert set(sig.outputs) == set(expected)
        for name, (dtype, shape) in expected.items():
            assert sig.outputs[name].dtype == dtype.as_datatype_enum, name
            assert dims(sig.outputs[name]) == shape, name
        feeds = {
            "question": texts(*(q for q, _ in pairs)),
            "context": texts(*(c for _, c in pairs)),
        }
        got = runner.run("serving_default", feeds)
        none = np.array([], object)  # a batch of no questions (it failed in an ArgMax)
        empty = runner.run("serving_default", {"question": none, "context": none})

    assert {k: v.shape[0] for k, v in empty.items()} == dict.fromkeys(expected, 0)
    assert [len(w) for w in windows] == got["num_windows"].tolist()
    assert max(got["num_windows"]) >= 4 and got["start_logits"].shape[1] == max(got["num_windows"])
    for i, rows in enumerate(windows):
        for k, (start, end, _) in enumerate(rows):
            np.testing.assert_allclose(got["start_logits"][i, k], start, atol=1e-5)
            np.testing.assert_allclose(got["end_logits"][i, k], end, atol=1e-5)
        assert (got["start_logits"][i, len(rows) :] == PADDING_LOGIT).all()
        np.testing.assert_allclose(got["answerable"][i], max(a for _, _, a in rows), atol=1e-5)
    assert [a.decode() for a in got["answer"]] == answers
    assert 0 < sum(map(bool, answers)) < len(answers)  # answers and null decisions
    has_words = [bool(c.split()) for _, c in pairs]
    assert [bool(a) for a in answers] == [
        a > 0 and w for a, w in zip(got["answerable"], has_words, strict=True)
    ]
    context_words = [c.split() for _, c in pairs]
    for i, answer in enumerate(answers):
        first, last = got["answer_start_word"][i], got["answer_end_word"][i]
        if answer:
            assert " ".join(context_words[i][first : last + 1]) == answer
            assert 0 <= last - first < loaded.settings.max_answer_length
        else:
            assert first == last == -1
    assert got["answer_score"][4] == 0 and got["answer_start_word"][4] == -1  # empty context
    assert got["tokens"][0, 0, 0] == b"[CLS]" and got["tokens"][0, 0, -1] in (b"", b"[SEP]")


def test_score_gives_a_qa_exports_answers_and_spans_in_process_and_over_grpc_and_rest(
    reader, reader_export, words, capsys
):
    # score refuses an empty question or context, as predict does.
    pairs = [(q, c) for q, c in qa_inputs(words) if q.strip() and c.strip()]
    feeds = {"question": texts(*(q for q, _ in pairs)), "context": texts(*(c for _, c in pairs))}
    with SignatureRunner(reader_export) as runner:
        got = runner.run("serving_default", feeds)
    expected = [
        {
            "question": question,
            "context": context,
            "answer": got["answer"][i].decode(),
            "start_word": int(got["answer_start_word"][i]),
            "end_word": int(got["answer_end_word"][i]),
            "score": float(got["answer_score"][i]),
        }
        for i, (question, context) in enumerate(pairs)
    ]
    answered = [bool(record["answer"]) for record in expected]
    assert any(answered) and not all(answered)  # answers and null decisions
    arguments = [text for pair in pairs for text in pair]  # question, context, question, ...
    for where, (shown, records) in score_everywhere(reader_export, arguments, capsys).items():
        assert_same_records(records, expected, 1e-4)
        lines = []
        for r in records:
            if r["start_word"] < 0:
                best = f"the best span's score {r['score']:.2f}"  # not the answerability
                lines.append(f"{r['question']} -> no answer ({best})")
            else:
                span = f"context words {r['start_word']}-{r['end_word']}"
                lines.append(f'{r["question"]} -> "{r["answer"]}" ({span}, score {r["score"]:.2f})')
        assert shown.splitlines() == lines, where


def test_score_input_takes_a_question_and_its_context_on_each_line(
    reader_export, words, tmp_path, capsys
):
    """A file of examples for an export of two inputs: a tab between the question and its
    context on each line, answered as the same texts given as arguments; a file of one
    text per line is refused in one sentence naming both inputs."""
    pairs = [(q, c) for q, c in qa_inputs(words) if q.strip() and c.strip()][:4]
    path = tmp_path / "questions.tsv"
    path.write_text("".join(f"{q}\t{c}\n" for q, c in pairs), encoding="utf-8")
    arguments = [text for pair in pairs for text in pair]
    assert main(["score", "--model", str(reader_export), "--json", *arguments]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert main(["score", "--model", str(reader_export), "--json", "--input", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert_same_records(rows, expected, 1e-5)
    assert [(r["question"], r["context"]) for r in rows] == pairs
    path.write_text("".join(f"{q}\n{c}\n" for q, c in pairs), encoding="utf-8")
    assert main(["score", "--model", str(reader_export), "--input", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert (
        f"'{path}' has one text per line, but the export takes question and context; write "
        "both on each line, a tab between them." in err
    ), err


def test_predict_reads_a_qa_export_as_its_directory(reader, reader_export, tmp_path):
    squad = json.loads((reader.output_dir.parent / "train.json").read_text(encoding="utf-8"))
    squad["data"] = squad["data"][:24]
    data = tmp_path / "questions.json"
    data.write_text(json.dumps(squad), encoding="utf-8")
    from_directory = predict_file(reader.output_dir, data)
    from_export = predict_file(reader_export, data)
    keys = ("id", "question", "answer")
    assert [{k: row[k] for k in keys} for row in from_export] == from_directory
    assert set(from_export[0]) == {*keys, "start_word", "end_word", "score"}


@pytest.mark.parametrize("doc_stride", [None, 128, 8])
def test_qa_exports_windows_are_the_fine_tunings(reader, words, doc_stride):
    """The graph reads the windows encode() makes: half a window's room apart by default
    and for a stride not below the room (a model that recorded 128, the old default),
    else the stride."""
    import dataclasses

    from keras_electra.export.qa import QuestionAnsweringModule

    settings = dataclasses.replace(reader.settings, doc_stride=doc_stride)
    finetuned = dataclasses.replace(reader, settings=settings)
    pairs = [*qa_inputs(words), ("what follows the marker?", " ".join(words[:60]))]
    examples = [QAExample(str(i), q, c) for i, (q, c) in enumerate(pairs)]
    x, _, features = reader.task.encode(examples, reader.tokenizer, settings, labelled=False)
    module = QuestionAnsweringModule(finetuned)
    w = module._windows(tf.constant([q for q, _ in pairs]), tf.constant([c for _, c in pairs]))
    assert w["example"].numpy().tolist() == [f[0] for f in features]
    assert w["size"].numpy().tolist() == [f[3] for f in features]
    np.testing.assert_array_equal(w["inputs"]["token_ids"].numpy(), x["token_ids"])
    assert max(len(r) for r in w["windows"].numpy()) > 2  # the long context: several windows


def test_qa_export_reads_at_most_max_windows_warms_up_and_uses_serving_ops(
    reader, reader_export, words
):
    loaded = load_finetuned(reader.output_dir)
    question, context = "what follows the marker?", " ".join(words[:300])
    windows = keras_windows(loaded, [QAExample("0", question, context)])[0]
    assert len(windows) > MAX_WINDOWS
    with SignatureRunner(reader_export) as runner:
        got = runner.run(
            "serving_default", {"question": texts(question), "context": texts(context)}
        )
        assert got["num_windows"].tolist() == [MAX_WINDOWS]
        assert got["context_cut"].tolist() == [True]  # read as cut: score and predict say so
        feeds = {"question": texts(question), "context": texts("a b")}
        short = runner.run("serving_default", feeds)
        assert short["context_cut"].tolist() == [False]
        for k, (start, end, _) in enumerate(windows[:MAX_WINDOWS]):
            np.testing.assert_allclose(got["start_logits"][0, k], start, atol=1e-5)
            np.testing.assert_allclose(got["end_logits"][0, k], end, atol=1e-5)
        with pytest.raises(ServingError, match="question and context must have the same length"):
            runner.run("serving_default", {"question": texts("a", "b"), "context": texts("c")})
    assert replay_warmup(reader_export) == 2
    audit_ops(reader_export)
    # A context read in part was said nowhere: predict on the export answered from its
    # beginning, predict on the fine-tuned directory from all of it.
    from keras_electra.scoring import score_with_saved_model

    scores = score_with_saved_model(
        str(reader_export), {"question": [question, question], "context": [context, "a b"]}
    )
    assert scores.truncated == [True, False]
    assert scores.truncation_note() == (
        "1 of 2 contexts was longer than the windows the export reads: its answers come from "
        'its beginning (its --json row says "truncated": true); `predict` on the fine-tuned '
        "directory reads all of it."
    )


def test_predict_examples_takes_plain_python_values(tagger, reader, words):
    # predict_examples(["a fine film"]) was "string indices must be integers": it took only
    # the objects task.read returns.
    from keras_electra.errors import InputDataError

    loaded = load_finetuned(tagger.output_dir)
    sentences = [s for s in tag_inputs(words) if s.split()][:4]
    read_form = [TaggedSentence(s.split(), [], 1) for s in sentences]
    want = [row["tags"] for row in loaded.predict_examples(read_form)]
    assert [row["tags"] for row in loaded.predict_examples(sentences)] == want
    assert [row["tags"] for row in loaded.predict_examples([s.split() for s in sentences])] == want
    with pytest.raises(InputDataError, match=r"^Pass a list of examples, not one"):
        loaded.predict_examples(sentences[0])
    with pytest.raises(InputDataError, match=r"^Example 2 is a int; a tag model takes texts"):
        loaded.predict_examples([sentences[0], 7])
    with pytest.raises(InputDataError, match=r"^Example 1 has no words to tag"):
        loaded.predict_examples(["  "])

    qa = load_finetuned(reader.output_dir)
    pairs = qa_inputs(words)[:3]
    want = [row["answer"] for row in qa.predict_examples(qa_examples(words)[:3])]
    assert [row["answer"] for row in qa.predict_examples(pairs)] == want
    as_dicts = [{"question": q, "context": c} for q, c in pairs]
    assert [row["answer"] for row in qa.predict_examples(as_dicts)] == want
    with pytest.raises(InputDataError, match=r"a qa model takes \(question, context\) pairs"):
        qa.predict_examples(["what follows the marker?"])
