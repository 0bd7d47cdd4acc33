"""Re-ranking n-best lists: the file format and its errors, the ordering rule, the word
error rate and the weight's tuning, on a scorer written out here (the Electric export's
own runs are in tests/test_electric_run.py)."""

from __future__ import annotations

import json

import pytest

from keras_electra.cli import main
from keras_electra.errors import ConfigError, InputDataError
from keras_electra.rerank import (
    NBest,
    first_pass_best,
    parse_nbest,
    read_nbest,
    rerank,
    tune_weight,
    word_error_rate,
)
from keras_electra.serving.export_reader import SentenceScore

# Sentence scores by text; the pieces are the words (for --per-token).
TABLE = {"a b c": -3.0, "a b x": -6.0, "a x": -2.5, "a b c d": -3.2}


def scorer(texts: list[str]) -> list[SentenceScore]:
    return [SentenceScore([(w, 0.0) for w in t.split()], TABLE[t]) for t in texts]


def write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" if isinstance(r, dict) else r for r in rows))
    return str(path)


def test_the_lists_are_read_with_or_without_first_pass_scores(tmp_path):
    path = write(
        tmp_path / "n.jsonl",
        [
            {"id": "u1", "hypotheses": [{"text": "a b x", "score": -1}, {"text": "a b c", "score": -2}]},  # noqa: E501
            "\n",
            {"hypotheses": ["a b x", "a b c"], "reference": "a b c"},
        ],
    )  # fmt: skip
    first, second = read_nbest(path)
    assert first == NBest("u1", ["a b x", "a b c"], [-1.0, -2.0], None)
    assert second == NBest("3", ["a b x", "a b c"], None, "a b c")  # its line number as id
    assert first_pass_best(first) == "a b x" and first_pass_best(second) == "a b x"
    later = NBest("u", ["a b x", "a b c"], [-2.0, -1.0])
    assert first_pass_best(later) == "a b c"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json\n", r"^Line 1 of '.*' is not valid JSON \(.*\); each line must be one n-best"),
        ('{"texts": ["a"]}\n', r'^Line 1 of .* has no "hypotheses" list; write'),
        ('{"hypotheses": []}\n', r"^Line 1 of .* has an empty hypotheses list; give at least"),
        ('{"hypotheses": ["a", " "]}\n', r"^Line 1 of .*, hypothesis 2: the text must be a non"),
        ('{"hypotheses": ["a", "\\u200b"]}\n', r"^Line 1 of .*, hypothesis 2: the text must be a"),
        # Accents alone: the tokenizer strips them, and the empty text scored 0 and won.
        ('{"hypotheses": ["a", "\\u0301\\u0301"]}\n', r"^Line 1 of .*, hypothesis 2: the text"),
        (
            '{"hypotheses": [{"text": "a", "score": 1}, "b"]}\n',
            r"^Line 1 of .*: 1 of its 2 hypotheses have a score; give every hypothesis",
        ),
        ('{"hypotheses": [{"text": "a", "score": "high"}]}\n', r"a finite number, not 'high'\.$"),
        ('{"hypotheses": [{"text": "a", "score": NaN}]}\n', r"a finite number, not nan\.$"),
        ('{"hypotheses": ["a"], "reference": 3}\n', r"the reference must be a string\.$"),
        # A first-pass score under another name was left out: ranked by Electric alone.
        (
            '{"hypotheses": [{"text": "a", "logprob": -1}, {"text": "b", "logprob": -2}]}\n',
            r'^Line 1 of .*: its hypotheses have no "score" but a number under "logprob"; '
            r'name the first-pass score "score", or leave',
        ),
        ("\n\n", r"^N-best file '.*' has no lists \(one JSON object per line\)\.$"),
    ],
)  # fmt: skip
def test_a_bad_line_is_one_sentence_naming_it(tmp_path, line, message):
    path = tmp_path / "n.jsonl"
    path.write_text(line)
    with pytest.raises(InputDataError, match=message):
        read_nbest(path)


def test_a_byte_order_mark_is_not_part_of_the_first_list(tmp_path):
    # Refused as "Unexpected UTF-8 BOM", where score --input reads the same file.
    path = tmp_path / "n.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "q", "hypotheses": ["a", "b"]}\n')
    assert [(n.id, n.texts) for n in read_nbest(path)] == [("q", ["a", "b"])]
    # Extra numbers beside a "score" are the file's own (an acoustic score, a rank).
    both = '{"hypotheses": [{"text": "a", "score": -1, "rank": 1}]}\n'
    path.write_text(both)
    assert read_nbest(path)[0].scores == [-1.0]


def test_line_separators_inside_a_json_string_do_not_end_the_line(tmp_path):
    # json.dumps(..., ensure_ascii=False) writes U+2028, U+2029 and U+0085 raw; the file
    # was split at them too, and its line was "not valid JSON".
    rows = [{"hypotheses": [f"a{c}b", "c"], "reference": "c"} for c in "\u2028\u2029\u0085"]
    path = tmp_path / "n.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    lists = read_nbest(path)
    assert [nbest.texts[0] for nbest in lists] == ["a\u2028b", "a\u2029b", "a\u0085b"]
    assert [nbest.id for nbest in lists] == ["1", "2", "3"]  # the lines' own numbers


def test_a_missing_or_binary_file_is_one_sentence(tmp_path):
    with pytest.raises(InputDataError, match=r"^N-best file '.*nope' does not exist\.$"):
        read_nbest(tmp_path / "nope")
    (tmp_path / "bin").write_bytes(b"\xff\xfe{")
    with pytest.raises(InputDataError, match=r"is not UTF-8 text\.$"):
        read_nbest(tmp_path / "bin")


def test_the_order_is_first_pass_plus_weight_times_the_sentence_score():
    lists = [NBest("u", ["a b x", "a b c"], [0.0, -2.0], "a b c")]
    # weight 0: the first pass's order; weight 1: -6 < -5, the sentence score wins.
    assert rerank(lists, scorer, weight=0.0)[0].best == "a b x"
    (ranked,) = rerank(lists, scorer, weight=1.0)
    assert ranked.best == "a b c"
    assert ranked.hypotheses == [
        {"text": "a b c", "score": -2.0, "sentence_score": -3.0, "total": -5.0, "was": 2},
        {"text": "a b x", "score": 0.0, "sentence_score": -6.0, "total": -6.0, "was": 1},
    ]
    assert ranked.record()["reference"] == "a b c" and ranked.record()["best"] == "a b c"
    # Without first-pass scores: the sentence score alone; a tie keeps the given order.
    assert rerank([NBest("v", ["a b x", "a b c"])], scorer)[0].best == "a b c"
    tie = rerank([NBest("t", ["a b c", "a b c"])], scorer)[0]
    assert [h["was"] for h in tie.hypotheses] == [1, 2]


def test_was_is_the_place_in_the_first_passs_order_not_in_the_file():
    # A list given worst first: "was" counted the file's lines, so a choice the re-ranking
    # changed showed no "(was #k)", and the first pass's own best showed "(was #2)".
    given = NBest("u", ["a b x", "a b c"], [-2.0, -1.0], "a b c")  # the second is the best
    (kept,) = rerank([given], scorer, weight=0.0)
    assert kept.best == "a b c" and kept.hypotheses[0]["was"] == 1
    table = {"a b x": -1.0, "a b c": -9.0}
    (moved,) = rerank([given], lambda ts: [SentenceScore([], table[t]) for t in ts], weight=1.0)
    assert moved.best == "a b x" and moved.hypotheses[0]["was"] == 2


def test_rerank_from_python_refuses_what_the_command_refuses():
    lists = [NBest("u", ["a b x", "a b c"], [0.0, -2.0], "a b c")]
    for weight in (float("nan"), "2", None, True):
        with pytest.raises(ConfigError, match=r"^weight must be a finite number, not "):
            rerank(lists, scorer, weight=weight)
    with pytest.raises(ConfigError, match=r"^each of weights must be a finite number, not nan"):
        tune_weight(lists, scorer, weights=[float("nan"), 1.0])
    with pytest.raises(InputDataError, match=r"^List 'x' has 1 scores for 2 hypotheses"):
        NBest("x", ["a b c", "a b x"], [1.0])
    with pytest.raises(InputDataError, match=r"^List 'x': texts must be a non-empty list"):
        NBest("x", "abc")


def test_per_token_scores_stop_favouring_short_hypotheses():
    lists = [NBest("u", ["a b c d", "a x"])]
    assert rerank(lists, scorer)[0].best == "a x"  # -2.5 > -3.2
    assert rerank(lists, scorer, per_token=True)[0].best == "a b c d"  # -0.8 > -1.25


def test_word_error_rate_counts_substitutions_insertions_and_deletions():
    assert word_error_rate(["a b c"], ["a b c"]) == 0.0
    assert word_error_rate(["a x c"], ["a b c"]) == pytest.approx(1 / 3)
    assert word_error_rate(["a b c d", "a"], ["A b c", "a b"]) == pytest.approx(2 / 5)
    with pytest.raises(InputDataError, match="references have no words"):
        word_error_rate(["a"], [""])


def test_tuning_scores_each_text_once_and_finds_the_weight_that_helps():
    calls = []

    def counted(texts):
        calls.append(len(texts))
        return scorer(texts)

    lists = [NBest("u", ["a b x", "a b c"], [0.0, -2.0], "a b c")]
    rows = tune_weight(lists, counted, weights=[0.0, 0.5, 1.0])
    assert calls == [2]
    assert rows[0] == {"weight": 1.0, "wer": 0.0}  # 0.5: -3 against -3.5, still wrong
    assert {r["weight"]: r["wer"] for r in rows} == {
        0.0: pytest.approx(1 / 3),
        0.5: pytest.approx(1 / 3),
        1.0: 0.0,
    }
    with pytest.raises(InputDataError, match=r"^List 'w' has no reference; tuning the weight"):
        tune_weight([NBest("w", ["a b c"])], scorer)
    # Every reference empty (silence): refused before anything is scored.
    calls.clear()
    with pytest.raises(InputDataError, match=r"^The references have no words \(every one is"):
        tune_weight([NBest("s", ["a b c"], [0.0], ""), NBest("t", ["a x"], [0.0], " ")], counted)
    assert calls == []


def test_the_command_refuses_bad_flags_before_reading_or_scoring(tmp_path, capsys):
    lists = write(tmp_path / "n.jsonl", [{"hypotheses": ["a b c"]}])
    assert main(["rerank", lists, "--model", str(tmp_path), "--weight", "nan"]) == 2
    assert (
        capsys.readouterr().err
        == "keras-electra rerank: error: --weight must be a finite number, not nan.\n"
    )
    assert main(["rerank", lists, "--model", str(tmp_path), "--timeout", "3"]) == 2
    assert "--timeout is for a server (--server), not for --model" in capsys.readouterr().err
    assert main(["rerank", str(tmp_path / "none.jsonl"), "--model", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith("does not exist.\n")
    assert main(["rerank", lists, "--model", str(tmp_path), "--tune", "--weight", "2"]) == 2
    assert capsys.readouterr().err == (
        "keras-electra rerank: error: --weight 2 and --tune: --tune chooses the weight; pass "
        "one of them.\n"
    )


def test_an_export_without_sentence_scores_is_refused_in_one_sentence(tiny_run, tmp_path, capsys):
    from keras_electra.export import export

    exported = export(tiny_run, tmp_path / "electra")
    lists = write(tmp_path / "n.jsonl", [{"hypotheses": ["a b c"]}])
    assert main(["rerank", lists, "--model", str(exported)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keras-electra rerank: error: The export at '{exported}' is a ")
    assert err.endswith(
        "replaced-token export, not a sentence-score one; re-ranking needs an Electric export "
        "(pretrain with --objective electric, then export that run).\n"
    ), err
    with pytest.raises(ConfigError, match="not both or neither"):
        from keras_electra.rerank import ElectricScorer

        ElectricScorer()


def test_the_default_grid_is_centred_where_both_scores_spread_alike():
    from keras_electra.rerank import STEPS_PER_DECADE, weight_grid

    lists = [NBest("u", ["a", "b", "c"], [0.0, -10.0, -4.0]), NBest("v", ["a", "b"], [0.0, -30.0])]
    grid = weight_grid(lists, [0.0, -0.01, -0.005, 0.0, -0.01])  # spreads: 10 and 30; 0.01
    assert grid[0] == 0.0 and len(grid) == 1 + 4 * STEPS_PER_DECADE + 1
    assert grid[1 + 2 * STEPS_PER_DECADE] == 3000.0 and grid[1] == 30.0 and grid[-1] == 300000.0
    with pytest.raises(InputDataError, match=r"^No list has first-pass scores; without them"):
        tune_weight([NBest("w", ["a b c"], None, "a b c")], scorer)


def test_the_serving_pages_example_list_is_read_as_documented():
    from doc_snippets import REPO

    page = (REPO / "serving" / "README.md").read_text(encoding="utf-8")
    section = page[page.index("## 4. Re-ranking n-best lists") :]
    example = section[
        section.index("```json\n") + 8 : section.index("\n```", section.index("```json"))
    ]
    (nbest,) = [parse_nbest(line, "the example", 1) for line in example.splitlines()]
    assert nbest.texts == ["the chef cooked the moon", "the chef cooked the meal"]
    assert nbest.scores == [-4.2, -4.5] and nbest.reference == "the chef cooked the meal"


def test_the_lists_can_come_on_standard_input(monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO('{"hypotheses": ["a b c"]}\n'))
    assert read_nbest("-") == [NBest("1", ["a b c"])]
    monkeypatch.setattr("sys.stdin", io.StringIO("not json\n"))
    with pytest.raises(InputDataError, match=r"^Line 1 of standard input is not valid JSON"):
        read_nbest("-")
