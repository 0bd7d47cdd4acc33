"""RunDirectory: the one owner of a run directory's layout, writes and checks."""

import ast
import pathlib

import keras
import numpy as np
import pytest

from keras_electra.config import ElectraConfig
from keras_electra.data.vocab import SPECIAL_TOKENS
from keras_electra.errors import ConfigError
from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.run_directory import RunDirectory

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_electra"
TOKENS = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(27)]


def tiny_config(**overrides) -> ElectraConfig:
    values = dict(vocab_size=len(TOKENS), hidden_size=16, num_layers=1, num_heads=2)
    values.update(overrides)
    return ElectraConfig.from_preset("tiny", **values)


def test_model_files_round_trip_and_settings_default_to_empty(tmp_path):
    run = RunDirectory(tmp_path / "run")
    assert not run.has_model_files() and run.settings() == {} and run.eval_metrics() is None
    config = tiny_config()
    run.write_model_files(config, TOKENS)
    run.write_settings({"preset": "tiny", "seed": 3})
    run.write_eval_metrics({"accuracy": 0.5})
    loaded, tokens = run.config_and_vocab()
    assert loaded == config and tokens == TOKENS
    assert run.settings() == {"preset": "tiny", "seed": 3}
    assert run.eval_metrics() == {"accuracy": 0.5}
    # Written by rename: no temporary file is left behind.
    assert sorted(p.name for p in run.path.iterdir()) == sorted(
        [run.CONFIG, run.VOCAB, run.SETTINGS, run.EVAL_METRICS]
    )
    assert set(run.model_files()) == {run.CONFIG, run.VOCAB}


def test_a_vocabulary_that_does_not_match_the_config_is_one_sentence(tmp_path):
    run = RunDirectory(tmp_path)
    run.write_model_files(tiny_config(vocab_size=len(TOKENS) + 1), TOKENS)
    mismatch = r"vocab.txt has 32 tokens but config.json says vocab_size 33;"
    with pytest.raises(ConfigError, match=mismatch):
        run.config_and_vocab()


def test_checkpoints_restore_into_a_fresh_model_and_a_missing_one_is_one_sentence(tmp_path):
    run = RunDirectory(tmp_path)
    keras.utils.set_random_seed(0)
    saved = ElectraBackbone(tiny_config())
    with pytest.raises(ConfigError, match="has no checkpoint yet"):
        run.restore_latest(saved)
    assert not run.has_checkpoint()
    run.checkpoints(saved).save(7)
    assert run.has_checkpoint()
    keras.utils.set_random_seed(1)
    fresh = ElectraBackbone(tiny_config())
    assert run.restore_latest(fresh) == 7
    for a, b in zip(saved.get_weights(), fresh.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "objective, sharing",
    [(None, "all"), (None, "gdes"), ("electra", "all"), ("electra", "gdes"), ("mlm", "all")],
)
def test_what_a_checkpoint_holds_is_read_from_it_without_run_json(tmp_path, objective, sharing):
    from keras_electra.finetuning.source import load_backbone
    from keras_electra.pretraining.pretrainer import ElectraPretrainer

    config = tiny_config(embedding_sharing=sharing)
    run = RunDirectory(tmp_path)
    run.write_model_files(config, TOKENS)
    with pytest.raises(ConfigError, match="has no checkpoint yet"):
        run.stored_objective()
    model = ElectraBackbone(config) if objective is None else ElectraPretrainer(config, objective)
    run.checkpoints(model).save(3)
    assert run.stored_objective() == objective
    backbone, _, _ = load_backbone(tmp_path)
    expected = model if objective is None else model.discriminator_backbone()
    for a, b in zip(expected.get_weights(), backbone.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    run.write_settings({"objective": "mlm"})  # run.json, when there is one, says it
    assert run.stored_objective() == "mlm"


def test_a_directory_without_a_config_is_one_sentence_naming_what_to_pass(tmp_path, small_corpus):
    from keras_electra.pretraining.loading import load_run
    from keras_electra.pretraining.run import pretrain

    with pytest.raises(ConfigError) as missing:
        load_run(tmp_path)
    assert str(missing.value) == (
        f"'{tmp_path}' is not a run directory (no config.json); pass the --output of "
        "`keras-electra pretrain`."
    )
    with pytest.raises(ConfigError) as init:
        pretrain([str(small_corpus)], tmp_path / "run", init=str(tmp_path), steps=1)
    assert str(init.value) == (
        f"--init '{tmp_path}' is not a run or converted directory (no config.json); pass the "
        "--output of `keras-electra pretrain` or `keras-electra convert`."
    )
    assert not (tmp_path / "run").exists()


def test_the_resume_directory_is_a_run_directory_inside_the_output(tmp_path):
    run = RunDirectory(tmp_path)
    assert run.resume_dir.path == tmp_path / run.RESUME
    assert run.resume_dir.metrics_file == tmp_path / run.RESUME / run.METRICS


def test_no_other_library_module_spells_a_run_directory_file_name():
    """The layout lives in run_directory.py (directories of other formats excepted)."""
    names = {
        value
        for key, value in vars(RunDirectory).items()
        if key.isupper() and isinstance(value, str)
    }
    # Hugging Face (and its Hub: hub.py), google-research and keras-hub directories have
    # their own layouts.
    other_formats = {"hf.py", "hub.py", "google.py", "keras_hub.py"}
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "run_directory.py" or path.name in other_formats:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert spelled == [], spelled


def test_a_damaged_json_file_of_a_run_is_one_sentence_for_every_command(tiny_run, tmp_path, capsys):
    # A run.json cut short (a full disk, a hand edit) was a JSONDecodeError traceback in
    # report, export and pretrain's dry run.
    import shutil

    from keras_electra.cli import main

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The cat sat on the mat.\n", encoding="utf-8")
    commands = (
        ["report", str(run)],
        ["export", "--run", str(run), "--output", str(tmp_path / "exports")],
        ["pretrain", "--corpus", str(corpus), "--output", str(run), "--dry-run"],
    )
    for name, damaged in (
        ("run.json", '{"steps": 4,\n'),
        ("config.json", '{"vocab_size": 2000,\n'),
    ):
        original = (run / name).read_text(encoding="utf-8")
        (run / name).write_text(damaged, encoding="utf-8")
        for argv in commands[name == "config.json" :]:  # report needs no config
            if argv[0] == "report":  # it draws the metrics, the sentence its unfinished line
                assert main(argv) == 0, argv
                out = capsys.readouterr().out
                assert f"  unfinished: '{run / name}' is not valid JSON (" in out, out
                continue
            assert main(argv) == 2, argv
            err = capsys.readouterr().err.strip()
            assert err.count("\n") == 0 and f"'{run / name}' is not valid JSON (" in err, err
        (run / name).write_text(original, encoding="utf-8")
    assert not (tmp_path / "exports").exists()
