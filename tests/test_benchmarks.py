"""Smoke runs of the benchmark scripts: their real code paths on small data."""

import collections
import importlib.util
import json
import pathlib
import shutil

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_electra_vs_mlm_smoke_selects_a_recipe_then_fine_tunes_and_probes_every_arm(
    tmp_path, capsys
):
    import matplotlib.image

    from keras_electra.config import ElectraConfig
    from keras_electra.pretraining.flops import equal_compute_steps

    bench = load_benchmark("electra_vs_mlm")
    results = tmp_path / "results.jsonl"
    work = tmp_path / "work"
    argv = ["--smoke", "--work", str(work), "--results", str(results), "--markdown"]
    assert bench.main(argv) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    recipes, anchors = rows[0], [r for r in rows if r["kind"] == "anchor"]
    cells = [r for r in rows if r["kind"] == "cell"]
    # The recipe: chosen once per label budget on the validation split, the candidate with
    # the best accuracy averaged over the three arms.
    assert recipes["kind"] == "recipes" and recipes["corpus"] == "in-domain:tweet_sentiment"
    for n, candidates in recipes["scores"].items():
        assert len(candidates) == 2 and all(
            set(c["valid"]) == {"electra", "mlm", "none"} for c in candidates
        )
        best = max(candidates, key=lambda c: c["mean"])
        assert recipes["chosen"][n] == {
            "learning_rate": best["learning_rate"],
            "steps": best["steps"],
        }
    # Every arm, fine-tuned and probed at the label budget (the selection's seed-0 runs
    # reused: one fine-tune per arm and candidate in all).
    assert [(c["corpus"], c["objective"]) for c in cells] == [
        ("in-domain:tweet_sentiment", arm) for arm in ("electra", "mlm", "none")
    ]
    assert len(list(work.glob("*/x1/*/finetune-*"))) == 3 * 2
    for cell in cells:
        task = cell["tasks"]["tweet_sentiment"]
        assert set(task["finetune"]) == {"16"} == set(task["probes"]["pooled"])
        for n in ("16",):
            assert 0.0 <= task["finetune"][n]["accuracy"] <= 1.0
            for kind in ("pooled", "bag"):
                assert 0.0 <= task["probes"][kind][n]["accuracy"] <= 1.0
    # Equal compute on each corpus; the in-domain arms read the in-domain vocabulary.
    in_domain = work / "in-domain-tweet_sentiment" / "x1"
    config = ElectraConfig.load(in_domain / "electra-seed0" / "run" / "config.json")
    mlm = next(c for c in cells if c["corpus"].startswith("in-domain") and c["objective"] == "mlm")
    assert mlm["pretrain"]["steps"] == equal_compute_steps(config, 32, 32, 20) > 20
    domain = work / "smoke-data" / "tasks" / "tweet_sentiment"
    vocab = (domain / "in_domain" / "vocab.txt").read_text()
    assert (in_domain / "mlm-seed0" / "run" / "vocab.txt").read_text() == vocab
    assert (in_domain / "none-seed0" / "random" / "vocab.txt").read_text() == vocab
    assert "context_auc" in cells[0]["pretrain"]["metrics"]
    assert all(" cores, " in c["cpu"] and c["cpu"].endswith("AMX") for c in cells)
    # No test text in the in-domain corpus; a class-balanced labelled set.
    corpus = (domain / "in_domain" / "train.txt").read_text()
    test = bench.read_table(domain / "test.csv")
    assert test and not any(" ".join(t.split()) in corpus for t, _ in test)
    sixteen = bench.read_table(work / "labelled" / "tweet_sentiment" / "train-16.csv")
    assert len(sixteen) == 16 and len({label for _, label in sixteen}) == 3
    # The count-based anchor at the model's embedding width.
    assert [a["corpus"] for a in anchors] == ["in-domain:tweet_sentiment"]
    assert all(a["dim"] == config.embedding_size for a in anchors)
    out = capsys.readouterr().out
    summary = json.loads(out[out.index('{"benchmark"') :].splitlines()[0])["summary"]
    budget = summary["accuracy"]["tweet_sentiment"]["in-domain"]["x1"]["16"]
    none = next(c for c in cells if c["objective"] == "none" and c["corpus"] != "prose")
    accuracy = none["tasks"]["tweet_sentiment"]["finetune"]["16"]["accuracy"]
    assert budget["finetune"]["none"] == {"mean": accuracy, "std": 0.0, "n": 1}
    assert "electra_minus_mlm" in budget["differences"]
    assert "| tweet_sentiment | in-domain | 1× | 16 |" in out
    assert "| in-domain:tweet_sentiment | 1× | electra | " in out  # the run-health table
    image = matplotlib.image.imread(results.with_suffix(".png"))
    assert image.shape[0] > 0 and np.ptp(image) > 0
    # A rerun finds everything done and appends nothing.
    assert bench.main(argv) == 0
    assert len(results.read_text().splitlines()) == len(rows)
    assert "cell " not in capsys.readouterr().out


def test_label_draws_are_class_balanced_nested_and_ppmi_vectors_see_cooccurrence(tmp_path):
    from keras_electra.data import ElectraTokenizer

    data, probes = load_benchmark("data"), load_benchmark("probes")
    bench = load_benchmark("electra_vs_mlm")
    args = bench.parse_args(["--labels", "128,32", "--compute", "3,1"])
    assert args.labels == [32, 128] and args.compute == [1, 3]
    assert bench.corpus_keys(args) == ["in-domain:bbc_topic", "in-domain:tweet_sentiment", "prose"]
    assert bench.corpus_tasks("prose", args) == ["bbc_topic", "tweet_sentiment"]
    assert bench.cell_seeds(10, args) == [0] and bench.cell_seeds(3, args) == [0, 1, 2]

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
    pool = [(f"text number {i} " + article, "a") for i in range(4000)]
    audit = data.previous_split_audit("tweet_sentiment", pool)
    assert audit["test"] == 2000 and audit["test_near_duplicating_pool"] == 2000


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


def test_the_figure_gains_a_compute_row_once_an_in_domain_cell_has_more_compute(tmp_path):
    import matplotlib.image

    bench = load_benchmark("electra_vs_mlm")

    def entry(mean):
        return {"mean": mean, "std": 0.01, "n": 3}

    def budgets(arms):
        return {n: {"finetune": {a: entry(0.5) for a in arms}} for n in ("32", "128")}

    computes = {"x1": budgets(("electra", "mlm", "none"))}
    summary = {"accuracy": {"bbc_topic": {"in-domain": computes}}, "pretraining": {}}
    bench.plot(summary, tmp_path / "one.png")
    computes["x3"] = budgets(("electra", "mlm"))
    bench.plot(summary, tmp_path / "three.png")
    one, three = (matplotlib.image.imread(tmp_path / f"{n}.png") for n in ("one", "three"))
    assert three.shape[0] == one.shape[0] * 3 // 2 and three.shape[1] == one.shape[1]
    assert np.ptp(three[one.shape[0] :]) > 0  # the new row is drawn, not blank


def test_no_pretraining_is_the_baseline_of_every_compute_and_one_seed_has_no_error_bar():
    bench = load_benchmark("electra_vs_mlm")

    def cell(objective, compute, seed, accuracy):
        budgets = {"32": {"accuracy": accuracy}}
        return {
            "kind": "cell",
            "corpus": "in-domain:bbc_topic",
            "compute": compute,
            "objective": objective,
            "seed": seed,
            "pretrain": {},
            "tasks": {
                "bbc_topic": {
                    "finetune": budgets,
                    "probes": {kind: budgets for kind in bench.PROBES},
                }
            },
        }

    rows = [cell("none", 1, s, a) for s, a in enumerate((0.40, 0.50, 0.60))]
    rows += [cell(o, 1, s, 0.45) for o in ("electra", "mlm") for s in range(3)]
    rows += [cell("electra", 3, 0, 0.70), cell("mlm", 3, 0, 0.65)]
    summary = bench.summarize(rows)
    scaled = summary["accuracy"]["bbc_topic"]["in-domain"]["x3"]["32"]
    assert scaled["finetune"]["none"] == {"mean": 0.5, "std": 0.1, "n": 3}
    assert scaled["differences"]["pretrained_minus_none"] == {
        "of": "electra",
        "mean": 0.2,
        "se": None,
    }
    one = summary["accuracy"]["bbc_topic"]["in-domain"]["x1"]["32"]["differences"]
    assert one["pretrained_minus_none"]["se"] == round(0.1 / 3**0.5, 4)
    table = bench.markdown_table(summary)
    row = next(line for line in table.splitlines() if "| 3× | 32 |" in line)
    assert "| 0.700 (n=1) | 0.650 (n=1) | 0.500 ± 0.100 |" in row
    assert "| +0.050 (one seed) | +0.200 (electra; one seed) |" in row
    assert "| corpus | compute | arm |" not in table  # no cell recorded pretraining metrics
    # The two questions along the compute axis, one row per task and budget.
    view = table.split("| task (in-domain) | labels |")[1].splitlines()
    assert view[0].count("×") == 4
    assert view[2] == (
        "| bbc_topic | 32 | -0.050 ± 0.058 (electra) | +0.200 (electra; one seed) "
        "| +0.000 ± 0.000 | +0.050 (one seed) |"
    )
    assert "task (in-domain)" not in bench.markdown_table(bench.summarize(rows[:-2]))


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
    record = bench.pretrain_record(tmp_path, 300, 2.0, 12.34, windows=1)
    assert record["resumed"] is True
    assert [point["step"] for point in record["curve"]] == [100, 200, 300]
    assert record["train_seconds"] == 33.0 and record["seconds"] == 12.3
    assert record["metrics"] == {"disc_auc": 0.73} and record["flops"] == 600.0
    assert bench.pretrain_record(tmp_path, 300, 2.0, 40.0, windows=3)["resumed"] is False


def test_a_run_of_some_tasks_extends_the_study_and_a_cell_run_again_supersedes_its_line():
    bench = load_benchmark("electra_vs_mlm")
    settings = {"preset": "tiny", "data": "f00d", "tasks": ["bbc_topic", "tweet_sentiment"]}
    # --tasks picks which cells run; a line written by such a run is of the same study.
    assert bench.same_study({**settings, "tasks": ["bbc_topic"]}, settings)
    assert not bench.same_study({**settings, "data": "beef"}, settings)
    assert not bench.same_study(None, settings)

    def cell(accuracies):
        return {
            "kind": "cell",
            "corpus": "prose",
            "compute": 1,
            "objective": "electra",
            "seed": 0,
            "pretrain": {},
            "tasks": {
                task: {
                    "finetune": {"32": {"accuracy": a}},
                    "probes": {kind: {"32": {"accuracy": a}} for kind in bench.PROBES},
                }
                for task, a in accuracies.items()
            },
        }

    # The prose cell first run for one task, then again for both: the later line counts once.
    summary = bench.summarize([cell({"bbc_topic": 0.4}), cell({"bbc_topic": 0.6, "x": 0.5})])
    entry = summary["accuracy"]["bbc_topic"]["prose"]["x1"]["32"]["finetune"]["electra"]
    assert entry == {"mean": 0.6, "std": 0.0, "n": 1}
    assert summary["accuracy"]["x"]["prose"]["x1"]["32"]["finetune"]["electra"]["n"] == 1


def test_the_health_figure_draws_each_compute_of_each_corpus_and_nothing_without_curves(tmp_path):
    import matplotlib.image

    bench = load_benchmark("electra_vs_mlm")

    def cell(corpus, compute, seed, rise):
        curve = [
            {"step": s, "disc_auc": 0.8, "context_auc": 0.5 + rise * s, "rarity_auc": 0.9}
            for s in range(100, 100 * (2 * compute + 1), 100)
        ]
        record = {"curve": curve, "step_flops": 1e10}
        return {"kind": "cell", "corpus": corpus, "compute": compute, "objective": "electra",
                "seed": seed, "pretrain": record}  # fmt: skip

    rows = [cell("in-domain:bbc_topic", c, s, 1e-4 * c) for c in (1, 3) for s in (0, 1)]
    rows += [cell("prose", 1, 0, 0.0), {"kind": "anchor"}]
    assert bench.plot_health(rows, tmp_path / "health.png")
    image = matplotlib.image.imread(tmp_path / "health.png")
    assert image.shape[1] > image.shape[0] and np.ptp(image) > 0  # two corpora, three rows
    mlm = [{**row, "objective": "mlm"} for row in rows if row.get("kind") == "cell"]
    assert not bench.plot_health(mlm, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()
