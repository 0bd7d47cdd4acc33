"""PretrainSettings and FinetuneOptions: one source for the options, the flags and run.json."""

import argparse
import dataclasses
import json

import pytest

from keras_electra.cli import build_parser, parse_arguments
from keras_electra.config import TRAINING_DEFAULTS
from keras_electra.errors import ConfigError
from keras_electra.finetuning import finetune
from keras_electra.pretraining.run import pretrain
from keras_electra.settings import (
    TASKS,
    FinetuneOptions,
    PrepareSettings,
    PretrainSettings,
    add_arguments,
    from_arguments,
    option,
    recipe_defaults,
)

FIELDS = {f.name: f for f in dataclasses.fields(PretrainSettings)}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["pretrain", "--output", "out", "--corpus", "a.txt", *argv])


def test_every_field_with_a_flag_reaches_the_settings_from_the_command_line():
    # One non-default value per field, given as its generated flag.
    given = {
        "preset": ("small", "--preset", "small"),
        "init": ("d", "--init", "d"),
        "validation": (["v1", "v2"], "--validation", "v1", "v2"),
        "health": (False, "--no-health"),
        "objective": ("mlm", "--objective", "mlm"),
        "embedding_sharing": ("gdes", "--embedding-sharing", "gdes"),
        "temperature": (3.0, "--temperature", "3"),
        "generator_size": (0.5, "--generator-size", "0.5"),
        "steps": (7, "--steps", "7"),
        "batch_size": (8, "--batch-size", "8"),
        "max_seq_length": (64, "--max-seq-length", "64"),
        "learning_rate": (0.002, "--learning-rate", "2e-3"),
        "warmup_steps": (5, "--warmup-steps", "5"),
        "vocab": ("v.txt", "--vocab", "v.txt"),
        "vocab_size": (900, "--vocab-size", "900"),
        "lowercase": (False, "--cased"),
        "log_every": (3, "--log-every", "3"),
        "checkpoint_every": (9, "--checkpoint-every", "9"),
        "keep_checkpoints": (1, "--keep-checkpoints", "1"),
        "seed": (4, "--seed", "4"),
        "precision": ("mixed_bfloat16", "--precision", "mixed_bfloat16"),
        "strategy": ("one_device", "--strategy", "one_device"),
        "optimizer": ("lamb", "--optimizer", "lamb"),
        "bias_correction": (False, "--no-bias-correction"),
        "xla": (True, "--xla"),
        "steps_per_execution": (3, "--steps-per-execution", "3"),
        "grad_accumulation": (2, "--grad-accumulation", "2"),
        "on_nan": ("skip", "--on-nan", "skip"),
        "progress": (False, "--no-progress"),
        "dry_run": (True, "--dry-run"),
        "hyperparameters": (
            {"disc_weight": 30.0, "disallow_correct": True},
            *("--hyperparameters", "disc_weight=30", "disallow_correct=true"),
        ),
    }
    with_flags = {name for name, f in FIELDS.items() if f.metadata["cli"]}
    assert with_flags == set(given) | {"corpus"}, "a new option needs a case here"
    argv = [token for _, *flag in given.values() for token in flag]
    settings = from_arguments(parse(*argv), PretrainSettings)
    for name, (value, *_) in given.items():
        assert getattr(settings, name) == value, name
        assert value != FIELDS[name].default, f"{name}: pick a value other than the default"
    assert settings.corpus == ["a.txt"]


def test_flags_left_out_keep_the_fields_defaults():
    settings = from_arguments(parse(), PretrainSettings)
    assert settings == PretrainSettings(corpus=["a.txt"])


def test_preset_defaults_come_from_the_one_table_and_explicit_values_win():
    for preset, defaults in TRAINING_DEFAULTS.items():
        resolved = PretrainSettings(corpus=["a"], preset=preset).resolved()
        for name, value in defaults.items():
            assert getattr(resolved, name) == value, (preset, name)
    mine = PretrainSettings(corpus=["a"], preset="small", steps=10, learning_rate=1e-2).resolved()
    assert (mine.steps, mine.learning_rate, mine.batch_size) == (10, 1e-2, 128)
    # No preset: the init directory's (passed in), else tiny.
    assert PretrainSettings(corpus=["a"]).resolved("base").preset == "base"
    assert PretrainSettings(corpus=["a"]).resolved().preset == "tiny"
    # Windows and checkpoints fit the run: log_every <= steps, checkpoints on window ends.
    short = PretrainSettings(corpus=["a"], steps=20, log_every=50).resolved()
    assert (short.log_every, short.checkpoint_every) == (20, 500)
    odd = PretrainSettings(corpus=["a"], log_every=30, checkpoint_every=100).resolved()
    assert odd.checkpoint_every == 120


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(preset="huge"), "Unknown preset 'huge'; choose one of: tiny, small"),
        (dict(objective="bert"), "Unknown objective 'bert'; choose one of: electra, mlm"),
        (dict(on_nan="ignore"), "Unknown --on-nan 'ignore'; choose one of: stop, skip"),
        (dict(steps=0), "--steps must be a positive integer"),
        (dict(learning_rate=-1.0), "--learning-rate must be positive"),
        (dict(max_seq_length=4), "--max-seq-length must be at least 8"),
        (dict(keep_checkpoints=0), "--keep-checkpoints must be at least 1"),
        # Were clamped to 1, used as "every -5 steps", or ran a negative warm-up.
        (dict(log_every=0), "--log-every must be a positive integer"),
        (dict(checkpoint_every=-5), "--checkpoint-every must be a positive integer"),
        (dict(vocab_size=0), "--vocab-size must be a positive integer"),
        (dict(warmup_steps=-1), "--warmup-steps must be 0 or more"),
        # Passed the dry run; the run wrote its files, then NumPy's ValueError traceback.
        (dict(seed=-1), "--seed must be between 0 and 4,294,967,295, not -1"),
        (dict(seed=2**32), "--seed must be between 0 and 4,294,967,295, not 4294967296"),
    ],
)
def test_a_bad_value_is_one_sentence(values, message):
    with pytest.raises(ConfigError, match=message):
        PretrainSettings(corpus=["a"], **values).resolved()


def test_run_json_records_what_fixes_the_run_and_not_the_per_invocation_options():
    record = PretrainSettings(corpus=["a"], vocab="v.txt", progress=False).resolved().record()
    assert {"preset", "steps", "batch_size", "seed", "keep_checkpoints", "vocab_sha256"} <= set(
        record
    )
    assert not {"vocab", "progress", "health", "init", "lowercase", "config_overrides"} & set(
        record
    )
    json.dumps(record)  # JSON as it is
    assert set(PretrainSettings.fixed_names()) == {
        "preset",
        "objective",
        "batch_size",
        "max_seq_length",
        "seed",
        "precision",
        "optimizer",
        "bias_correction",
    }


def test_a_new_option_is_one_field(tmp_path):
    """What adding an option takes: the field; its flag, help and record follow."""

    @dataclasses.dataclass
    class WithTemperature(PretrainSettings):
        sampling_temperature: float = option(1.0, "generator sampling temperature", metavar="T")

    parser = argparse.ArgumentParser()
    add_arguments(parser, WithTemperature)
    assert "--sampling-temperature T" in parser.format_help()
    args = parser.parse_args(["--corpus", "a", "--sampling-temperature", "2"])
    settings = from_arguments(args, WithTemperature)
    assert settings.sampling_temperature == 2.0
    assert settings.resolved().record()["sampling_temperature"] == 2.0


def test_pretrain_refuses_a_keyword_that_is_not_a_setting(tmp_path):
    with pytest.raises(TypeError, match="pretrain\\(\\) has no option 'stepz'"):
        pretrain(["a.txt"], tmp_path, stepz=3)
    with pytest.raises(TypeError, match="has no options 'bogus', 'stepz'; the options are"):
        pretrain(["a.txt"], tmp_path, stepz=3, bogus=1)


def test_keep_checkpoints_keeps_that_many(small_corpus, tmp_path):
    out = tmp_path / "run"
    pretrain(
        [str(small_corpus)],
        out,
        steps=6,
        batch_size=4,
        max_seq_length=32,
        vocab_size=300,
        log_every=1,
        checkpoint_every=1,
        keep_checkpoints=2,
        health=False,
        progress=False,
        config_overrides={"num_layers": 1, "hidden_size": 32, "num_heads": 2},
    )
    kept = sorted(p.name for p in (out / "checkpoints").glob("ckpt-*.index"))
    assert kept == ["ckpt-5.index", "ckpt-6.index"]
    assert json.loads((out / "run.json").read_text())["keep_checkpoints"] == 2


# --- FinetuneOptions: finetune()'s keywords and `keras-electra finetune`'s flags ---

FT_FIELDS = {f.name: f for f in dataclasses.fields(FinetuneOptions)}


def parse_finetune(*argv: str) -> argparse.Namespace:
    base = ["finetune", "--run", "r", "--task", "qa", "--train", "t", "--output", "o"]
    return build_parser().parse_args([*base, *argv])


def test_every_finetune_option_reaches_the_options_from_the_command_line():
    given = {
        "text_column": ("sentence", "--text-column", "sentence"),
        "text_pair_column": ("second", "--text-pair-column", "second"),
        "label_column": ("2", "--label-column", "2"),
        "epochs": (4, "--epochs", "4"),
        "batch_size": (8, "--batch-size", "8"),
        "learning_rate": (2e-5, "--learning-rate", "2e-5"),
        "layer_decay": (0.7, "--layer-decay", "0.7"),
        "probe_epochs": (2, "--probe-epochs", "2"),
        "bias_correction": (False, "--no-bias-correction"),
        "weight_decay": (0.0, "--weight-decay", "0"),
        "warmup_fraction": (0.2, "--warmup-fraction", "0.2"),
        "dropout": (0.0, "--dropout", "0"),
        "pooling": ("mean", "--pooling", "mean"),
        "max_seq_length": (64, "--max-seq-length", "64"),
        "version_2": (True, "--squad-v2"),
        "doc_stride": (32, "--doc-stride", "32"),
        "max_query_length": (16, "--max-query-length", "16"),
        "max_answer_length": (10, "--max-answer-length", "10"),
        "seed": (3, "--seed", "3"),
        "progress": (False, "--quiet"),
        "dry_run": (True, "--dry-run"),
    }
    assert set(FT_FIELDS) == set(given), "a new option needs a case here"
    argv = [token for _, *flag in given.values() for token in flag]
    options = from_arguments(parse_finetune(*argv), FinetuneOptions)
    for name, (value, *_) in given.items():
        assert getattr(options, name) == value, name
        assert value != FT_FIELDS[name].default, f"{name}: pick a value other than the default"
    assert from_arguments(parse_finetune(), FinetuneOptions) == FinetuneOptions()


def test_every_prepare_option_reaches_the_settings_from_the_command_line():
    given = {
        "corpus": (["c1", "c2"], "--corpus", "c1", "c2"),
        "vocab": ("v.txt", "--vocab", "v.txt"),
        "vocab_size": (900, "--vocab-size", "900"),
        "lowercase": (False, "--cased"),
        "max_seq_length": (512, "--max-seq-length", "512"),
        "num_shards": (2, "--num-shards", "2"),
        "seed": (5, "--seed", "5"),
        "dry_run": (True, "--dry-run"),
        "workers": (3, "--workers", "3"),
        # Any flag prepare does not know is an Apache Beam pipeline option.
        "beam_options": (["--runner", "DirectRunner"], "--runner", "DirectRunner"),
    }
    fields = {f.name: f for f in dataclasses.fields(PrepareSettings)}
    assert set(fields) == set(given), "a new option needs a case here"
    argv = [token for _, *flag in given.values() for token in flag]
    args = parse_arguments(["prepare", "--output", "o", *argv])
    settings = from_arguments(args, PrepareSettings, beam_options=args.beam_options)
    for name, (value, *_) in given.items():
        assert getattr(settings, name) == value, name
        assert value != fields[name].default, f"{name}: pick a value other than the default"
    defaults = build_parser().parse_args(["prepare", "--output", "o", "--corpus", "c"])
    assert from_arguments(defaults, PrepareSettings) == PrepareSettings(corpus=["c"])


def test_finetune_defaults_follow_the_papers_recipe_per_size_and_task():
    for preset in ("tiny", "small", "base", "large"):
        expected = recipe_defaults(preset)
        options = FinetuneOptions().resolved(preset, "classify", 512)
        for name in (*FinetuneOptions.HYPERPARAMETERS, "dropout"):
            assert getattr(options, name) == expected[name], (preset, name)
    assert FinetuneOptions().resolved("large", "tag", 512).layer_decay == 0.9
    # The paper's epochs: 10 for STS (regress), 2 for SQuAD (qa), 3 for the others.
    epochs = {t: FinetuneOptions().resolved("small", t, 512).epochs for t in TASKS}
    assert epochs == {"classify": 3, "regress": 10, "tag": 3, "qa": 2}
    assert FinetuneOptions().resolved("base", "regress", 512).epochs == 10  # the paper's STS
    mine = FinetuneOptions(epochs=2, dropout=0.0).resolved("base", "regress", 512)
    assert (mine.epochs, mine.dropout, mine.learning_rate) == (2, 0.0, 1e-4)
    assert list(mine.hyperparameters()) == list(FinetuneOptions.HYPERPARAMETERS)


@pytest.mark.parametrize(
    ("values", "task", "message"),
    [
        ({}, "ner", "Unknown task 'ner'; choose one of: classify, regress, tag, qa."),
        ({"epochs": 0}, "qa", "--epochs must be positive, got 0."),
        ({"learning_rate": -1.0}, "qa", "--learning-rate must be positive, got -1.0."),
        ({"dropout": 1.0}, "qa", "--dropout must be in [0, 1), got 1.0."),
        ({"warmup_fraction": 2.0}, "tag", "--warmup-fraction must be in [0, 1] (a fraction"),
        ({"warmup_fraction": -0.5}, "tag", "--warmup-fraction must be in [0, 1] (a fraction"),
        ({"weight_decay": -0.1}, "classify", "--weight-decay must be 0 or more, got -0.1."),
        ({"pooling": "max"}, "classify", "Unknown pooling 'max'; choose one of: cls, mean."),
        ({"max_seq_length": 600}, "qa", "--max-seq-length must be between 8 and 512 (the"),
        ({"seed": -3}, "classify", "--seed must be between 0 and 4,294,967,295, not -3."),
        # Windows 128 apart of 128 - 64 - 3 = 61 pieces: an answer across two in neither.
        (
            {"doc_stride": 128},
            "qa",
            "--doc-stride 128 leaves no overlap between context windows of 61 pieces "
            "(--max-seq-length 128 less a 64-piece question and 3 special tokens); pass one "
            "below 61, or leave it out for half a window.",
        ),
        ({"doc_stride": 0}, "qa", "--doc-stride must be positive, got 0."),
    ],
)
def test_a_bad_finetune_value_is_one_sentence(values, task, message):
    with pytest.raises(ConfigError) as error:
        FinetuneOptions(**values).resolved("small", task, 512)
    assert str(error.value).startswith(message)


def test_a_doc_stride_that_leaves_an_overlap_is_kept_and_other_tasks_ignore_it():
    assert FinetuneOptions().resolved("small", "qa", 512).doc_stride is None  # half a window
    assert FinetuneOptions(doc_stride=60).resolved("small", "qa", 512).doc_stride == 60
    assert FinetuneOptions(doc_stride=128).resolved("small", "classify", 512).doc_stride == 128
    longer = FinetuneOptions(doc_stride=128, max_seq_length=384)  # BERT's SQuAD setting
    assert longer.resolved("base", "qa", 512).doc_stride == 128


def test_finetune_refuses_a_keyword_that_is_not_an_option(tmp_path):
    with pytest.raises(TypeError, match="finetune\\(\\) has no option 'epoch'"):
        finetune(tmp_path, "classify", tmp_path / "t.csv", epoch=3)


def test_finetune_json_takes_the_options_it_shares_by_name():
    from keras_electra.finetuning.settings import FinetuneSettings

    shared = [
        f
        for f in dataclasses.fields(FinetuneSettings)
        if f.name in {o.name for o in dataclasses.fields(FinetuneOptions)}
    ]
    assert {f.name for f in shared} >= {"max_seq_length", "pooling", "doc_stride", "dropout"}
    # Its defaults are the options' (dropout: the recipe's, as the options leave it None).
    for f in shared:
        option_default = FinetuneOptions.__dataclass_fields__[f.name].default
        assert f.default == (0.1 if f.name == "dropout" else option_default), f.name
    options = FinetuneOptions(
        max_seq_length=64,
        text_column="sentence",
        text_pair_column="other",
        label_column="gold",
        dropout=0.2,
        pooling="mean",
        version_2=True,
        doc_stride=32,
        max_query_length=16,
        max_answer_length=7,
    )
    settings = FinetuneSettings.from_options("qa", options, source="runs/x", labels=["a"])
    for f in shared:
        assert getattr(settings, f.name) == getattr(options, f.name), f.name
        assert getattr(settings, f.name) != f.default, f"{f.name} has no case here"
    assert (settings.task, settings.source, settings.labels) == ("qa", "runs/x", ["a"])


def test_a_boolean_flag_states_its_default_once_on_every_python():
    """BooleanOptionalAction appended "(default: False)" on Python 3.10 to a help text
    that already says its default; the two plain flags print it as written."""
    parser = argparse.ArgumentParser(prog="pretrain")
    add_arguments(parser, PretrainSettings)
    text = " ".join(parser.format_help().split())
    assert text.count("(default: off, slower on CPU)") == 1
    assert "(default: False)" not in text
    assert parse("--xla").xla is True and parse("--no-xla").xla is False
    assert parse().xla is False


def test_help_states_every_default_the_reference_lists():
    """docs/cli.md says `--help` prints what the reference's default column shows; the
    help of --log-every, --keep-checkpoints, --seed, --precision, ... did not."""
    from keras_electra.cli import _default_cell

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("pretrain", "prepare", "finetune"):
        for action in sub.choices[name]._actions:
            shown = _default_cell(action).strip("`")
            if action.dest != "help" and shown and shown not in ("on", "off"):
                assert "default" in action.help, (name, action.option_strings)
    text = " ".join(sub.choices["pretrain"].format_help().split())
    assert "steps per metrics.jsonl line (default: 50)" in text
    assert "how many recent checkpoints the run directory keeps (default: 3)" in text


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--to", "hf", "--run", "r", "--generator", "g"],
         "--generator applies to --from; --to hf converts --run alone, so leave it out."),
        (["--to", "keras-hub", "--run", "r", "src"],
         "SRC 'src' applies to --from; --to keras-hub converts --run alone, so leave it out."),
        (["--to", "hf", "--run", "r", "--cased"], "--cased applies to --from; --to hf"),
        (["--from", "hf", "src", "--run", "r"],
         "--run applies to --to; --from hf converts SRC 'src', so leave --run out."),
        (["--from", "hf", "src", "--generator", "g", "--vocab", "v"],
         "--vocab applies to --from google only."),
    ],
)  # fmt: skip
def test_convert_refuses_the_other_directions_flags_it_would_ignore(argv, said, tmp_path, capsys):
    # `convert --to hf --run R --generator G` (or with a SRC) wrote R and ignored the rest.
    from keras_electra.cli import main

    assert main(["convert", *argv, "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-electra convert: error: ") and said in err, err
    assert err.count("\n") == 1 and not (tmp_path / "o").exists()


def test_an_empty_output_is_refused_not_the_current_folder(tmp_path, monkeypatch, capsys):
    # `pretrain --output ""` wrote its run (config.json, checkpoints/, ...) into the
    # current folder: Path("") is ".".
    from keras_electra.cli import main

    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat .\n", encoding="utf-8")
    for command in (["pretrain", "--corpus", str(corpus)], ["report", str(tmp_path)]):
        with pytest.raises(SystemExit) as exited:  # argparse's usage error
            main([*command, "--output", ""])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.endswith("error: argument --output: it is empty; pass the path to write\n")
    with pytest.raises(ConfigError, match=r"^output_dir is empty; pass the run directory"):
        pretrain([str(corpus)], "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]
