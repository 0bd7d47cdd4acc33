"""Smoke runs of the benchmark scripts: their real code paths on small data."""

import collections
import importlib.util
import json
import pathlib
import re
import shutil
import statistics

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_label_draws_are_class_balanced_nested_and_ppmi_vectors_see_cooccurrence(tmp_path):
    from keras_electra.data import ElectraTokenizer

    data, probes = load_benchmark("data"), load_benchmark("probes")
    bench = load_benchmark("electra_vs_mlm")
    args = bench.parse_args(["--labels", "128,32", "--compute", "3,1", "--tasks", "t"])
    assert args.labels == [32, 128] and args.compute == [1, 3] and args.seeds == [0, 1, 2]
    # No pretraining first (it has no compute), then each compute's seeds in order: the
    # first seed of an arm chooses its recipes before the others run. Electric (at 1x
    # only, by default) after its compute and seed's other arms.
    cells = bench.planned_cells(args)
    assert cells[:3] == [("t", 0, "none", s) for s in (0, 1, 2)]
    assert cells[3:9] == [("t", 1, o, s) for s in (0, 1) for o in ("electra", "mlm", "electric")]
    assert len(cells) == 3 + 3 * 3 + 2 * 3
    # The other cells keep the order they had before Electric (a resumed study's queue).
    before = bench.parse_args(
        ["--compute", "3,1", "--tasks", "t", "--objectives", "electra", "mlm", "none"]
    )
    assert bench.planned_cells(before) == [c for c in cells if c[2] != "electric"]
    # With two tasks, both tasks' ELECTRA and MLM of a seed run before its Electric cells.
    both = bench.parse_args(["--compute", "1", "--tasks", "a", "b", "--seeds", "0"])
    assert [(t, o) for t, _, o, _ in bench.planned_cells(both)] == [
        ("a", "none"), ("b", "none"), ("a", "electra"), ("a", "mlm"), ("b", "electra"),
        ("b", "mlm"), ("a", "electric"), ("b", "electric"),
    ]  # fmt: skip
    # --electric-compute picks its computes among --compute's.
    at3 = bench.parse_args(["--compute", "3,1", "--tasks", "t", "--electric-compute", "3"])
    electric = [c for c in bench.planned_cells(at3) if c[2] == "electric"]
    assert electric == [("t", 3, "electric", s) for s in (0, 1, 2)]
    # Each pretraining seed has its own label draws, shared by its arms.
    assert [bench.draw_number(s, d, 3) for s in (0, 1) for d in range(3)] == [0, 1, 2, 3, 4, 5]

    rows = [(f"a{i}", "a") for i in range(50)] + [(f"b{i}", "b") for i in range(5)]
    subset = data.balanced_order(rows, 0)[:20]
    assert sum(label == "b" for _, label in subset) == 5  # b runs out, a takes its turns
    assert [label for _, label in subset[:4]] == ["a", "b", "a", "b"]
    # A pool no larger than the largest budget, in an unbalanced file order (bbc_topic's
    # 1,000 before: its first 32 rows held 10 of one class and 4 of another): every budget
    # of every draw is balanced, nested in its draw, and the draws differ.
    pool = [(f"s{i}", "sport") for i in range(400)] + [(f"t{i}", "tech") for i in range(200)]
    pool += [(f"e{i}", "ent") for i in range(400)]
    draws = [data.label_draw(pool, d) for d in range(3)]
    for order in draws:
        assert sorted(order) == sorted(pool)  # the whole pool: the largest budget is all of it
        for n in (32, 128):
            counts = collections.Counter(label for _, label in order[:n])
            assert max(counts.values()) - min(counts.values()) <= 1, (n, counts)
        assert collections.Counter(label for _, label in order[:600]) == {
            "sport": 200,
            "tech": 200,
            "ent": 200,
        }
    assert draws[0][:32] != draws[1][:32] != draws[2][:32]
    assert data.label_draw(pool, 1) == draws[1]  # the same for every arm
    # Words that share contexts get close vectors; words that never meet do not.
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat", "dog", "purrs", "barks"]
    vocab += ["stock", "bond", "rises", "falls", "the"]
    lines = ["the cat purrs", "the dog barks", "the cat barks", "the dog purrs"] * 20
    lines += ["stock rises", "bond falls", "stock falls", "bond rises"] * 20
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n")
    vectors = probes.ppmi_svd_vectors([tmp_path / "c.txt"], ElectraTokenizer(vocab), 4)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
    cat, dog, stock = (vocab.index(w) for w in ("cat", "dog", "stock"))
    assert unit[cat] @ unit[dog] > 0.9 > abs(unit[cat] @ unit[stock]) + 0.5


def test_near_duplicates_are_dropped_before_the_split_and_kept_out_of_the_in_domain_text():
    data = load_benchmark("data")
    article = " ".join(f"word{i}" for i in range(60))
    edited = article.replace("word30", "changed")  # 10 of 51 shingles differ
    rows = [
        (article, "tech"),
        ("Totally different text about football and goals scored in the match today.", "sport"),
        (edited, "tech"),
        ("RT @fan: what a GAME!!! http://t.co/abc", "pos"),
        ("what a game", "neg"),  # a normalized duplicate with another label: dropped too
        ("what a game it was", "pos"),  # short and not equal: kept
    ]
    kept, dropped = data.drop_near_duplicates(rows)
    assert dropped == [(2, 0), (4, 3)]
    assert [t for t, _ in kept] == [rows[i][0] for i in (0, 1, 3, 5)]
    # Half of the smaller text's shingles shared is not enough; more than half is.
    half = " ".join(f"word{i}" for i in range(30)) + " " + " ".join(f"x{i}" for i in range(30))
    assert data.count_near_duplicated([half], [article]) == 0
    most = " ".join(f"word{i}" for i in range(40)) + " " + " ".join(f"x{i}" for i in range(20))
    assert data.count_near_duplicated([most], [article]) == 1
    # The previous build's audit: its test texts that near-duplicated its pool are counted.
    # (Every row shares 11 of its 14 shingles with every other: a short text and a small
    # pool keep the all-pairs matches few.)
    shared = " ".join(article.split()[:20])
    pool = [(f"text number {i} " + shared, "a") for i in range(2400)]
    audit = data.previous_split_audit("tweet_sentiment", pool)
    assert audit["test"] == 2000 and audit["test_near_duplicating_pool"] == 2000
    unique = [
        (f"text number {i} " + " ".join(f"w{i}x{j}" for j in range(20)), "a") for i in range(2400)
    ]
    assert data.previous_split_audit("tweet_sentiment", unique)["test_near_duplicating_pool"] == 0


def test_memory_timeline_replays_the_allocator_to_its_peak(capsys):
    """The real trace of a tiny step: the peak is found, the tensors alive at it are
    named by the ops that made them, and none of them is counted twice."""
    bench = load_benchmark("memory_timeline")
    bench.main(["--preset", "tiny", "--batch", "16", "--length", "128", "--large", "1"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (peak,) = [r for r in rows if r["kind"] == "peak"]
    live = [r for r in rows if r["kind"] == "live"]
    large = [r for r in rows if r["kind"] == "large"]
    timeline = [r for r in rows if r["kind"] == "timeline"]
    assert peak["mb_in_use"] > 0 and 0 <= peak["seconds_into_step"]
    # What was allocated in the step and alive at the peak fits in the peak.
    assert 0 < sum(r["mb"] for r in live) <= peak["mb_in_use"]
    # Named by the model's ops. Which ones depends on where the executor's order puts
    # the peak: the MLM loss's tensors in one run, the encoders' in another.
    model_ops = ("cross_entropy", "generator", "discriminator")
    assert any(r["group"].startswith(model_ops) for r in live), live
    assert large and all(r["to_s"] is None or r["to_s"] >= r["from_s"] for r in large)
    assert max(r["mb_in_use"] for r in timeline) <= peak["mb_in_use"]


def test_kernel_times_times_every_fused_kernel_against_the_bandwidth(capsys):
    """One process per thread count; each fused kernel gets a row with its time and the
    bandwidth it reached, beside NumPy's in the same process, for XLA's kernels and
    (with a compiler) the compiled ones, whose outputs agree with XLA's."""
    bench = load_benchmark("kernel_times")
    bench.main(["--threads", "1", "--calls", "1", "--repeats", "1"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert not [r for r in rows if r["kind"] == "failed"], rows
    (numpy_row,) = [r for r in rows if r["kind"] == "numpy_add"]
    assert numpy_row["gbytes_per_s"] > 0
    kernels = {(r["name"], r["engine"]): r for r in rows if r["kind"] == "kernel"}
    fused = {"add_layer_norm_forward", "add_layer_norm_backward", "bias_gelu_forward"}
    fused |= {"bias_gelu_backward", "attention_probs_forward"}
    engines = ["xla", "compiled"] if shutil.which("g++") else ["xla"]
    expected = {(name, engine) for name in fused for engine in engines}
    assert set(kernels) == expected | {("tensorflow_float32_add", "tensorflow")}
    for r in kernels.values():
        assert r["threads"] == 1 and r["ms_per_call"] > 0
        rate = r["mbytes"] / 1024 / (r["ms_per_call"] / 1e3)
        assert abs(r["gbytes_per_s"] - rate) < 0.1 * r["gbytes_per_s"] + 0.1
    agreement = {r["name"]: r["max_relative_difference"] for r in rows if r["kind"] == "agreement"}
    assert set(agreement) == (fused if "compiled" in engines else set())
    # bf16 outputs: a rounding step is 2**-8 of a value; a few steps at most.
    assert all(0 <= gap <= 2**-5 for gap in agreement.values()), agreement


def test_the_data_fingerprint_follows_the_sources_contents_not_where_or_when_installed(tmp_path):
    """The benchmark's results are keyed by it: a reinstall on another machine (new mtimes,
    another checkout path) must keep the results, and any changed byte must not."""
    import os

    data = load_benchmark("data")

    def sources(root: pathlib.Path, text: str) -> list[pathlib.Path]:
        paths = []
        for name, body in (("kjv/nt.bzz", text), ("news/data/a.txt", "news")):
            path = root / "site-packages" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
            paths.append(path)
        return paths

    first = sources(tmp_path / "one", "In the beginning")
    again = sources(tmp_path / "two" / "elsewhere", "In the beginning")
    os.utime(again[0], (1, 1))
    assert data._fingerprint(first, "8000") == data._fingerprint(again[::-1], "8000")
    assert data._fingerprint(first, "8000") != data._fingerprint(first, "7000")
    changed = sources(tmp_path / "three", "In the beginnin.")
    assert data._fingerprint(first, "8000") != data._fingerprint(changed, "8000")


def test_a_resumed_pretraining_keeps_its_whole_curve_and_time_in_the_result(tmp_path):
    bench = load_benchmark("electra_vs_mlm")
    windows = [
        {"step": 100 * i, "disc_auc": 0.7 + i / 100, "window_seconds": 10.0, "health_seconds": 1.0}
        for i in (1, 2, 3)
    ]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(w) + "\n" for w in windows), encoding="utf-8"
    )
    # This process logged only the last window: the run was resumed at step 200.
    record = bench.pretrain_record(tmp_path, 300, 2.0, 12.34, windows=1, cpu_seconds=20.04)
    assert record["resumed"] is True and record["cpu_seconds"] == 20.0
    assert [point["step"] for point in record["curve"]] == [100, 200, 300]
    assert record["train_seconds"] == 33.0 and record["seconds"] == 12.3
    assert record["metrics"] == {"disc_auc": 0.73} and record["flops"] == 600.0
    assert bench.pretrain_record(tmp_path, 300, 2.0, 40.0, windows=3)["resumed"] is False


# The whole study's code path on small data: `make test` runs two of its arms (no
# pretraining and ELECTRA); `make test-all` all four, MLM's and Electric's pretraining too
# (each arm's cell costs about 40 s here). Either way the plan gives every arm's steps.
SMOKE_ARMS = [
    pytest.param(("none", "electra"), id="two-arms"),
    pytest.param(("none", "electra", "mlm", "electric"), id="every-arm", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("arms", SMOKE_ARMS)
def test_electra_vs_mlm_smoke_chooses_recipes_on_the_first_seed_and_pairs_arms_by_draw(
    tmp_path, capsys, arms
):
    import matplotlib.image

    from keras_electra.config import ElectraConfig
    from keras_electra.pretraining.objectives import equal_compute_steps, get

    bench, table = load_benchmark("electra_vs_mlm"), load_benchmark("electra_vs_mlm_table")
    results, work = tmp_path / "results.jsonl", tmp_path / "work"
    argv = ["--smoke", "--work", str(work), "--results", str(results)]
    assert bench.main([*argv, "--objectives", *arms]) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["data", "anchor", *["cell"] * len(arms)]
    cells = {r["objective"]: r for r in rows if r["kind"] == "cell"}
    # Electric (at 1x) after the other arms of its compute and seed.
    expected = [("none", 0), ("electra", 1), ("mlm", 1), ("electric", 1)]
    assert [(o, c["compute"], c["seed"], c["draws"]) for o, c in cells.items()] == [
        (o, compute, 0, [0, 1]) for o, compute in expected if o in arms
    ]
    for objective, cell in cells.items():
        # The recipe per budget: every candidate's validation accuracy on the first draw,
        # the best chosen; then each draw (x fine-tuning seed) with the chosen recipe.
        (selection,) = cell["selection"].values()
        scores = [c["valid_accuracy"] for c in selection["candidates"]]
        best = selection["candidates"][scores.index(max(scores))]
        assert selection["chosen"] == {
            k: best[k] for k in ("learning_rate", "steps", "probe_steps")
        }
        assert cell["recipes"] == {"16": selection["chosen"]}
        runs = cell["finetune"]["16"]
        assert [(r["draw"], r["finetune_seed"]) for r in runs] == [(0, 0), (1, 0)]
        assert runs[0]["valid_accuracy"] == max(scores)  # the selection's run is reused
        arm = work / "tweet_sentiment" / f"x{cell['compute']}" / f"{objective}-seed0"
        assert len(list((arm / "finetune").iterdir())) == 2 + 1
        for kind in ("pooled", "bag"):
            assert [r["draw"] for r in cell["probes"][kind]["16"]] == [0, 1]
            assert all(0.0 <= r["accuracy"] <= 1.0 for r in cell["probes"][kind]["16"])
    # LP-FT is a candidate: its runs trained the head first.
    assert any(c["probe_steps"] for c in bench.SMOKE_RECIPES)
    # The arms read the in-domain vocabulary.
    config = ElectraConfig.load(
        work / "tweet_sentiment" / "x1" / "electra-seed0" / "run" / "config.json"
    )
    electra_flops = cells["electra"]["pretrain"]["flops"]
    assert electra_flops == 20 * get("electra").step_flops(config, 32, 32)
    assert "context_auc" in cells["electra"]["pretrain"]["metrics"]
    assert all(" cores, " in c["cpu"] and c["cpu"].endswith("AMX") for c in cells.values())
    domain = work / "smoke-data" / "tasks" / "tweet_sentiment"
    vocab = (domain / "in_domain" / "vocab.txt").read_text()
    assert (
        work / "tweet_sentiment" / "x0" / "none-seed0" / "random" / "vocab.txt"
    ).read_text() == vocab
    # No test text in the in-domain corpus; class-balanced draws that differ.
    corpus = (domain / "in_domain" / "train.txt").read_text()
    test = bench.read_table(domain / "test.csv")
    assert test and not any(" ".join(t.split()) in corpus for t, _ in test)
    draws = [
        bench.read_table(work / "labelled" / "tweet_sentiment" / f"draw{d}-16.csv") for d in (0, 1)
    ]
    for drawn in draws:
        counts = collections.Counter(label for _, label in drawn)
        assert len(drawn) == 16 and max(counts.values()) - min(counts.values()) <= 1
    assert draws[0] != draws[1]
    # The anchors on the same draws, at the model's embedding width.
    (anchor,) = [r for r in rows if r["kind"] == "anchor"]
    assert anchor["dim"] == config.embedding_size
    assert (
        [r["draw"] for r in anchor["ppmi"]["16"]]
        == [r["draw"] for r in anchor["tfidf"]["16"]]
        == [0, 1]
    )

    # Another seed of no pretraining: the recipe chosen on seed 0, its own draws.
    assert bench.main([*argv, "--seeds", "0", "1", "--objectives", "none"]) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    done = 2 + len(arms)
    assert [r["kind"] for r in rows[done:]] == ["anchor", "cell"]
    assert [r["draw"] for r in rows[done]["tfidf"]["16"]] == [2, 3]
    later = rows[done + 1]
    assert (later["objective"], later["seed"], later["draws"]) == ("none", 1, [2, 3])
    assert "selection" not in later and later["recipes"] == cells["none"]["recipes"]
    # A rerun finds everything done and appends nothing; --plan says so.
    capsys.readouterr()
    assert bench.main([*argv, "--seeds", "0", "1", "--objectives", "none"]) == 0
    assert len(results.read_text().splitlines()) == len(rows)
    assert "cell " not in capsys.readouterr().out
    assert bench.main([*argv, "--seeds", "0", "1", "--plan"]) == 0
    left = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (left["cells_done"], left["cells_left"]) == (len(arms) + 1, 8 - len(arms) - 1)
    # Seed 1's ELECTRA, MLM and Electric: two draws x one fine-tuning seed, no selection.
    assert left["finetune_runs_left"] == 3 * 2 + (4 - len(arms)) * 3
    planned = [("none", 0), ("none", 1), *[(o, 0) for o in ("electra", "mlm", "electric")]]
    planned += [(o, 1) for o in ("electra", "mlm", "electric")]
    assert [(c["objective"], c["seed"], c["done"]) for c in left["cells"]] == [
        (o, seed, o in arms and seed == 0 or o == "none") for o, seed in planned
    ]
    # Equal compute: MLM's steps cost what ELECTRA's 20 do; Electric's two cloze towers
    # and its head at every position make a step dearer: fewer steps, within half a step.
    steps = {c["objective"]: c["pretrain_steps"] for c in left["cells"] if c["seed"] == 0}
    assert steps["mlm"] == equal_compute_steps(config, 32, 32, 20) > 20
    assert steps["electric"] == equal_compute_steps(config, 32, 32, 20, "electric") < 20
    electric_step = get("electric").step_flops(config, 32, 32)
    assert abs(steps["electric"] * electric_step - electra_flops) <= electric_step / 2
    for objective in set(arms) - {"none"}:  # what ran is what was planned
        assert cells[objective]["pretrain"]["steps"] == steps[objective]
    if "electric" in arms:
        electric = cells["electric"]["pretrain"]
        assert electric["step_flops"] == electric_step
        assert electric["flops"] == steps["electric"] * electric_step
        assert {"disc_auc", "cloze_accuracy"} <= set(electric["metrics"])
        electric_config = ElectraConfig.load(
            work / "tweet_sentiment" / "x1" / "electric-seed0" / "run" / "config.json"
        )
        assert get("electric").step_flops(electric_config, 32, 32) == electric_step

    # The table: pairs by seed, one seed has no interval.
    figure = tmp_path / "f.png"
    args = ["--results", str(results), "--markdown", "--figures", "--figure", str(figure)]
    assert table.main([*args, "--health-figure", str(tmp_path / "h.png")]) == 0
    out = capsys.readouterr().out
    assert "| tweet_sentiment | 1× | 16 | 0." in out and "(2 seed)" not in out
    rows_1x = [line for line in out.splitlines() if line.startswith("| tweet_sentiment | 1× |")]
    if "mlm" in arms:
        assert "**ELECTRA − MLM**: no comparison has two pretraining seeds yet." in out
        assert "**Electric − ELECTRA**: no comparison has two pretraining seeds yet." in out
        # The accuracy table's row at 1x: ELECTRA, MLM and Electric of one seed each; the
        # Electric differences of one seed, untested.
        assert rows_1x[0].count("(1 seed)") == 3 and "not yet" not in rows_1x[0]
        assert "| Electric − MLM | tweet_sentiment | 16 | 1× | " in out
    else:  # MLM's and Electric's columns wait for their cells
        assert rows_1x[0].count("(1 seed)") == 1 and rows_1x[0].count("not yet") == 2
    none = table.summarize(table.read_study(results))["arms"]["tweet_sentiment|0|16|none"]
    # Two seeds give an interval (a zero-width one when a few smoke steps leave both seeds
    # predicting the majority class: the same accuracy).
    assert none["n"] == 2 and none["low"] <= none["mean"] <= none["high"]
    for path in (figure, tmp_path / "h.png"):
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 0 and np.ptp(image) > 0


def _cell(task, compute, objective, seed, test, valid, spread=0.0):
    """A result line whose fine-tunes average to ``test`` / ``valid`` (two draws x two
    fine-tuning seeds, ``spread`` apart between draws)."""
    runs = [
        {"draw": 2 * seed + i, "finetune_seed": f, "accuracy": test + (i - 0.5) * spread,
         "valid_accuracy": valid, "seconds": 30.0, "cpu_seconds": 10.0}
        for i in (0, 1) for f in (0, 1)
    ]  # fmt: skip
    probes = {k: {"32": [{"draw": d, "accuracy": test} for d in (0, 1)]} for k in ("pooled", "bag")}
    pretrain = {"steps": 100, "seconds": 90.0, "cpu_seconds": 50.0, "metrics": {"disc_auc": 0.8}}
    pretrain = pretrain if compute else {}
    return {"kind": "cell", "task": task, "compute": compute, "objective": objective,
            "seed": seed, "pretrain": pretrain, "finetune": {"32": runs}, "probes": probes,
            "cpu": "cpu A", "settings": {"s": 1}}  # fmt: skip


def test_the_study_table_pairs_seeds_corrects_for_comparisons_and_picks_the_best_arm_on_validation(
    tmp_path,
):
    table = load_benchmark("electra_vs_mlm_table")
    rows = [{"kind": "data", "tasks": {}, "settings": {"s": 1}}]
    rows += [_cell("t", 0, "none", s, a, 0.5) for s, a in enumerate((0.50, 0.52, 0.54))]
    # 1x: ELECTRA - MLM = 0.10, 0.12, 0.08 by seed; MLM better on validation, worse on test.
    rows += [_cell("t", 1, "electra", s, a, 0.6, 0.02) for s, a in enumerate((0.70, 0.72, 0.74))]
    rows += [_cell("t", 1, "mlm", s, a, 0.7) for s, a in enumerate((0.60, 0.60, 0.66))]
    # 3x: a difference whose seeds disagree in sign.
    rows += [_cell("t", 3, "electra", s, a, 0.6) for s, a in enumerate((0.70, 0.60, 0.66))]
    rows += [_cell("t", 3, "mlm", s, a, 0.5) for s, a in enumerate((0.65, 0.65, 0.65))]
    # Electric at 1x: Electric - ELECTRA = 0.06, 0.08, 0.04; Electric - MLM = 0.16, 0.20, 0.12;
    # the best on validation.
    rows += [_cell("t", 1, "electric", s, a, 0.9) for s, a in enumerate((0.76, 0.80, 0.78))]
    # A line of another study, and a cell superseded by its rerun.
    rows += [{**_cell("t", 1, "mlm", 0, 0.1, 0.1), "settings": {"s": 0}}]
    rows.insert(1, _cell("t", 1, "electra", 0, 0.0, 0.0))
    # The study's plan: a cell done (0.6 h at 0.5 s/step and 10 s/run) and one left (1 h).
    plan = [
        {"task": "t", "compute": 1, "objective": "electra", "seed": 0, "pretrain_steps": 3600,
         "finetune_runs": 36},
        {"task": "t", "compute": 5, "objective": "mlm", "seed": 9, "pretrain_steps": 7200,
         "finetune_runs": 0},
    ]  # fmt: skip
    rows.append({"kind": "plan", "cells": plan, "settings": {"s": 1}})
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = table.summarize(table.read_study(path))
    assert summary["cells"] == 18 and summary["computes"] == [1, 3]
    assert summary["unit_tflops"] is None  # these lines count no FLOPs
    # 1x is the ELECTRA cells' FLOPs per compute multiple, whatever the multiple.
    counted = [{**r, "pretrain": {**r["pretrain"], "flops": 15.3e12 * r["compute"]}} for r in rows
               if r.get("objective") == "electra"]  # fmt: skip
    assert table.unit_tflops(counted) == pytest.approx(15.3)
    one = summary["differences"]["electra_minus_mlm"]["t|1|32"]
    # Student t with 2 degrees of freedom: t = 0.10 / (0.02 / sqrt 3) = sqrt 75, and the
    # two-sided p-value of t at 2 d.f. is 1 - t / sqrt(t^2 + 2).
    assert abs(one["mean"] - 0.10) < 1e-9 and one["n"] == 3
    assert abs((one["high"] - one["low"]) / 2 - 4.302652729911275 * 0.02 / 3**0.5) < 1e-9
    assert abs(one["p"] - (1 - 75**0.5 / 77**0.5)) < 1e-9
    three = summary["differences"]["electra_minus_mlm"]["t|3|32"]
    # Holm over the question's two comparisons: the smaller p doubled, then monotone.
    assert abs(one["p_holm"] - 2 * one["p"]) < 1e-9 and one["holds"]
    assert three["p_holm"] == max(three["p"], one["p_holm"]) and not three["holds"]
    # Best pretrained - none: the arm with the better validation accuracy (MLM at 1x, whose
    # test accuracy is lower), paired with no pretraining's seed of the same draws; the
    # better of ELECTRA and MLM only (Electric is not an arm of this question).
    best = summary["differences"]["best_minus_none"]["t|1|32"]
    assert best["of"] == "mlm" and abs(best["mean"] - (0.62 - 0.52)) < 1e-9
    assert summary["differences"]["best_minus_none"]["t|3|32"]["of"] == "electra"
    # Electric's two differences are one family: Holm over both (each alone has p < 0.05,
    # t = 3 sqrt 3 and 4 sqrt 3; the smaller doubled, the larger then raised to it).
    ee = summary["differences"]["electric_minus_electra"]["t|1|32"]
    em = summary["differences"]["electric_minus_mlm"]["t|1|32"]
    assert abs(ee["mean"] - 0.06) < 1e-9 and abs(em["mean"] - 0.16) < 1e-9
    assert (
        abs(ee["p"] - (1 - 27**0.5 / 29**0.5)) < 1e-9
        and abs(em["p"] - (1 - 48**0.5 / 50**0.5)) < 1e-9
    )
    assert ee["family"] == em["family"] == 2 and ee["holds"] and em["holds"]
    assert abs(em["p_holm"] - 2 * em["p"]) < 1e-9 and ee["p_holm"] == em["p_holm"] > ee["p"]
    # Where the spread comes from: ELECTRA 1x has draws 0.02 apart within each seed.
    parts = summary["components"]["t|1|32|electra"]
    assert abs(parts["draws"] - 0.02 / 2**0.5) < 1e-9 and parts["finetune_seeds"] == 0.0
    assert abs(parts["seeds"] - 0.02) < 1e-9
    cost = summary["cost"]["cpu A"]
    assert {k: cost[k] for k in ("electra_step_seconds", "mlm_step_seconds")} == {
        "electra_step_seconds": 0.5,
        "mlm_step_seconds": 0.5,
    }
    assert cost["finetune_run_seconds"] == 10.0
    assert abs(cost["study_hours"] - 1.6) < 1e-9 and abs(cost["hours_left"] - 1.0) < 1e-9
    made = table.blocks(summary)
    assert "| cpu A | 0.500 | 0.500 | 0.500 | 10.0 | 2 | 1 |" in made["cost"]
    # Rates not measured yet (no pretrained cell has finished) say so.
    early = table.cost_table({"cost": {"cpu B": {"finetune_run_seconds": 136.9}}})
    assert "| cpu B | not yet | not yet | not yet | 136.9 | not yet | not yet |" in early
    assert (
        "**ELECTRA − MLM**: 1 of 2 differences holds after Holm's correction: t at 32 "
        in made["answers"]
    )
    assert (
        "| ELECTRA − MLM | t | 32 | 1× | +0.100 [+0.050, +0.150] | 3 | 0.026 | yes |"
        in made["questions"]
    )
    assert (
        "**Electric − ELECTRA**: 1 of 1 difference holds after Holm's correction over 2 "
        "comparisons: t at 32 labels, 1×: +0.060 [" in made["answers"]
    )
    assert "| Electric − MLM | t | 32 | 1× | +0.160 [" in made["questions"]
    readme = " ".join(made["readme"].split())
    assert "Electric" not in readme and "of the study's 48 are in" in readme
    # One comparison in the family: no plural.
    alone = {"p": 0.3, "holds": False, "family": 1, "low": -0.1, "high": 0.2}
    said = table.answers(
        {"differences": {"electra_minus_mlm": {"t|1|32": alone}}}, ["electra_minus_mlm"]
    )
    assert said == [
        "**ELECTRA − MLM**: no difference holds after correcting for 1 comparison; every 95% "
        "interval with two or more seeds contains zero."
    ]
    # Electric's means beside the others' at 1x; nothing at 3x, where it does not run.
    accuracy = made["accuracy"].splitlines()
    assert accuracy[0].split(" | ")[3:7] == ["none", "ELECTRA", "MLM", "Electric"]
    assert accuracy[2].split(" | ")[6].startswith("0.780 [") and accuracy[3].split(" | ")[6] == ""
    # No Electric cell yet: "not yet" where it runs, and its questions say so.
    without = table.summarize(
        [r for r in table.read_study(path) if r.get("objective") != "electric"]
    )
    made = table.blocks(without)
    assert made["accuracy"].splitlines()[2].split(" | ")[6] == "not yet"
    assert (
        "| t | 3× | 32 | " in made["accuracy"] and "not yet" not in made["accuracy"].splitlines()[3]
    )
    assert "**Electric − MLM**: no comparison has two pretraining seeds yet." in made["answers"]
    assert "Electric −" not in made["questions"]


def test_every_number_the_docs_quote_is_what_its_results_file_gives(tmp_path, monkeypatch):
    """``doc_numbers.py --check`` passes on the committed pages; on a copy of them an edited
    number, an edited table row, a study block and an unknown name each fail, naming the
    page and the place, and ``fill`` puts the results' text back. A results file the index
    does not describe fails too."""
    numbers = load_benchmark("doc_numbers")
    assert numbers.main(["--check"]) == 0
    assert numbers._minutes(1739.89) == "29 min 0 s"  # was "28 min 60 s"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    benchmarks = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    # The headline figures are marked where they are quoted, README and docs alike.
    for name in ("speed.over_torch", "speed.bf16_over_float32", "serving.batch1"):
        for text in (readme, benchmarks):
            assert f"<!-- n:{name} -->{numbers.render('n', name)}<!-- /n -->" in text, name
    assert "<!-- study:readme -->" in readme and "<!-- numbers:speed-table -->" in benchmarks
    assert numbers.render("n", "speed.over_torch") == "2.02–2.19×"

    copy = tmp_path / "repo"
    shutil.copytree(REPO / "docs", copy / "docs", ignore=shutil.ignore_patterns("hooks"))
    shutil.copy(REPO / "README.md", copy / "README.md")
    assert numbers.drift(copy) == []
    edited = readme.replace(
        "<!-- n:speed.over_torch -->2.02–2.19×<!-- /n -->",
        "<!-- n:speed.over_torch -->2.05–2.19×<!-- /n -->",
    )
    edited = edited.replace(
        "<!-- n:serving.batch1 -->348<!-- /n -->", "<!-- n:serving.batchone -->348<!-- /n -->"
    )
    assert edited.count("2.05–2.19×") == 1 and "serving.batchone" in edited
    (copy / "README.md").write_text(edited, encoding="utf-8")
    row = "| 1 | **keras-electra, mixed_bfloat16** | 6,070 / 6,281 |"
    assert row in benchmarks
    (copy / "docs" / "benchmarks.md").write_text(
        benchmarks.replace(row, row.replace("6,281", "6,381")), encoding="utf-8"
    )
    study = copy / "docs" / "research" / "electra-vs-mlm-labels.md"
    text = study.read_text(encoding="utf-8")
    study.write_text(
        text.replace("<!-- /study:answers -->", "one more line\n<!-- /study:answers -->")
    )
    problems = numbers.drift(copy)
    assert problems == [
        "README.md: speed.over_torch says '2.05–2.19×', its results file gives '2.02–2.19×'.",
        "README.md: No results file gives 'serving.batchone': add it to SOURCES in doc_numbers.py.",
        "docs/benchmarks.md: block numbers:speed-table differs from what its results file gives.",
        "docs/research/electra-vs-mlm-labels.md: block study:answers differs from what its "
        "results file gives.",
    ], problems
    # A figure no page quotes any more is one to drop from the script.
    bare = tmp_path / "bare"
    (bare / "docs").mkdir(parents=True)
    (bare / "README.md").write_text("No numbers.\n", encoding="utf-8")
    assert "speed.over_torch in SOURCES is quoted by no page." in numbers.drift(bare)
    # Writing puts the numbers back, and leaves the rest of the page as it was.
    refilled = numbers.fill(edited.replace("serving.batchone", "serving.batch1"))
    assert refilled == readme

    # The results directory holds exactly the files its index describes.
    results = tmp_path / "results"
    results.mkdir()
    index = {"a.json": dict.fromkeys(numbers.INDEX_FIELDS, "x"), "gone.json": {"date": "x"}}
    (results / "index.json").write_text(json.dumps(index), encoding="utf-8")
    (results / "a.json").write_text("{}", encoding="utf-8")
    (results / "stray.jsonl").write_text("{}", encoding="utf-8")
    monkeypatch.setattr(numbers, "RESULTS", results)
    monkeypatch.setattr(numbers, "INDEX", results / "index.json")
    problems = numbers.index_problems()
    assert "benchmarks/results/stray.jsonl is not described in index.json." in problems
    assert "index.json describes gone.json, which is not in benchmarks/results/." in problems
    assert "index.json's entry for gone.json has no machine, command, written_by." in problems
    assert "demo.json, a source of the docs' numbers, is not in index.json." in problems


def test_the_fresh_clone_benchmark_reads_what_make_demo_and_make_test_print():
    fresh = load_benchmark("fresh_clone")
    printed = "\n".join(
        [
            "Wrote saved_models/demo/1",
            "the(0.04) king(0.19) is(0.05) dead(0.20) .(0.02)",
            "my(0.03) lord(0.05) co(0.20) ##mp(0.28) ##ute(0.68) ##r(0.13)",
            "warnings: none (0.5)",
        ]
    )
    assert fresh.scored_lines(printed) == printed.splitlines()[1:3]
    closing = "=========== 790 passed, 14 skipped, 3 warnings in 1114.52s (0:18:34) ============"
    assert fresh.suite_counts(f"....\n{closing}\n") == {
        "passed": 790,
        "skipped": 14,
        "seconds": 1114.52,
    }
    # make test leaves out the slow tests: pytest counts them as deselected.
    closing = "790 passed, 14 skipped, 12 deselected, 3 warnings in 1114.52s (0:18:34)"
    assert fresh.suite_counts(closing)["deselected"] == 12
    failed = fresh.suite_counts("2 failed, 700 passed, 1 error in 12.00s")
    assert (failed["failed"], failed["passed"], failed["errors"], failed["skipped"]) == (
        2,
        700,
        1,
        0,
    )
    with pytest.raises(ValueError, match="no closing line"):
        fresh.suite_counts("Interrupted: 1 error during collection")
    assert re.fullmatch(r"\d+-core .+ \((family \d+ model \d+, )?(no )?AMX\)", fresh.machine())


def test_throughput_baseline_ratios_are_paired_by_round():
    bench = load_benchmark("pretrain_throughput")

    def row(precision, source, round_number, seconds, xla=False):
        return dict(
            engine="keras", xla=xla, jit_compile=False, grad_accumulation=1,
            steps_per_execution=1, torch_compile=False, step_gflops=1.0, tokens_per_sec=1.0,
            precision=precision, source=source, round=round_number, seconds_per_step=seconds,
            step_seconds_min_median_max=[seconds] * 3,
        )  # fmt: skip

    results = [
        row("float32", "current", 0, 2.0),
        row("float32", "abc", 0, 2.2),
        row("float32", "abc", 1, 3.0),
        row("float32", "current", 1, 3.0),
        row("mixed_bfloat16", "abc", 1, 9.0),  # no pair: another precision
        row("float32", "abc", 2, 1.0),
        row("float32", "current", 2, 1.0, xla=True),  # no pair: not the default step
    ]
    assert bench.paired_ratios(results, "abc", "float32") == pytest.approx([1.1, 1.0])
    summary = bench.summarize({"float32": 1e9, "bfloat16": 1e9}, results, [])
    assert summary["current_over_abc_float32_paired"] == {"median": 1.05, "per_round": [1.1, 1.0]}


def test_step_ab_alternates_which_side_goes_first_and_bounds_the_median():
    bench = load_benchmark("step_ab")
    assert bench.order(4) == [
        ("current", "baseline"),
        ("baseline", "current"),
        ("current", "baseline"),
        ("baseline", "current"),
    ]
    ratios = [0.97, 0.99, 1.0, 1.01, 1.02, 1.03, 0.98, 1.0, 1.0, 1.01]
    low, high = bench.median_interval(ratios)
    assert min(ratios) <= low <= statistics.median(ratios) <= high <= max(ratios)
    assert bench.median_interval([1.0] * 5) == [1.0, 1.0]


def test_vocab_learning_times_each_size_beside_tensorflow_texts_learner(tmp_path, capsys):
    bench = load_benchmark("vocab_learning")
    assert len(bench.synthetic_counts(500)) == 500
    output = tmp_path / "vocab.json"
    argv = ["--words", "300", "3000", "--vocab-size", "120", "--output", str(output)]
    assert bench.main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["distinct_words"] for r in rows] == [300, 3000]
    # Both learners, the same vocabulary: every character, alone and continuing a word,
    # and the pieces that count at least the 120th word's count.
    assert all(r["identical"] and r["tokens"] > 2 * 26 for r in rows), rows
    assert all(r["seconds"] > 0 and r["reference_seconds"] > 0 for r in rows)
    assert json.loads(output.read_text())["runs"] == rows


def test_the_study_figure_marks_a_comparison_with_no_cells_yet_instead_of_an_empty_legend(
    tmp_path,
):
    import warnings

    import matplotlib.image

    table = load_benchmark("electra_vs_mlm_table")
    rows = [{"kind": "data", "tasks": {}, "settings": {"s": 1}}]
    rows += [_cell("t", 0, "none", s, 0.5, 0.5) for s in (0, 1)]
    rows += [_cell("t", 1, "electra", s, a, 0.6) for s, a in enumerate((0.6, 0.7))]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = table.summarize(table.read_study(path))
    assert not summary["differences"].get("electra_minus_mlm")  # no MLM cell yet
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned of a legend with nothing in it
        assert table.plot(summary, tmp_path / "f.png") is True
    assert np.ptp(matplotlib.image.imread(tmp_path / "f.png")) > 0


ZEN4 = "model name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 17\nflags\t\t: fpu avx512_bf16\n"
ZEN5 = "model name\t: AMD EPYC\ncpu family\t: 26\nmodel\t\t: 2\nflags\t\t: fpu avx512_bf16\n"
SAPPHIRE = (
    "model name\t: Intel(R) Xeon(R) Platinum 8481C\ncpu family\t: 6\nmodel\t\t: 143\n"
    "flags\t\t: amx_bf16\n"
)


def test_results_tell_apart_cpu_generations_that_share_a_model_name(monkeypatch):
    """A cloud VM's 'AMD EPYC' names generations whose training speeds differ several
    times over; the study's cost table groups its cells by this description."""
    info = load_benchmark("machine_info")
    monkeypatch.setattr(info.os, "cpu_count", lambda: 2)
    described = {}
    for name, text in {"zen4": ZEN4, "zen5": ZEN5, "sapphire": SAPPHIRE}.items():
        monkeypatch.setattr(info, "_cpuinfo", lambda text=text: text)
        described[name] = (info.cpu_description(), info.machine())
    assert described["zen4"] != described["zen5"]
    assert described["zen5"] == (
        "AMD EPYC (family 26 model 2), 2 cores, no AMX",
        "2-core AMD EPYC (family 26 model 2, no AMX)",
    )
    assert described["sapphire"][1].endswith("(family 6 model 143, AMX)")
    # Without /proc/cpuinfo: the platform's name, still one description.
    monkeypatch.setattr(info, "_cpuinfo", lambda: "")
    assert info.machine().endswith("(no AMX)") and "family" not in info.machine()


def test_the_health_table_says_over_how_many_seeds_a_later_metric_is_a_mean():
    """probe_auc came in after the first seeds: its mean says how many seeds it is over."""
    table = load_benchmark("electra_vs_mlm_table")

    def cell(seed, metrics):
        pretrain = {"metrics": metrics}
        return {
            "kind": "cell",
            "task": "t",
            "compute": 1,
            "objective": "electric",
            "seed": seed,
            "pretrain": pretrain,
        }

    rows = [
        cell(0, {"disc_auc": 0.4, "rarity_auc": 0.8}),
        cell(1, {"disc_auc": 0.5, "rarity_auc": 0.9}),
        cell(2, {"disc_auc": 0.6, "rarity_auc": 1.0, "probe_auc": 0.55}),
    ]
    means, seeds = table.health(rows)
    assert means["t|1|electric|disc_auc"] == pytest.approx(0.5)
    assert seeds == {
        "t|1|electric|disc_auc": 3,
        "t|1|electric|rarity_auc": 3,
        "t|1|electric|probe_auc": 1,
    }
    line = table.health_table({"health": means, "health_seeds": seeds}).splitlines()[-1]
    assert line.startswith("| t | 1× | electric | 0.500 | 0.550 (1 seed) | ")
    assert "0.900 |" in line and "0.900 (" not in line
