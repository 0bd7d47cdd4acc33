"""Smoke runs of the benchmark scripts: their real code paths on small data."""

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


def test_electra_vs_mlm_smoke_builds_the_table_at_equal_compute_and_resumes(tmp_path, capsys):
    import matplotlib.image

    from keras_electra.config import ElectraConfig
    from keras_electra.pretraining.flops import equal_compute_steps

    bench = load_benchmark("electra_vs_mlm")
    results = tmp_path / "results.jsonl"
    argv = ["--smoke", "--work", str(tmp_path / "work"), "--results", str(results)]
    assert bench.main(argv) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["objective"] for r in rows] == ["electra", "mlm", "none"]
    electra, mlm, none = rows
    # Equal compute: MLM's steps cost what ELECTRA's 20 steps cost, to within one step.
    config = ElectraConfig.load(tmp_path / "work" / "electra-seed0" / "run" / "config.json")
    assert mlm["steps"] == equal_compute_steps(config, 32, 32, 20) > 20
    budget = electra["points"][-1]["flops"]
    assert abs(mlm["points"][-1]["flops"] - budget) <= mlm["step_flops"] / 2
    # Fine-tuned at half the budget (a window end) and at the end; "none" at zero compute.
    assert [p["step"] for p in electra["points"]] == [10, 20]
    assert [p["step"] for p in none["points"]] == [0] and none["points"][0]["flops"] == 0
    for row in rows:
        for point in row["points"]:
            assert list(point["tasks"]) == ["tweet_sentiment"]  # one task in a smoke run
            assert 0.0 <= point["tasks"]["tweet_sentiment"]["accuracy"] <= 1.0
            assert point["tasks"]["tweet_sentiment"]["num_examples"] == 64
    assert 0.0 <= electra["pretrain"]["disc_auc"] <= 1.0 and "mlm_accuracy" in mlm["pretrain"]
    assert [c["step"] for c in electra["curve"]] == [10, 20]
    out = capsys.readouterr().out
    table = json.loads(out[out.index('{"benchmark"') :].splitlines()[0])["table"]
    assert set(table) == {"electra", "mlm", "none"}
    accuracy = none["points"][0]["tasks"]["tweet_sentiment"]["accuracy"]
    assert table["none"]["tweet_sentiment"] == {"mean": accuracy, "std": 0.0, "n": 1}
    image = matplotlib.image.imread(results.with_suffix(".png"))
    assert image.shape[1] > 4 * image.shape[0] / 2 and np.ptp(image) > 0
    # A rerun finds every cell done and appends nothing; --markdown prints the results table.
    assert bench.main([*argv, "--markdown"]) == 0
    assert len(results.read_text().splitlines()) == 3
    out = capsys.readouterr().out
    assert "cell " not in out
    assert f"| none | 1 | 0.0 | {accuracy:.3f} ± 0.000 |" in out
    assert out.count("| electra | 1 |") == 2  # half and full budget


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
