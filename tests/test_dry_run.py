"""``--dry-run`` for pretrain, finetune and prepare: the checks a run makes before it
trains, the plan, and nothing written; and the counts the plan is made of (parameters
from the config, the memory estimate)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from keras_electra.cli import main
from keras_electra.config import ElectraConfig
from keras_electra.data.prepare import prepare
from keras_electra.errors import ConfigError
from keras_electra.pretraining import objectives
from keras_electra.pretraining.memory import STATE_BYTES
from keras_electra.pretraining.run import pretrain

README = Path(__file__).resolve().parents[1] / "README.md"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def one_sentence(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# === The counts ===


@pytest.mark.parametrize(
    "objective, sharing, normalize_first, embedding_size",
    [
        ("electra", "all", False, 32),
        ("electra", "all", True, 64),  # embedding = hidden: no projection
        ("electra", "gdes", False, 32),
        ("electra", "word", True, 32),
        ("electra", "none", False, 64),
        ("mlm", "all", False, 32),
    ],
)
def test_parameters_counted_from_the_config_are_the_built_models(
    objective, sharing, normalize_first, embedding_size
):
    from keras_electra.pretraining.pretrainer import ElectraPretrainer

    config = ElectraConfig.from_preset(
        "tiny",
        vocab_size=300,
        hidden_size=64,
        num_heads=2,
        intermediate_size=96,
        num_layers=2,
        max_position_embeddings=40,
        embedding_size=embedding_size,
        embedding_sharing=sharing,
        normalize_first=normalize_first,
        generator_hidden_size=0.5,
    )
    own = {"corrective_weight": 0.0 if normalize_first else 1.0} if objective == "electra" else {}
    chosen = objectives.get(objective, **own)
    model = ElectraPretrainer(config, objective=chosen)
    trained = sum(int(v.numpy().size) for v in model.trainable_weights)
    assert sum(chosen.parameters(config).values()) == trained
    assert config.backbone_parameters() == model.discriminator_backbone().count_params()


def test_the_readmes_parameter_counts_are_the_configs():
    """The presets table's two parameter columns, recomputed from the config."""
    rows = [line for line in README.read_text(encoding="utf-8").splitlines() if "| `" in line]
    found = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        preset = cells[0].strip("`")
        if preset not in ("small", "small++", "base", "large"):
            continue
        config = ElectraConfig.from_preset(preset)
        trained = sum(objectives.get("electra").parameters(config).values())
        assert cells[7] == f"{config.backbone_parameters() / 1e6:.1f} M", preset
        assert cells[8] == f"{trained / 1e6:.1f} M", preset
        found += 1
    assert found == 4


def test_the_memory_estimate_adds_up():
    config = ElectraConfig.from_preset("small")
    kwargs = dict(sequences=32, length=128)
    electra = objectives.get("electra")
    full = electra.step_memory(config, precision="float32", **kwargs)
    mixed = electra.step_memory(config, precision="mixed_bfloat16", **kwargs)
    trained = sum(objectives.get("electra").parameters(config).values())
    assert full["state"] == mixed["state"] == STATE_BYTES * trained  # float32 variables
    assert mixed["activations"] == pytest.approx(full["activations"] / 2)
    half = electra.step_memory(config, precision="float32", sequences=16, length=128)
    assert half["activations"] == pytest.approx(full["activations"] / 2)
    mlm = objectives.get("mlm").step_memory(config, precision="float32", **kwargs)
    assert mlm["activations"] < full["activations"]  # one tower


# === pretrain --dry-run ===


@pytest.fixture(scope="module")
def records(tmp_path_factory, small_corpus):
    """A few hundred lines prepared at 128 and at 512 tokens (with prepare(), as the
    command), one vocabulary."""
    root = tmp_path_factory.mktemp("records")
    corpus = root / "corpus.txt"
    lines = small_corpus.read_text(encoding="utf-8").splitlines()[:400]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = prepare([corpus], root / "tfrecords-128", max_seq_length=128, vocab_size=600,
                    num_shards=2)  # fmt: skip
    prepare([corpus], root / "tfrecords-512", max_seq_length=512, num_shards=2,
            vocab=str(first.vocab_file))  # fmt: skip
    return root


def no_model_built(monkeypatch):
    """A dry run builds no model and learns no vocabulary: either fails the test."""
    import keras_electra.pretraining.run as run_module

    def refuse(*args, **kwargs):
        raise AssertionError("a dry run built a model or learned a vocabulary")

    monkeypatch.setattr(run_module, "ElectraPretrainer", refuse)
    monkeypatch.setattr(run_module, "learn_vocab", refuse)


def test_base_on_128_token_records_is_one_sentence_naming_the_fix(records, tmp_path, capsys):
    data = records / "tfrecords-128"
    argv = ["pretrain", "--preset", "base", "--corpus", data, "--vocab", data / "vocab.txt"]
    argv += ["--output", tmp_path / "runs" / "base", "--dry-run"]
    status, out, err = run_cli(capsys, *argv)
    assert status == 2 and out == ""
    sentence = one_sentence(err)
    assert "holds examples of length 128, not max_seq_length=512" in sentence
    assert "pass --max-seq-length 128" in sentence
    assert "prepare --max-seq-length 512" in sentence
    assert not (tmp_path / "runs").exists()


def test_base_passes_with_matching_records_or_length(records, tmp_path, capsys, monkeypatch):
    no_model_built(monkeypatch)
    output = tmp_path / "runs" / "base"
    for length, extra in ((512, []), (128, ["--max-seq-length", "128"])):
        data = records / f"tfrecords-{length}"
        argv = ["pretrain", "--preset", "base", "--corpus", data, "--vocab", data / "vocab.txt"]
        argv += ["--output", output, "--precision", "mixed_float16", "--dry-run", *extra]
        status, out, err = run_cli(capsys, *argv)
        assert status == 0, err
        assert out.startswith("Dry run: every input checked; nothing was trained or written.")
        plan = dict(re.findall(r"^  (\S+(?: step)?)\s{2,}(.+)$", out, re.M))
        assert plan["model"].startswith("base: 12 layers x 768")
        assert plan["objective"] == (  # the paper's hyperparameters, the preset's for base
            "electra: mlm_weight 1, disc_weight 50, corrective_weight 0, temperature 1, "
            "disallow_correct false"
        )
        assert "in the discriminator" in plan["parameters"]
        assert plan["per step"].startswith(f"{256 * length:,} tokens, ")
        assert "FLOPs" in plan["per step"]
        assert f"{length}-token examples" in plan["data"]
        assert plan["checkpoint"].startswith(f"{output / 'checkpoints'} every 500 steps")
        assert "GB" in plan["memory"]
    assert not output.parent.exists()  # nothing written


def test_records_the_dry_run_passed_and_the_run_would_not(records, tmp_path, capsys, monkeypatch):
    """Folders of 128- and 512-token records passed a dry run (only the first file was
    read), and the run ended in an InvalidArgumentError traceback; a missing or cut shard
    trained on the rest without a word; the plan counted the first folder's examples for
    any set of files."""
    no_model_built(monkeypatch)
    base = ["pretrain", "--vocab", records / "tfrecords-128" / "vocab.txt", "--dry-run"]
    base += ["--output", tmp_path / "runs", "--max-seq-length", "128"]
    mixed = ["--corpus", records / "tfrecords-128", records / "tfrecords-512"]
    status, out, err = run_cli(capsys, *base, *mixed)
    assert status == 2 and out == ""
    assert "tfrecords-512" in one_sentence(err)
    assert "holds examples of length 512, not max_seq_length=128" in err

    def planned(*corpus) -> str:
        status, out, err = run_cli(capsys, *base, "--corpus", *corpus)
        assert status == 0, err
        return re.search(r"^  data +(.+)$", out, re.M)[1]

    folder = tmp_path / "copy"
    shutil.copytree(records / "tfrecords-128", folder)
    counted = json.loads((folder / "metadata.json").read_text())["shard_examples"]
    shards = sorted(folder.glob("pretraining-*.tfrecord"))
    assert f", {sum(counted):,} of them (" in planned(folder)
    assert f", {counted[1]:,} of them (" in planned(shards[1])
    # A shard cut at a record boundary (its records read to the end), then a missing one.
    data = shards[1].read_bytes()
    first = 16 + int.from_bytes(data[:8], "little")  # length, its CRC, the record, its CRC
    shards[1].write_bytes(data[:first])
    status, out, err = run_cli(capsys, *base, "--corpus", folder)
    assert status == 2 and out == ""
    assert f"TFRecord file '{shards[1]}' holds {first:,} bytes " in one_sentence(err)
    assert f"but its prepare wrote {len(data):,}: it was cut short or changed since" in err
    shards[1].unlink()
    status, out, err = run_cli(capsys, *base, "--corpus", folder)
    assert status == 2 and out == ""
    assert (
        f"The TFRecords in '{folder}' lack {shards[1].name} of the 2 shards their "
        "metadata.json lists; run the same `keras-electra prepare` command again"
    ) in one_sentence(err)


def test_a_batch_beyond_this_machines_memory_is_named_in_the_plan(small_corpus, tmp_path, capsys):
    """A batch no CPU here could hold was planned as "~498,432.0 GB per device" and
    nothing else: every input checked, nothing said about the machine it would run on."""
    import os

    here = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    argv = ["pretrain", "--corpus", small_corpus, "--output", tmp_path / "r", "--dry-run"]
    status, out, err = run_cli(capsys, *argv, "--batch-size", "100000000")
    assert status == 0, err
    memory = re.search(r"^  memory +(.+)$", out, re.M)[1]
    assert memory.startswith("~498 TB per device, estimated (")
    assert memory.endswith(
        f"; more than the {here / 1e9:,.1f} GB this machine has, so the run would run out of "
        "memory: lower --batch-size or raise --grad-accumulation"
    )
    # A length at which no batch fits: lowering --batch-size was the advice.
    status, out, err = run_cli(capsys, *argv, "--max-seq-length", "100000")
    assert status == 0, err
    memory = re.search(r"^  memory +(.+)$", out, re.M)[1]
    assert re.search(
        r"so the run would run out of memory: lower --max-seq-length \(one sequence of "
        r"100,000 tokens needs ~[\d,.]+ (GB|TB)\)$",
        memory,
    ), memory
    status, out, err = run_cli(capsys, *argv)  # the tiny preset's batch fits
    assert status == 0 and "this machine has" not in out, err


def test_a_warm_up_longer_than_the_run_is_named_in_the_plan(small_corpus, tmp_path, capsys):
    """The tiny preset's 100 warm-up steps in a run of --steps 20: the learning rate never
    reached its peak, and nothing said so."""
    argv = ["pretrain", "--corpus", small_corpus, "--output", tmp_path / "r", "--dry-run"]
    status, out, err = run_cli(capsys, *argv, "--steps", "20")
    assert status == 0, err
    plan = dict(re.findall(r"^  (\S+(?: step)?)\s{2,}(.+)$", out, re.M))
    assert plan["warm-up"] == (
        "Warm-up (--warmup-steps 100) is longer than the run (--steps 20): the learning rate "
        "peaks mid-run at 2.5e-05, 5% of --learning-rate 0.0005, and falls to 0; pass a "
        "smaller --warmup-steps, such as 2 (a tenth of --steps), to change it."
    )
    assert plan["steps"].startswith("20 (warm-up 100), learning rate 0.0005,")  # unchanged
    # Under 10 steps a tenth of --steps is 0: the note said "such as 0 (a tenth of
    # --steps)"; it now says that 0 turns warm-up off.
    status, out, err = run_cli(capsys, *argv, "--steps", "5")
    assert status == 0, err
    plan = dict(re.findall(r"^  (\S+(?: step)?)\s{2,}(.+)$", out, re.M))
    assert plan["warm-up"].endswith(
        "1% of --learning-rate 0.0005, and falls to 0; pass --warmup-steps 0 to turn warm-up "
        "off (the learning rate starts at its peak)."
    )
    assert "a tenth of --steps" not in out
    for fixed in (["--steps", "20", "--warmup-steps", "2"], ["--steps", "100"]):
        status, out, err = run_cli(capsys, *argv, *fixed)
        assert status == 0 and "Dry run:" in out and "longer than the run" not in out, err


def test_a_dry_run_checks_what_a_run_checks(records, tiny_run, tmp_path, capsys, monkeypatch):
    no_model_built(monkeypatch)
    data = records / "tfrecords-128"
    base = ["pretrain", "--corpus", data, "--vocab", data / "vocab.txt", "--dry-run"]
    cases = [
        # another vocabulary than the records'
        (["--vocab", tiny_run / "vocab.txt", "--output", tmp_path / "r"], "-token vocabulary"),
        # --cased with the records' uncased vocabulary (their casing is checked as well)
        (["--cased", "--output", tmp_path / "r"], "holds no capital letter (an uncased vocab"),
        # a preset beside an --init model of other sizes (it planned "small: 1 layers x 128")
        (["--init", tiny_run, "--preset", "small", "--output", tmp_path / "r"],
         f"--preset small is a model of 12 layers x 256, but --init '{tiny_run}' is one of 1 "
         "layer x 128; leave --preset out"),
        # a resumed run's fixed settings
        (["--output", tiny_run, "--batch-size", "16"], "was started with batch_size=8"),
        # an output that cannot be a directory
        (["--output", data / "vocab.txt"], "is a file; pass a directory"),
        # a batch the micro-batches do not divide
        (["--batch-size", "6", "--grad-accumulation", "4", "--output", tmp_path / "r"],
         "--grad-accumulation 4 must be a positive divisor"),
    ]  # fmt: skip
    for extra, expected in cases:
        status, _, err = run_cli(capsys, *base, *extra)
        assert status == 2 and expected in one_sentence(err), (extra, err)
    status, _, err = run_cli(capsys, "pretrain", "--corpus", tmp_path / "none", "--output",
                             tmp_path / "r", "--dry-run")  # fmt: skip
    assert status == 2 and "does not exist" in one_sentence(err)
    # A strategy or precision that does not exist (the command's choices refuse them first).
    for name, value in (("strategy", "gpu"), ("precision", "fp8")):
        with pytest.raises(ConfigError, match=f"Unknown {name} '{value}'; choose one of"):
            pretrain([data], tmp_path / "r", vocab=str(data / "vocab.txt"), dry_run=True,
                     **{name: value})  # fmt: skip
    assert not (tmp_path / "r").exists()


def test_a_dry_run_of_a_resumed_run_says_where_it_resumes(tiny_run, small_corpus, capsys):
    settings = json.loads((tiny_run / "run.json").read_text())
    before = sorted(p.name for p in tiny_run.rglob("*"))
    argv = ["pretrain", "--corpus", small_corpus, "--output", tiny_run, "--steps", "10"]
    argv += ["--batch-size", settings["batch_size"], "--max-seq-length", "32", "--dry-run"]
    status, out, err = run_cli(capsys, *argv)
    assert status == 0, err
    assert f"{tiny_run}: resumes at step 4" in out
    assert re.search(rf"^  vocabulary +{re.escape(str(tiny_run / 'vocab.txt'))} \(", out, re.M)
    # What the run would say before its first step, the dry run says too (it said nothing):
    # --steps moves where the rate's decay ends.
    assert re.search(rf"^  changed +--steps {settings['steps']} -> 10; it goes on ", out, re.M)
    status, out, err = run_cli(capsys, *argv, "--warmup-steps", "3")
    assert status == 0, err
    assert re.search(
        rf"^  changed +--warmup-steps {settings['warmup_steps']} -> 3, --steps "
        rf"{settings['steps']} -> 10; it goes on with the new ",
        out,
        re.M,
    )
    assert sorted(p.name for p in tiny_run.rglob("*")) == before


def test_a_dry_run_warns_of_a_vocabulary_that_does_not_cover_the_corpus(tiny_run, tmp_path, capsys):
    greek = tmp_path / "greek.txt"
    greek.write_text("ζωή και θάνατος.\nΗ θάλασσα είναι βαθιά.\n\n" * 20, encoding="utf-8")
    argv = ["pretrain", "--corpus", greek, "--vocab", tiny_run / "vocab.txt", "--dry-run"]
    status, out, err = run_cli(capsys, *argv, "--output", tmp_path / "r")
    assert status == 0, err
    assert re.search(r"^  warning +\d+\.\d% of the corpus's word pieces are \[UNK\]", out, re.M)


def test_a_dry_run_reads_the_checkpoint_a_resume_would_restore(
    tiny_run, small_corpus, tmp_path, capsys
):
    # A data file cut short passed the dry run ("resumes at step 4"); the run then failed.
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    (data,) = (copy / "checkpoints").glob("ckpt-4.data-*")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    settings = json.loads((copy / "run.json").read_text())
    argv = ["pretrain", "--corpus", small_corpus, "--output", copy, "--steps", "10"]
    argv += ["--batch-size", settings["batch_size"], "--max-seq-length", "32", "--dry-run"]
    status, _, err = run_cli(capsys, *argv)
    assert status == 2, err
    assert f"Checkpoint '{copy / 'checkpoints' / 'ckpt-4'}' cannot be read (" in one_sentence(err)


def test_multi_worker_and_tpu_are_planned_without_their_hardware(
    records, tmp_path, capsys, monkeypatch
):
    no_model_built(monkeypatch)
    data = records / "tfrecords-128"
    argv = ["pretrain", "--preset", "small", "--corpus", data, "--vocab", data / "vocab.txt"]
    argv += ["--output", tmp_path / "r", "--dry-run"]
    monkeypatch.delenv("TF_CONFIG", raising=False)
    status, _, err = run_cli(capsys, *argv, "--strategy", "multi_worker")
    assert status == 2 and "needs TF_CONFIG naming the cluster's workers" in one_sentence(err)
    workers = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    cluster = {"cluster": workers, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    status, out, err = run_cli(capsys, *argv, "--strategy", "multi_worker")
    assert status == 0, err
    assert "2 workers in TF_CONFIG" in out and "per device, estimated" in out
    # One device or more on each worker: the memory row listed "with 1" device.
    memory = next(line for line in out.splitlines() if line.lstrip().startswith("memory"))
    assert "GB with 2, " in memory and "with 1," not in memory and "with 64 devices" in memory
    # A task its cluster does not list passed, and the run ended in TensorFlow's traceback
    # ("ValueError: The `task_id` 2 exceeds the maximum id of worker."); a batch the workers
    # cannot share passed too.
    for task, listed in (
        ({"type": "worker", "index": 2}, "(type 'worker', index 2)"),
        ({"type": "chief", "index": 0}, "(type 'chief', index 0)"),
        ({"index": 0}, "(type None, index 0)"),
    ):
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": workers, "task": task}))
        status, out, err = run_cli(capsys, *argv, "--strategy", "multi_worker")
        assert status == 2 and out == "", out
        assert f"TF_CONFIG's task {listed} is not one its cluster lists (worker 0 to 1)" in (
            one_sentence(err)
        )
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    status, out, err = run_cli(capsys, *argv, "--strategy", "multi_worker", "--batch-size", "255")
    assert status == 2 and "--batch-size 255 must be a multiple of the 2" in one_sentence(err)
    status, out, err = run_cli(
        capsys, *argv[:-1], "--strategy", "multi_worker", "--batch-size", "255"
    )  # the run says so before it waits for the other worker
    assert status == 2 and "--batch-size 255 must be a multiple of the 2" in one_sentence(err)
    cluster["task"]["index"] = 5
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    status, out, err = run_cli(capsys, *argv[:-1], "--strategy", "multi_worker")
    assert status == 2 and "(type 'worker', index 5) is not one" in one_sentence(err)
    status, out, err = run_cli(capsys, *argv, "--strategy", "tpu", "--precision", "mixed_bfloat16")
    assert status == 0, err
    assert "a TPU's cores" in out and "GB with 8" in out


def test_mirrored_is_planned_on_the_device_counts_it_runs_on(small_corpus, tmp_path, capsys):
    """--strategy mirrored needs two devices or more (one is refused when the run starts),
    but its memory row listed "with 1" device first."""
    argv = ["pretrain", "--corpus", small_corpus, "--output", tmp_path / "r", "--dry-run"]
    argv += ["--strategy", "mirrored"]
    status, out, err = run_cli(capsys, *argv)
    assert status == 0 and "MirroredStrategy over two or more GPUs" in out, err
    memory = re.search(r"^  memory +(.+)$", out, re.M)[1]
    assert re.match(r"~\S+ [MG]B with 2, ", memory) and "with 1," not in memory, memory
    assert memory.endswith(
        " with 32 devices: per device, estimated (TensorFlow's own memory not included)"
    )
    # A batch no count of two or more devices splits: said, not an empty list.
    status, out, err = run_cli(capsys, *argv, "--batch-size", "9")
    assert status == 0, err
    memory = re.search(r"^  memory +(.+)$", out, re.M)[1]
    assert memory == (
        "not estimated: --batch-size 9 does not split evenly over 2, 4, 8, 16 or 32 devices"
    )


def test_the_docs_dry_run_of_base_on_the_bundled_corpus_is_what_the_command_prints(
    tmp_path, capsys, monkeypatch
):
    """docs/pretraining.md quotes the plan of the README's TPU command on the bundled
    Shakespeare prepared at 512 tokens: the quote and its sentence's counts must be what
    `prepare` and the dry run give today (the packing's example count had drifted)."""
    from conftest import SAMPLE_CORPUS

    page = (README.parent / "docs" / "pretraining.md").read_text(encoding="utf-8")
    command = "$ keras-electra pretrain --strategy tpu --preset base --corpus tfrecords-512/ \\\n"
    start = page.index(command)
    quoted = page[start : page.index("```", start)].splitlines()[2:]
    (tmp_path / "my_corpus").mkdir()
    shutil.copy(SAMPLE_CORPUS, tmp_path / "my_corpus")
    monkeypatch.chdir(tmp_path)
    status, _, err = run_cli(capsys, "prepare", "--corpus", "my_corpus/", "--output",
                             "tfrecords-512/", "--max-seq-length", "512")  # fmt: skip
    assert status == 0, err
    no_model_built(monkeypatch)
    status, out, err = run_cli(capsys, "pretrain", "--strategy", "tpu", "--preset", "base",
                               "--corpus", "tfrecords-512/", "--vocab", "tfrecords-512/vocab.txt",
                               "--output", "runs/base", "--precision", "mixed_bfloat16",
                               "--dry-run")  # fmt: skip
    assert status == 0, err
    assert out.splitlines() == quoted
    pieces = len((tmp_path / "tfrecords-512" / "vocab.txt").read_text("utf-8").splitlines())
    examples = json.loads((tmp_path / "tfrecords-512" / "metadata.json").read_text())
    assert (
        f"prepared at 512 tokens: {pieces:,} pieces,\n{examples['num_examples']:,} examples)"
        in page
    )


def test_the_python_api_returns_the_plan(records, tmp_path, monkeypatch):
    no_model_built(monkeypatch)
    data = records / "tfrecords-512"
    plan = pretrain([data], tmp_path / "r", preset="base", vocab=str(data / "vocab.txt"),
                    dry_run=True)  # fmt: skip
    assert plan.settings.max_seq_length == 512 and plan.tokens_per_step() == 256 * 512
    assert plan.flops_per_step() > 0 and sum(plan.memory_per_device(8).values()) > 0
    assert not (tmp_path / "r").exists()


# === prepare --dry-run ===


def test_prepare_dry_run_writes_nothing_and_checks_the_corpus(small_corpus, tmp_path, capsys):
    out = tmp_path / "tfrecords-512"
    argv = ["prepare", "--corpus", small_corpus, "--output", out, "--max-seq-length", "512"]
    status, text, err = run_cli(capsys, *argv, "--dry-run")
    assert status == 0, err
    assert "512 tokens each" in text and "--max-seq-length 512" in text
    assert not out.exists()
    status, _, err = run_cli(capsys, "prepare", "--corpus", tmp_path / "none.txt", "--output",
                             out, "--dry-run")  # fmt: skip
    assert status == 2 and "does not exist" in one_sentence(err)
    status, _, err = run_cli(capsys, *argv, "--num-shards", "0", "--dry-run")
    assert status == 2 and "--num-shards must be a positive integer" in one_sentence(err)
    # A seed the packing's hash cannot take passed the dry run, then was a traceback.
    status, _, err = run_cli(capsys, *argv, "--seed", str(2**64), "--dry-run")
    assert status == 2 and "--seed must be between 0 and 4,294,967,295" in one_sentence(err)
    # A vocabulary size no words fit in: the run refused it, the dry runs passed it.
    for command in (argv, ["pretrain", "--corpus", small_corpus, "--output", out]):
        status, _, err = run_cli(capsys, *command, "--vocab-size", "3", "--dry-run")
        assert status == 2 and "--vocab-size 3 leaves no room for words" in one_sentence(err)
    assert not out.exists()


def test_a_vocabulary_that_leaves_much_of_the_corpus_unknown_is_warned_of(
    small_corpus, tmp_path, capsys
):
    # --vocab-size 50 made most of the corpus [UNK] without a word, in prepare and pretrain.
    argv = ["prepare", "--corpus", small_corpus, "--max-seq-length", "32", "--num-shards", "1"]
    status, _, err = run_cli(capsys, *argv, "--output", tmp_path / "tiny", "--vocab-size", "50")
    assert status == 0, err
    warning = next(line for line in err.splitlines() if line.startswith("Warning: "))
    share = float(warning.split("%")[0].removeprefix("Warning: "))
    assert share > 5 and "of the corpus's word pieces are [UNK] (in its first 1 MB)" in warning
    status, _, err = run_cli(capsys, *argv, "--output", tmp_path / "fine", "--vocab-size", "2000")
    assert status == 0 and "[UNK]" not in err, err
    status, _, err = run_cli(capsys, "pretrain", "--corpus", small_corpus, "--output",
                             tmp_path / "run", "--vocab", tmp_path / "tiny" / "vocab.txt",
                             "--steps", "1", "--batch-size", "2", "--max-seq-length", "16",
                             "--no-health", "--no-progress")  # fmt: skip
    assert status == 0 and warning in err, err


def test_a_corpus_of_a_document_per_line_is_warned_of_the_text_packing_drops(
    small_corpus, tmp_path, capsys
):
    # One document a line (no sentence breaks): prepare wrote one example a document and
    # kept 8.8% of the corpus's tokens without a word; pretrain trained on as little.
    documents = small_corpus.read_text(encoding="utf-8").split("\n\n")
    corpus = tmp_path / "documents.txt"
    corpus.write_text("\n".join(d.replace("\n", " ") for d in documents), encoding="utf-8")
    argv = ["--corpus", corpus, "--vocab-size", "500", "--max-seq-length", "128"]
    status, _, err = run_cli(capsys, "prepare", *argv, "--output", tmp_path / "tf")
    assert status == 0, err
    (warning,) = [line for line in err.splitlines() if line.startswith("Warning: ")]
    share = int(warning.split("%")[0].removeprefix("Warning: "))
    assert share > 80 and warning.endswith(
        "of the corpus's word pieces (in its first 1 MB) are past the 125 that an example of "
        "--max-seq-length 128 keeps of a line, and are dropped: packing reads each line as a "
        "sentence and a blank line as the end of a document; split the text into sentences, "
        "one per line."
    ), warning
    status, text, err = run_cli(capsys, "pretrain", "--corpus", corpus, "--vocab",
                                tmp_path / "tf" / "vocab.txt", "--max-seq-length", "128",
                                "--output", tmp_path / "run", "--dry-run")  # fmt: skip
    assert status == 0 and warning.removeprefix("Warning: ") in text, (text, err)
    # The text as it was, a sentence a line: nothing said.
    status, _, err = run_cli(capsys, "prepare", *argv[:1], small_corpus, *argv[2:], "--output",
                             tmp_path / "lines")  # fmt: skip
    assert status == 0 and "Warning" not in err, err


def test_what_a_corpus_directory_holds_besides_its_txt_files_is_named(
    small_corpus, tmp_path, capsys
):
    # A directory is read one level deep, its *.txt files only: a .txt.gz, a .json and a
    # sub-folder's files were left out without a word.
    import gzip

    corpus = tmp_path / "mixed"
    (corpus / "sub").mkdir(parents=True)
    text = small_corpus.read_text(encoding="utf-8")
    (corpus / "a.txt").write_text(text, encoding="utf-8")
    (corpus / "sub" / "b.txt").write_text(text, encoding="utf-8")
    (corpus / "c.txt.gz").write_bytes(gzip.compress(text.encode()))
    (corpus / "d.json").write_text("{}", encoding="utf-8")
    note = (
        f"Read 1 *.txt file of '{corpus}'; left out: c.txt.gz, d.json and the folder sub (a "
        "directory is read one level deep, its *.txt files only: pass others by path or "
        "wildcard)."
    )
    argv = ["--corpus", corpus, "--max-seq-length", "16", "--vocab-size", "500"]
    status, _, err = run_cli(capsys, "prepare", *argv, "--output", tmp_path / "records",
                             "--num-shards", "1")  # fmt: skip
    assert status == 0 and note in err.splitlines(), err
    status, _, err = run_cli(capsys, "pretrain", *argv, "--output", tmp_path / "run",
                             "--steps", "1", "--batch-size", "2", "--no-health",
                             "--no-progress")  # fmt: skip
    assert status == 0 and note in err.splitlines(), err
    records = tmp_path / "records"
    status, _, err = run_cli(capsys, "pretrain", "--corpus", records, "--vocab",
                             records / "vocab.txt", "--max-seq-length", "16", "--output",
                             tmp_path / "run2", "--steps", "1", "--batch-size", "2",
                             "--no-health", "--no-progress")  # fmt: skip
    assert status == 0 and "left out" not in err, err


def test_a_folder_the_system_refuses_is_one_sentence_in_a_dry_run_too(small_corpus, capsys):
    # /proc takes no new folder, even from root, whom os.access lets through: the makedirs
    # failed as TensorFlow's NotFoundError, a traceback.
    # Their dry runs passed it (os.access lets root through).
    out = "/proc/keras-electra-test/records"
    said = "'/proc' is on the kernel's proc file system, where files cannot be made"
    for argv in (
        ["prepare", "--corpus", small_corpus, "--output", out],
        ["prepare", "--corpus", small_corpus, "--output", out, "--dry-run"],
        ["pretrain", "--corpus", small_corpus, "--output", out, "--dry-run"],
    ):
        status, _, err = run_cli(capsys, *argv)
        assert status == 2 and said in one_sentence(err), (argv, err)


def test_prepares_counts_are_refused_in_the_words_of_its_flags(small_corpus, tmp_path, capsys):
    # They named Python's arguments ("num_shards=0 is invalid; use a positive integer."),
    # not the flags the command's user typed.
    argv = ["prepare", "--corpus", small_corpus, "--output", tmp_path / "out", "--dry-run"]
    for flags, message in (
        (["--num-shards", "0"], "--num-shards must be a positive integer, not 0."),
        (["--max-seq-length", "6"], "--max-seq-length must be at least 8 (the least pretrain"),
        (["--max-seq-length", "3"], "--max-seq-length must be at least 8 (the least pretrain"),
        (["--workers", "0"], "--workers must be a positive integer, not 0."),
        (["--vocab-size", "3"], "--vocab-size 3 leaves no room for words; use one above 5 "),
    ):
        status, _, err = run_cli(capsys, *argv, *flags)
        assert status == 2 and message in one_sentence(err), (flags, err)
    assert not (tmp_path / "out").exists()


def test_prepare_refuses_an_output_holding_a_model_or_exports(
    small_corpus, tiny_run, tmp_path, capsys
):
    # prepare --output RUN_DIR replaced the run's vocab.txt with the records' own, and the
    # run could no longer be resumed, fine-tuned or exported.
    vocab = (tiny_run / "vocab.txt").read_bytes()
    exports = tmp_path / "saved_models" / "electra"
    (exports / "1").mkdir(parents=True)
    (exports / "1" / "saved_model.pb").write_bytes(b"")
    argv = ["prepare", "--corpus", small_corpus, "--vocab-size", "500", "--max-seq-length", "32"]
    for dry_run in (["--dry-run"], []):
        status, _, err = run_cli(capsys, *argv, "--output", tiny_run, *dry_run)
        assert status == 2 and "holds a model (config.json), whose vocab.txt" in one_sentence(err)
        status, _, err = run_cli(capsys, *argv, "--output", exports, *dry_run)
        assert status == 2 and "holds exports (saved_model.pb)" in one_sentence(err)
    assert (tiny_run / "vocab.txt").read_bytes() == vocab
    assert not any(p.suffix == ".tfrecord" for p in tiny_run.iterdir())
    assert sorted(p.name for p in exports.rglob("*")) == ["1", "saved_model.pb"]


# === finetune --dry-run ===


def test_an_output_holding_exports_is_refused(records, tiny_run, tmp_path, capsys):
    # saved_models/NAME (or its version folder) as --output: the run's files went among
    # the versions TF Serving reads.
    base = tmp_path / "saved_models" / "cls"
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_bytes(b"")
    data = records / "tfrecords-128"
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "the king,a\nthe queen,b\n" * 4, encoding="utf-8")
    commands = [
        ["pretrain", "--corpus", data, "--vocab", data / "vocab.txt"],
        ["finetune", "--run", tiny_run, "--task", "classify", "--train", train],
    ]
    for command in commands:
        for output in (base, base / "1"):
            status, _, err = run_cli(capsys, *command, "--output", output, "--dry-run")
            assert status == 2, err
            assert f"'{output}' holds exports (saved_model.pb)" in one_sentence(err)
            assert "choose a new --output" in err
    assert sorted(p.name for p in base.rglob("*")) == ["1", "saved_model.pb"]


def test_finetune_dry_run_reads_the_data_and_writes_nothing(tiny_run, tmp_path, capsys):
    train = tmp_path / "train.csv"
    rows = ["sentence,label"] + [
        f"the king {i} is here,{'pos' if i % 2 else 'neg'}" for i in range(40)
    ]
    train.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "runs" / "cls"
    argv = ["finetune", "--run", tiny_run, "--task", "classify", "--train", train]
    argv += ["--text-column", "sentence", "--output", out, "--batch-size", "8", "--dry-run"]
    status, text, err = run_cli(capsys, *argv)
    assert status == 0, err
    assert "2 labels (neg, pos)" in text and "40 training examples" in text
    assert "15 (3 epochs of 5)" in text and str(out) in text
    assert not out.exists()
    status, _, err = run_cli(capsys, *argv, "--label-column", "gold")
    assert status == 2 and "gold" in one_sentence(err)
    # An --output holding a fine-tuned model: the plan says that it is replaced.
    out.mkdir(parents=True)
    for name in ("config.json", "vocab.txt"):
        shutil.copy(tiny_run / name, out / name)
    (out / "finetune.json").write_text("{}", encoding="utf-8")
    status, text, err = run_cli(capsys, *argv)
    assert status == 0 and "; replaces the fine-tuned model there" in text, err
    empty = tmp_path / "empty-run"
    shutil.copytree(tiny_run, empty, ignore=shutil.ignore_patterns("checkpoints"))
    argv[2] = empty
    status, _, err = run_cli(capsys, *argv)
    assert status == 2 and "has no checkpoint yet" in one_sentence(err)


def test_the_plan_shows_the_objectives_hyperparameters(
    records, tiny_run, small_corpus, tmp_path, capsys
):
    data = records / "tfrecords-128"
    base = ["pretrain", "--preset", "tiny", "--corpus", data, "--vocab", data / "vocab.txt"]
    base += ["--output", tmp_path / "r", "--max-seq-length", "128", "--dry-run"]
    electra = "electra: mlm_weight 1, disc_weight 50, corrective_weight 0, temperature {}, "
    electra += "disallow_correct false"
    cases = [
        ([], electra.format(2)),  # the tiny preset's recipe
        (["--temperature", "3.5"], electra.format(3.5)),
        (["--objective", "mlm"], "mlm: mlm_weight 1"),
        (["--objective", "electric"], "electric: mlm_weight 1, disc_weight 50"),
        (
            ["--hyperparameters", "disc_weight=30", "corrective_weight=1", "temperature=1.5"],
            "electra: mlm_weight 1, disc_weight 30, corrective_weight 1, temperature 1.5, "
            "disallow_correct false",
        ),
        (["--hyperparameters", "disallow_correct=true"], electra.format(2)[:-5] + "true"),
    ]
    for extra, expected in cases:
        status, out, err = run_cli(capsys, *base, *extra)
        assert status == 0, err
        assert re.search(r"^  objective +(.+)$", out, re.M)[1] == expected, extra
    # What the flag refuses before anything is read or written: its form, as argparse
    # refuses a flag (the usage, then the error), and the objective's names and kinds, in
    # one sentence.
    for pair, expected in (
        ("disc_weight", "'disc_weight' is not NAME=VALUE (such as disc_weight=30)"),
        ("disc_weight=lots", "the value in 'disc_weight=lots' is not a number, true or false"),
    ):
        with pytest.raises(SystemExit) as exited:
            run_cli(capsys, *base, "--hyperparameters", pair)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.strip().splitlines()[-1].endswith(expected), err
    refused = [
        (["warmth=3"], "The electra objective has no hyperparameter 'warmth'; its hyperparameters"),
        (["disallow_correct=1"], "The electra objective's disallow_correct is true or false, not"),
        (["temperature=true"], "The electra objective's temperature is a finite number, not True"),
        (["disc_weight=nan"], "The electra objective's disc_weight is a finite number, not nan."),
        (["temperature=2", "--objective", "mlm"], "The mlm objective has no hyperparameter"),
        # A negative loss weight maximized that loss; two temperatures: the flag's won.
        (["disc_weight=-1"], "The electra objective's disc_weight is a loss weight, 0 or more"),
        (["mlm_weight=-2", "--objective", "mlm"], "The mlm objective's mlm_weight is a loss"),
        (["temperature=3", "--temperature", "2"], "--temperature 2 and --hyperparameters temper"),
    ]
    for extra, expected in refused:
        status, out, err = run_cli(capsys, *base, "--hyperparameters", *extra)
        assert status == 2 and out == "" and expected in one_sentence(err), (extra, err)
    assert not (tmp_path / "r").exists()
    # A resumed run plans with the hyperparameters it recorded.
    recorded = json.loads((tiny_run / "run.json").read_text())
    argv = ["pretrain", "--corpus", small_corpus, "--output", tiny_run, "--steps", "10"]
    argv += ["--batch-size", recorded["batch_size"], "--max-seq-length", "32", "--dry-run"]
    status, out, err = run_cli(capsys, *argv)
    temperature = recorded["hyperparameters"]["temperature"]
    assert status == 0, err
    assert f", temperature {temperature:g}, " in re.search(r"^  objective +(.+)$", out, re.M)[1]


def test_prepare_on_a_file_system_tensorflow_cannot_reach_is_one_sentence(
    small_corpus, tmp_path, capsys
):
    # A corpus or --output on a remote file system that fails (gs:// without a network, a
    # scheme TensorFlow lacks, a full disk) was a TensorFlow traceback and exit 1.
    cases = [
        (["--corpus", "s3://bucket/corpus.txt", "--output", tmp_path / "out"], "s3", 1),
        (["--corpus", small_corpus, "--output", "hdfs://nowhere/out"], "hdfs", 3),
    ]
    for argv, scheme, remote in cases:
        status, _, err = run_cli(capsys, "prepare", *argv, "--vocab-size", "500")
        assert status == 2
        assert one_sentence(err).endswith(
            f"(File system scheme '{scheme}' not implemented (file: '{argv[remote]}')); "
            "check the paths, the network and your credentials for the remote ones, then run "
            "the same command again: it keeps the shards it finished."
        ), err
    assert not (tmp_path / "out").exists()


def test_the_command_prepare_prints_runs_as_printed_with_spaces_in_the_path(
    small_corpus, tmp_path, capsys
):
    # "Pretrain with: keras-electra pretrain --corpus /x/my records ..." split the path
    # when pasted into a shell.
    import shlex

    out = tmp_path / "my records"
    argv = ["prepare", "--corpus", small_corpus, "--output", out, "--vocab-size", "500"]
    status, text, err = run_cli(capsys, *argv, "--max-seq-length", "64", "--num-shards", "1")
    assert status == 0, err
    (line,) = [x for x in text.splitlines() if x.startswith("Pretrain with: ")]
    command = shlex.split(line.removeprefix("Pretrain with: ").replace("RUN_DIR", "run"))
    assert command[:2] == ["keras-electra", "pretrain"] and str(out) in command
    status, text, err = run_cli(capsys, *command[1:], "--output", tmp_path / "run", "--dry-run")
    assert status == 0 and "Dry run" in text, err
