"""Fine-tuning building blocks: metrics on hand-computed values, readers, layer-wise rates."""

import json

import keras
import numpy as np
import pytest

from keras_electra.config import ElectraConfig
from keras_electra.errors import ConfigError, InputDataError
from keras_electra.finetuning import (
    ElectraClassifier,
    LayerwiseAdamW,
    layer_factor,
    layerwise_factors,
    recipe_defaults,
)
from keras_electra.finetuning import metrics as m
from keras_electra.finetuning.readers import read_conll, read_squad, read_table
from keras_electra.finetuning.settings import check_task, infer_preset
from keras_electra.layers import ElectraBackbone

# === Metrics ===


def test_classification_metrics_match_hand_computed_values():
    labels, preds = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    assert m.accuracy(labels, preds) == 0.6
    # TP=2 FP=1 FN=1: F1 = 4 / (4 + 1 + 1)
    assert m.f1_score(labels, preds) == pytest.approx(2 / 3)
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 - 1) / sqrt(3*3*2*2)
    assert m.matthews_corrcoef(labels, preds) == pytest.approx(1 / 6)
    assert m.matthews_corrcoef([1, 1, 0, 0], [1, 1, 1, 1]) == 0.0  # undefined -> 0, as sklearn
    # Three classes: confusion [[2,1,0],[0,1,1],[0,0,1]]; c=4, s=6, t=[3,2,1], p=[2,2,2]
    # MCC = (4*6 - (6+4+2)) / sqrt((36-12)(36-14)) = 12 / sqrt(528)
    multi_labels, multi_preds = [0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 2, 2]
    assert m.matthews_corrcoef(multi_labels, multi_preds) == pytest.approx(12 / 528**0.5)
    # F1 per class: 0 -> 0.8, 1 -> 0.5, 2 -> 2/3
    assert m.macro_f1(multi_labels, multi_preds) == round((0.8 + 0.5 + 2 / 3) / 3, 4)


def test_correlations_match_hand_computed_values():
    assert m.pearson([1, 2, 3], [2, 4, 7]) == round(5 / (2 * 12.666666666666666) ** 0.5, 4)
    # ties share the average rank: x ranks [1, 2.5, 2.5, 4]
    assert m.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == round(4.5 / (4.5 * 5) ** 0.5, 4)
    assert m.spearman([1, 2, 3], [30, 20, 10]) == -1.0
    assert m.pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_squad_scores_use_the_official_normalization():
    assert m.normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert m.squad_exact("an apple", ["Apple"]) == 1.0
    # pred [eiffel, tower], gold [eiffel, tower, in, paris]: P=1, R=0.5
    assert m.squad_f1("the Eiffel tower", ["Eiffel Tower in Paris"]) == round(2 / 3, 4)
    assert m.squad_f1("Paris", ["London", "paris."]) == 1.0  # best over golds
    assert m.squad_f1("", []) == 1.0 and m.squad_f1("x", []) == 0.0  # no-answer questions
    scores = m.squad_scores(
        {"a": "red car", "b": "", "c": "blue"}, {"a": ["a red car"], "b": [], "c": ["green"]}
    )
    assert scores == {"exact_match": round(200 / 3, 4), "f1": round(200 / 3, 4)}


def test_chunks_follow_conlleval_for_bio_and_bioes():
    assert m.extract_chunks(["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]) == [
        ("PER", 0, 1),
        ("LOC", 3, 3),
        ("LOC", 4, 4),
    ]
    # conlleval: I- after O (or after another type) starts a chunk
    assert m.extract_chunks(["O", "I-ORG", "I-PER", "I-PER"]) == [("ORG", 1, 1), ("PER", 2, 3)]
    assert m.extract_chunks(["S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]) == [
        ("PER", 0, 0),
        ("LOC", 1, 3),
        ("LOC", 4, 4),
    ]
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-LOC"]]
    scores = m.chunk_scores(gold, pred)
    # correct 2 (PER, ORG) of 4 predicted and 3 gold
    assert scores["precision"] == 50.0 and scores["recall"] == round(200 / 3, 4)
    assert scores["f1"] == round(2 * 50 * (200 / 3) / (50 + 200 / 3), 4)
    assert scores["token_accuracy"] == round(100 * 4 / 6, 4)  # percent, as the chunk scores


# === Readers ===


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_tables_in_tsv_csv_and_jsonl(tmp_path):
    tsv = write(tmp_path / "train.tsv", 'sentence\tlabel\nsays "hi" there\t1\nbye\t0\n')
    rows = read_table(tsv, "sentence")
    assert [(r["text"], r["label"], r["line"]) for r in rows] == [
        ('says "hi" there', "1", 2),
        ("bye", "0", 3),
    ]
    csv = write(tmp_path / "pairs.csv", 'a,b,y\n"x, y",z,yes\n')
    assert read_table(csv, "a", "b", "y")[0] == {
        "text": "x, y",
        "text_b": "z",
        "label": "yes",
        "file": str(csv),
        "line": 2,
    }
    jsonl = write(tmp_path / "d.jsonl", '{"t": "good", "s": 4.5}\n\n{"t": "bad", "s": 0}\n')
    assert [r["label"] for r in read_table(jsonl, "t", label_column="s")] == ["4.5", "0"]
    cola = write(tmp_path / "cola.tsv", "src\t1\t\tA sentence.\nsrc\t0\t*\tBad one.\n")
    rows = read_table(cola, 3, label_column=1, header=False)
    assert [(r["text"], r["label"]) for r in rows] == [("A sentence.", "1"), ("Bad one.", "0")]
    unlabelled = read_table(tsv, "sentence", label_column="missing_is_fine", require_labels=False)
    assert len(unlabelled) == 2


@pytest.mark.parametrize("suffix, sep", [(".tsv", "\t"), (".csv", ",")])
def test_a_text_longer_than_the_csv_modules_field_limit_is_read(tmp_path, suffix, sep):
    long = "word " * 40_000  # 200,000 characters: over csv's default 131,072
    rows = read_table(write(tmp_path / f"long{suffix}", f"text{sep}label\n{long}{sep}pos\n"))
    assert [(len(r["text"]), r["label"]) for r in rows] == [(len(long), "pos")]


def test_only_a_line_feed_ends_a_row(tmp_path):
    # \x85, \x0c and \u2028 are line breaks to str.splitlines, but text in a TSV row or
    # a JSON string: each text below stays one row (one question).
    tsv = write(tmp_path / "nel.tsv", "sentence\tlabel\na good\x85film\tpos\nbad\x0cone\tneg\n")
    assert [(r["text"], r["line"]) for r in read_table(tsv, "sentence")] == [
        ("a good\x85film", 2),
        ("bad\x0cone", 3),
    ]
    line = json.dumps({"text": "a good\u2028film", "label": "pos"}, ensure_ascii=False)
    assert read_table(write(tmp_path / "ls.jsonl", line + "\n"))[0]["text"] == "a good\u2028film"
    context = "Ann wrote\u2028the book."
    qa = {"id": "1", "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}]}
    squad = {"data": [{"paragraphs": [{"context": context, "qas": [qa]}]}]}
    path = write(tmp_path / "ls.json", json.dumps(squad, ensure_ascii=False))
    assert read_squad(path)[0].context == context
    # A quoted CSV field keeps its line break (the words are not glued together), and the
    # row after it has its own line number; Windows line ends read the same.
    csv = write(tmp_path / "quoted.csv", 'text,label\r\n"a good\r\nfilm",pos\r\nbad,neg\r\n')
    assert [(r["text"], r["label"], r["line"]) for r in read_table(csv)] == [
        ("a good\nfilm", "pos", 3),
        ("bad", "neg", 4),
    ]


@pytest.mark.parametrize(
    "name, text, kwargs, message",
    [
        (
            "a.tsv",
            "text\tlabel\nhi\t1\n",
            {"text_column": "sentence"},
            r"a\.tsv: no text column 'sentence' \(columns: text, label\)",
        ),
        (
            "b.tsv",
            "text\tlabel\nhi\t1\nlonely\n",
            {},
            r"b\.tsv:3: the row has 1 fields but the label column",
        ),
        (
            "semicolons.csv",
            "text;label\nhi;1\n",
            {},
            r"no text column 'text' \(columns: text;label\); the header row is one column "
            r"holding ';', but a \.csv file's columns are separated by commas",
        ),
        (
            "commas.tsv",
            "text,label\nhi,1\n",
            {},
            r"holding ',', but a \.tsv file's columns are separated by tabs: save it with those",
        ),
        ("c.csv", "text,label\n  ,1\n", {}, r"c\.csv:2: the text is empty"),
        ("d.csv", "text,label\nhi,\n", {}, r"d\.csv:2: the label is empty"),
        ("e.jsonl", '{"text": "a", "label": 1}\n{"text": "b"\n', {}, r"e\.jsonl:2: not valid JSON"),
        ("f.jsonl", '{"sentence": "a", "label": 1}\n', {}, r"f\.jsonl:1: no 'text' field"),
        ("g.xlsx", "x", {}, r"unknown table format '\.xlsx'"),
        (
            "h.tsv",
            "sentence\tlabel\nhi\t1\n",
            {"text_column": 5},
            r"h\.tsv: no text column 5 \(0-based; the file has 2: sentence, label\); pass a "
            r"column name or an index below 2\.$",
        ),
        (
            "i.csv",
            "text,label\nhi,1\n",
            {"text_column": "sentence", "label_column": None, "require_labels": False},
            r"i\.csv: no text column 'sentence' \(columns: text, label\); the model reads the "
            r"columns it was fine-tuned on: name the file's text column 'sentence'\.$",
        ),
    ],
)
def test_bad_tables_name_file_line_and_fix(tmp_path, name, text, kwargs, message):
    with pytest.raises(InputDataError, match=message):
        read_table(write(tmp_path / name, text), **kwargs)


def test_a_directory_for_a_data_file_says_so(tmp_path):
    # It said "Data file '...' does not exist" of a directory that does.
    for read in (read_table, read_conll, read_squad):
        with pytest.raises(InputDataError, match=r"'.*' is a directory; pass a data file"):
            read(tmp_path)


def test_conll_and_its_errors(tmp_path):
    path = write(tmp_path / "t.conll", "-DOCSTART- O\n\nJohn NNP B-PER\nlives VB O\n\nRome B-LOC\n")
    sentences = read_conll(path)
    assert [(s.words, s.tags, s.line) for s in sentences] == [
        (["John", "lives"], ["B-PER", "O"], 3),
        (["Rome"], ["B-LOC"], 6),
    ]
    with pytest.raises(InputDataError, match=r"bad\.conll:2: tag 'PER' is not BIO/BIOES"):
        read_conll(write(tmp_path / "bad.conll", "a O\nb PER\n"))
    with pytest.raises(InputDataError, match=r"one\.conll:1: expected 'word tag'"):
        read_conll(write(tmp_path / "one.conll", "lonely\n"))
    # predict on a sentence per line: it said "tag 'London' is not BIO/BIOES ... fix the tag
    # column", of a file predict reads no tags from.
    lines = write(tmp_path / "lines.conll", "John visited London\n")
    with pytest.raises(InputDataError) as caught:
        read_conll(lines, require_tags=False)
    assert str(caught.value) == (
        f"{lines}:1: the line holds 3 words and no BIO/BIOES tag, but a CoNLL line is one word "
        "(then, optionally, its tag, which predict ignores); write one word per line, a blank "
        "line between sentences."
    )
    untagged = write(tmp_path / "untagged.conll", "John\nvisited B-LOC\n")
    assert read_conll(untagged, require_tags=False)[0].words == ["John", "visited"]
    # A JSON lines file of tokens and tags: its lines read as words ("tag 'O"]}' is not
    # BIO/BIOES"), or as untagged words for predict.
    tokens = write(tmp_path / "t.jsonl", '{"tokens": ["John"], "tags": ["B-PER", "O"]}\n')
    for require_tags in (True, False):
        with pytest.raises(InputDataError, match=r"t\.jsonl: tagging reads CoNLL text"):
            read_conll(tokens, require_tags=require_tags)


def test_squad_and_its_errors(tmp_path):
    data = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": "Paris is in France.",
                        "qas": [
                            {
                                "id": "1",
                                "question": "Where?",
                                "answers": [{"text": "France", "answer_start": 12}],
                            },
                            {"id": "2", "question": "Who?", "answers": [], "is_impossible": True},
                        ],
                    }
                ]
            }
        ]
    }
    path = write(tmp_path / "s.json", json.dumps(data))
    examples = read_squad(path)
    assert [(e.qid, e.answers, e.is_impossible) for e in examples] == [
        ("1", ["France"], False),
        ("2", [], True),
    ]
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    with pytest.raises(
        InputDataError, match=r"question id '1': answer 'France' is not at answer_start 3"
    ):
        read_squad(write(tmp_path / "bad.json", json.dumps(data)))
    with pytest.raises(InputDataError, match=r"broken\.json:2: not valid JSON"):
        read_squad(write(tmp_path / "broken.json", '{"data":\n ]'))


# === Question answering windows ===


def qa_examples(words: list[str], spans: list[tuple[int, int]]):
    """One question per ``(first, last)`` word span of the context ``words``: its answer."""
    from keras_electra.finetuning.readers import QAExample

    context = " ".join(words)
    starts = [len(" ".join(words[:i])) + (1 if i else 0) for i in range(len(words))]
    return [
        QAExample(str(n), "what ?", context, [" ".join(words[a : b + 1])], starts[a])
        for n, (a, b) in enumerate(spans)
    ]


def test_qa_windows_overlap_by_default_so_every_short_answer_is_in_one():
    """--doc-stride 128 beside --max-seq-length 128 (both defaults) stepped a whole window:
    an answer across a window boundary lay in no window and trained as no answer."""
    from keras_electra.finetuning.tasks.qa import window_step, windows
    from keras_electra.settings import FinetuneOptions

    default = FinetuneOptions().doc_stride
    for room in (1, 2, 3, 5, 21, 61, 123, 125):
        for stride in (default, None, 1, room // 3, room - 1, room, 128):
            step = window_step(room, stride)
            overlap = room - step
            # A stride that leaves an overlap is kept; the default, and any other, is half.
            given = stride is not None and 0 < stride < room
            assert step == (stride if given else max(1, room // 2)), (room, stride)
            assert overlap >= (1 if room >= 2 else 0) and overlap >= (0 if given else room // 2)
            for n in (1, room, room + 1, 2 * room + 3, 5 * room + 1):
                spans = windows(n, room, stride)
                assert spans[0][0] == 0 and spans[-1][0] + spans[-1][1] == n
                assert all(0 < size <= room for _, size in spans)
                # Every answer no longer than the overlap lies whole in some window.
                length = min(n, max(overlap, 1))
                for a in range(n - length + 1):
                    assert any(s <= a and a + length <= s + size for s, size in spans), (
                        room,
                        stride,
                        n,
                        a,
                    )


def test_a_question_length_that_leaves_no_window_is_refused_before_the_stride():
    # --max-seq-length 32 beside the default --max-query-length 64 left a negative room:
    # --doc-stride 100 passed unchecked, and the first long question failed later.
    from keras_electra.errors import ConfigError
    from keras_electra.settings import FinetuneOptions

    def resolved(**given):
        return FinetuneOptions(max_seq_length=32, **given).resolved("tiny", "qa", 512)

    for given in ({}, {"doc_stride": 100}):
        with pytest.raises(ConfigError) as refused:
            resolved(**given)
        assert str(refused.value) == (
            "--max-query-length 64 leaves no room for the context in windows of "
            "--max-seq-length 32 (a 64-piece question and 3 special tokens); pass "
            "--max-query-length 16 (at most 27) or a larger --max-seq-length."
        )
    with pytest.raises(ConfigError, match="--doc-stride 100 leaves no overlap between context "):
        resolved(max_query_length=16, doc_stride=100)
    assert resolved(max_query_length=27).max_query_length == 27  # 2 pieces of context
    assert FinetuneOptions(max_seq_length=32).resolved("tiny", "classify", 512)  # QA's only


def test_qa_encoding_with_the_defaults_keeps_every_answer_that_fits():
    from keras_electra.data.tokenizer import ElectraTokenizer
    from keras_electra.data.vocab import SPECIAL_TOKENS
    from keras_electra.finetuning.settings import FinetuneSettings
    from keras_electra.finetuning.tasks import QATask

    words = [f"w{i}" for i in range(160)]  # one piece each: 160 pieces, windows of 123
    tokenizer = ElectraTokenizer([*SPECIAL_TOKENS, "what", "?", *words])
    examples = qa_examples(words, [(a, a + 2) for a in range(len(words) - 2)])
    settings, task = FinetuneSettings(task="qa"), QATask()
    x, y, features = task.encode(examples, tokenizer, settings)
    ids = np.asarray(x["token_ids"])
    kept = {}
    for row, feature in enumerate(features):
        start, end = int(y["start_logits"][row]), int(y["end_logits"][row])
        if start:
            kept.setdefault(feature[0], ids[row, start : end + 1].tolist())
    for n, example in enumerate(examples):
        assert n in kept, f"the answer '{example.answers[0]}' is in no window"
        assert kept[n] == tokenizer.tokenize([example.answers[0]]).flat_values.numpy().tolist()
    assert task.encoding_note(examples, y, features) == ""


def test_qa_encoding_counts_the_answers_in_no_window():
    from keras_electra.data.tokenizer import ElectraTokenizer
    from keras_electra.data.vocab import SPECIAL_TOKENS
    from keras_electra.finetuning.settings import FinetuneSettings
    from keras_electra.finetuning.tasks import QATask

    words = [f"w{i}" for i in range(20)]
    tokenizer = ElectraTokenizer([*SPECIAL_TOKENS, "what", "?", *words])
    # Windows of 16 - 2 - 3 = 11 pieces, 5 apart: [0, 11), [5, 16), [10, 20).
    examples = qa_examples(words, [(3, 11), (12, 12), (0, 10)])
    settings, task = FinetuneSettings(task="qa", max_seq_length=16, max_query_length=4), QATask()
    _, y, features = task.encode(examples, tokenizer, settings)
    assert task.encoding_note(examples, y, features) == (
        "1 of 3 training answers lie whole in no context window (they are longer than the "
        "windows' overlap), so they train as no answer; a smaller --doc-stride or a larger "
        "--max-seq-length keeps them."
    )


def test_tagging_counts_the_training_words_past_the_models_length():
    # Every word past --max-seq-length was left out of training without a word (a tagger
    # of long sentences learned no entity at their ends).
    from keras_electra.data.tokenizer import ElectraTokenizer
    from keras_electra.data.vocab import SPECIAL_TOKENS
    from keras_electra.finetuning.readers import TaggedSentence
    from keras_electra.finetuning.settings import FinetuneSettings
    from keras_electra.finetuning.tasks import TagTask

    words = [f"w{i}" for i in range(20)]
    tokenizer = ElectraTokenizer([*SPECIAL_TOKENS, *words, "london"])
    long = TaggedSentence([*words, "london"], ["O"] * 20 + ["B-LOC"], 1)
    short = TaggedSentence(["london", "w1"], ["B-LOC", "O"], 23)
    settings, task = FinetuneSettings(task="tag", max_seq_length=16), TagTask()
    task.set_labels([long, short], settings)
    _, y, positions = task.encode([long, short], tokenizer, settings)
    assert task.encoding_note([long, short], y, positions) == (
        "1 of 2 training sentences are longer than --max-seq-length, so their words past it "
        "(7 words, 1 of them tagged other than O) are not trained on; a larger "
        "--max-seq-length, or shorter sentences, keeps them."
    )
    assert task.encoding_note([short], *task.encode([short], tokenizer, settings)[1:]) == ""


def test_classifying_a_column_of_scores_says_regress_is_meant():
    # An STS score column trained 28 classes, one per value, without a word.
    from keras_electra.finetuning.tasks import ClassifyTask

    def rows(labels):
        return [
            {"label": label, "text": "t", "file": "f", "line": n} for n, label in enumerate(labels)
        ]

    task = ClassifyTask()
    scores = rows([f"{n / 7:.2f}" for n in range(30)])
    assert task.encoding_note(scores, None, None) == (
        "the 30 labels of 30 training examples are all numbers, most of them different, so "
        "each value trains as a class of its own; for a score to predict, fine-tune with "
        "--task regress."
    )
    for labels in (["1", "2", "3"] * 10, [f"w{n}" for n in range(30)]):  # star ratings, words
        assert task.encoding_note(rows(labels), None, None) == ""


# === Recipe and layer-wise learning rates ===


def test_recipe_defaults_follow_the_paper_and_tasks_are_checked():
    assert recipe_defaults("small")["learning_rate"] == 3e-4
    assert recipe_defaults("base")["learning_rate"] == 1e-4
    assert recipe_defaults("large") | {} == {
        "batch_size": 32,
        "epochs": 3,
        "dropout": 0.1,
        "weight_decay": 0.01,
        "warmup_fraction": 0.1,
        "probe_epochs": 0,  # the paper fine-tunes everything from the start (no LP-FT)
        "learning_rate": 5e-5,
        "layer_decay": 0.9,
    }
    assert infer_preset(ElectraConfig.from_preset("small", vocab_size=64)) == "small"
    with pytest.raises(
        ConfigError, match="Unknown task 'sentiment'; choose one of: classify, regress, tag, qa"
    ):
        check_task("sentiment")


def test_infer_preset_matches_every_size_that_tells_presets_apart():
    # Small and Small++ differ only in the generator's width: the released models
    # (generator as wide as the discriminator) are small++, not small.
    for name in ("tiny", "small", "small++", "base", "large"):
        config = ElectraConfig.from_preset(name, vocab_size=64, max_position_embeddings=40)
        assert infer_preset(config) == name
    # No preset's sizes: the nearest in hidden size, then in the other sizes.
    assert infer_preset(ElectraConfig.from_preset("small++", num_layers=6)) == "small++"
    assert infer_preset(ElectraConfig.from_preset("small", num_layers=6)) == "small"
    assert infer_preset(ElectraConfig(hidden_size=64, num_heads=1, embedding_size=32)) == "tiny"
    assert infer_preset(ElectraConfig.from_preset("base", num_layers=6)) == "base"


def test_the_task_registry_has_a_class_for_every_task_name():
    from keras_electra.finetuning import TASKS, get_task
    from keras_electra.finetuning.tasks import TASKS as REGISTRY

    assert tuple(REGISTRY) == TASKS
    for name in TASKS:
        task = get_task(name)
        assert task.name == name and type(task) is REGISTRY[name]
    with pytest.raises(ConfigError, match="Unknown task 'sentiment'"):
        get_task("sentiment")


@pytest.mark.parametrize("label", ["nan", "inf", "-Infinity", "1e39"])
def test_a_regression_label_that_is_not_finite_is_one_sentence(tmp_path, label):
    # float() reads each of these (1e39 overflows float32): training went on with a NaN
    # loss and NaN metrics.
    from keras_electra.finetuning import get_task

    path = write(tmp_path / "sts.tsv", f"a\tb\ty\none\ttwo\t{label}\nthree\tfour\t2.5\n")
    examples = read_table(path, "a", "b", "y")
    message = rf"sts\.tsv:2: label '{label}' is not a finite number"
    with pytest.raises(InputDataError, match=message):
        get_task("regress").targets(examples, None)
    assert get_task("regress").targets(examples[1:], None).tolist() == [[2.5]]


def test_layer_factors_head_1_top_layer_decay_embeddings_decay_to_the_l_plus_1():
    # L = 2: embeddings decay^3, layer 0 decay^2, layer 1 decay, head 1 (no off-by-one).
    assert [layer_factor(d, 2, 0.8) for d in range(4)] == pytest.approx([0.512, 0.64, 0.8, 1.0])
    config = ElectraConfig.from_preset("tiny", vocab_size=64, num_layers=2, embedding_size=64)
    model = ElectraClassifier(ElectraBackbone(config), num_classes=2)
    factors = layerwise_factors(model.backbone, 0.8)
    for v in model.trainable_variables:
        if "/embedding/" in v.path or "/projection/" in v.path:
            assert factors[v.path] == pytest.approx(0.512), v.path
        elif "transformer_layer_0" in v.path:
            assert factors[v.path] == pytest.approx(0.64), v.path
        elif "transformer_layer_1" in v.path:
            assert factors[v.path] == pytest.approx(0.8), v.path
        else:
            assert v.path not in factors and v.path.startswith("head"), v.path
    assert any("/projection/" in p for p in factors)  # embedding_size != hidden_size

    # One Adam step moves every weight by lr * factor (the first step is lr * sign(g)).
    optimizer = LayerwiseAdamW(factors, learning_rate=0.01, weight_decay=0.0, epsilon=1e-12)
    before = [v.numpy().copy() for v in model.trainable_variables]
    optimizer.apply_gradients([(keras.ops.ones(v.shape), v) for v in model.trainable_variables])
    for v, old in zip(model.trainable_variables, before, strict=True):
        np.testing.assert_allclose(old - v.numpy(), 0.01 * factors.get(v.path, 1.0), rtol=1e-4)


def test_weight_decay_scales_with_the_layer_factor():
    v = keras.Variable(np.full(2, 10.0, "float32"), name="decayed")
    optimizer = LayerwiseAdamW({v.path: 0.5}, learning_rate=0.1, weight_decay=0.2, epsilon=1e-12)
    optimizer.apply_gradients([(np.zeros(2, "float32"), v)])
    np.testing.assert_allclose(v.numpy(), 10.0 - 10.0 * 0.2 * 0.1 * 0.5, rtol=1e-6)


def test_mean_pooling_reads_only_unpadded_tokens_and_survives_a_save():
    from keras_electra.finetuning import ElectraClassifier

    config = ElectraConfig.from_preset("tiny", vocab_size=50, num_layers=1, dropout=0.0)
    keras.utils.set_random_seed(3)
    model = ElectraClassifier(ElectraBackbone(config), num_classes=3, pooling="mean")
    ids = np.array([[2, 7, 9, 3, 0, 0], [2, 11, 3, 0, 0, 0]], "int32")
    mask = (ids > 0).astype("int32")
    inputs = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": mask}
    logits = np.asarray(model(inputs))
    # The head on the hand-computed mean of the unpadded vectors.
    sequence = np.asarray(model.backbone(inputs))
    mean = (sequence * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(logits, np.asarray(model.head(mean)), rtol=1e-5, atol=1e-5)
    # Tokens under padding change nothing.
    other = dict(inputs, token_ids=np.where(mask == 1, ids, 17).astype("int32"))
    np.testing.assert_allclose(np.asarray(model(other)), logits, rtol=1e-5, atol=1e-5)
    # cls pooling differs from mean pooling on the same weights.
    assert not np.allclose(np.asarray(model.head(sequence[:, 0, :])), logits, atol=1e-4)
    restored = ElectraClassifier.from_config(model.get_config())
    assert restored.pooling == "mean"
    with pytest.raises(ValueError, match="pooling must be one of cls, mean"):
        ElectraClassifier(ElectraBackbone(config), num_classes=3, pooling="max")


def test_a_vocabulary_that_disagrees_with_the_config_is_one_sentence(tmp_path):
    from keras_electra.data import save_vocab
    from keras_electra.data.vocab import SPECIAL_TOKENS
    from keras_electra.finetuning.source import read_source

    ElectraConfig.from_preset("tiny", vocab_size=50).save(tmp_path / "config.json")
    save_vocab(list(SPECIAL_TOKENS) + ["the", "a"], tmp_path / "vocab.txt")
    with pytest.raises(
        ConfigError, match=r"vocab.txt has 7 tokens but config.json says vocab_size 50"
    ):
        read_source(tmp_path)


def test_a_row_longer_than_the_header_is_refused_not_mislabelled(tmp_path):
    # "a fine<TAB>film<TAB>pos" under "sentence<TAB>label" trained as text "a fine", label
    # "film"; an unquoted comma in a CSV text did the same.
    for name, text in (
        ("long.tsv", "sentence\tlabel\na fine\tfilm\tpos\nbad\tneg\n"),
        ("long.csv", "sentence,label\na fine, film,pos\nbad,neg\n"),
    ):
        with pytest.raises(
            InputDataError, match=r":2: the row has 3 fields but the header names 2"
        ):
            read_table(write(tmp_path / name, text), "sentence")
    # A trailing empty field (a tab at the end of the line) is not a split text.
    rows = read_table(write(tmp_path / "trail.tsv", "sentence\tlabel\ngood\tpos\t\n"), "sentence")
    assert [(r["text"], r["label"]) for r in rows] == [("good", "pos")]


def test_a_json_list_as_a_label_or_text_is_refused(tmp_path):
    # {"label": ["pos"]} became the class "['pos']".
    for line, role in (
        ('{"text": "hi", "label": ["pos"]}', "label"),
        ('{"text": {"a": 1}, "label": "pos"}', "text"),
    ):
        path = write(tmp_path / "rows.jsonl", '{"text": "ok", "label": "neg"}\n' + line + "\n")
        with pytest.raises(InputDataError, match=rf":2: the {role} is a JSON (list|dict), not one"):
            read_table(path)
    path = write(tmp_path / "n.jsonl", '{"text": "ok", "label": 1}\n')
    assert read_table(path)[0]["label"] == "1"  # numbers are labels as before


def test_predicts_missing_jsonl_field_names_the_models_column(tmp_path):
    # The hint said "pass the right column name", and predict has no column flags.
    path = write(tmp_path / "test.jsonl", '{"text": "a fine film"}\n')
    with pytest.raises(
        InputDataError,
        match="the model reads the fields it was fine-tuned on: name the file's text field "
        "'sentence'",
    ):
        read_table(path, "sentence", require_labels=False)


def squad(tmp_path, qas, context="Ann wrote the play. The ship sailed."):
    document = {"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}
    return write(tmp_path / "squad.json", json.dumps(document))


def test_squad_question_ids_must_be_unique(tmp_path):
    # Four questions with id "1" all got the last one's answer, and evaluation scored one.
    qas = [
        {
            "id": "1",
            "question": "Who wrote the play?",
            "answers": [{"text": "Ann", "answer_start": 0}],
        },
        {
            "id": "1",
            "question": "What sailed?",
            "answers": [{"text": "The ship", "answer_start": 20}],
        },
    ]
    with pytest.raises(
        InputDataError,
        match=r"qas\[1\]: question id '1' is also .*qas\[0\]'s; give each question its own id",
    ):
        read_squad(squad(tmp_path, qas))
    qas[1]["id"] = "2"
    assert [e.qid for e in read_squad(squad(tmp_path, qas))] == ["1", "2"]


def test_an_empty_squad_answer_is_one_sentence(tmp_path):
    # At the context's end: IndexError in qa.py; at 0: trained on the whole context.
    context = "Ann wrote the play."
    for start in (len(context), 0):
        qas = [{"id": "1", "question": "Who?", "answers": [{"text": "", "answer_start": start}]}]
        with pytest.raises(InputDataError, match=r"question id '1': the answer's text is empty"):
            read_squad(squad(tmp_path, qas, context))


def test_squad_of_the_wrong_shape_is_one_sentence(tmp_path):
    # Each was AttributeError: 'str' object has no attribute 'get'.
    context = "Ann wrote the play."
    good = {"id": "1", "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}]}
    for document, expected in (
        (
            {
                "data": [
                    {"paragraphs": [{"context": context, "qas": [{**good, "answers": ["Ann"]}]}]}
                ]
            },
            r"expected an answer as a JSON object, not 'Ann'",
        ),
        (
            {"data": [{"paragraphs": [{"context": context, "qas": ["Who?"]}]}]},
            r"qas\[0\]: expected a question as a JSON object",
        ),
        (
            {"data": [{"paragraphs": {"context": context, "qas": [good]}}]},
            r"data\[0\]: 'paragraphs' must be a JSON list, not dict",
        ),
        ({"data": ["article"]}, r"data\[0\]: expected an article as a JSON object"),
    ):
        path = write(tmp_path / "bad.json", json.dumps(document))
        with pytest.raises(InputDataError, match=expected) as caught:
            read_squad(path)
        assert "\n" not in str(caught.value)


def test_qa_logits_leave_out_the_question_and_padding_but_not_cls():
    # google-research/electra masks the start and end to the window and [CLS]; only the
    # padding was, so the training softmax spent probability on the question's pieces.
    from keras_electra.finetuning.models import ElectraSpanExtractor

    config = ElectraConfig.from_preset("tiny", vocab_size=50, num_layers=1, dropout=0.0)
    model = ElectraSpanExtractor(ElectraBackbone(config), answerable=True)
    # [CLS] q q [SEP] c c c [SEP] pad pad
    segments = np.array([[0, 0, 0, 0, 1, 1, 1, 1, 0, 0]], "int32")
    padding = np.array([[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]], "int32")
    ids = np.array([[2, 7, 8, 3, 9, 10, 11, 3, 0, 0]], "int32")
    out = model({"token_ids": ids, "segment_ids": segments, "padding_mask": padding})
    for name in ("start_logits", "end_logits"):
        logits = np.asarray(out[name])[0]
        assert np.all(logits[[1, 2, 3, 8, 9]] < -9000), (name, logits)
        assert np.all(np.abs(logits[[0, 4, 5, 6, 7]]) < 100), (name, logits)
    assert np.asarray(out["answerable"]).shape == (1,)


def test_labels_a_model_cannot_learn_or_keep_are_refused(tmp_path):
    # A tagging file of O tags only trained, then reported F1 0 beside token accuracy 100;
    # a label with a line break wrote two lines of labels.txt.
    from types import SimpleNamespace

    from keras_electra.finetuning.tasks import get_task

    conll = write(tmp_path / "o.conll", "the O\nking O\n\nlong O\n")
    with pytest.raises(InputDataError) as caught:
        get_task("tag").set_labels(read_conll(conll), SimpleNamespace(labels=None))
    assert str(caught.value) == (
        f"{conll}: every training word has the tag 'O'; tagging needs at least two tags "
        "(entities as well as O)."
    )
    rows = write(tmp_path / "rows.jsonl", '{"text": "a", "label": "pos\\nitive"}\n'
                 '{"text": "b", "label": "neg"}\n')  # fmt: skip
    with pytest.raises(InputDataError) as caught:
        get_task("classify").set_labels(read_table(rows), SimpleNamespace(labels=None))
    assert str(caught.value) == (
        f"{rows}: the label 'pos\\nitive' holds a line break or another control character, "
        "which labels.txt (a label a line) and score's output cannot keep; fix the label."
    )
