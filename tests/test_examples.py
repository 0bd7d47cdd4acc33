"""The Colab TPU notebook stays valid, and the data path it relies on (gs:// URLs) works.

The notebook cannot run here (no TPU, no bucket), so its structure and Python
are checked, and its pretraining call is run on TFRecords and a vocabulary read
from TensorFlow's in-memory ``ram://`` filesystem: the same ``tf.io.gfile``
route that ``gs://`` paths take.
"""

import json

import pytest
from conftest import REPO

NOTEBOOK = REPO / "examples" / "colab_tpu.ipynb"


def _python_source(cell: dict) -> str:
    """A code cell without its IPython shell (``!``) and magic (``%``) lines."""
    kept, continued = [], False
    for line in "".join(cell["source"]).splitlines():
        shell = continued or line.lstrip().startswith(("!", "%"))
        continued = shell and line.rstrip().endswith("\\")
        kept.append("" if shell else line)  # keep line numbers for error messages
    return "\n".join(kept) + "\n"


def test_the_colab_tpu_notebook_is_valid_nbformat_4_and_its_python_compiles():
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4 and isinstance(notebook["nbformat_minor"], int)
    assert isinstance(notebook["metadata"], dict)
    assert notebook["metadata"].get("accelerator") == "TPU"
    code = []
    for index, cell in enumerate(notebook["cells"]):
        assert cell["cell_type"] in ("code", "markdown"), index
        assert isinstance(cell["source"], list), index
        assert all(isinstance(line, str) for line in cell["source"]), index
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, index
            source = _python_source(cell)
            compile(source, f"{NOTEBOOK.name}[cell {index}]", "exec")
            code.append("".join(cell["source"]))
    text = "\n".join(code)
    # The steps the notebook promises: install, authenticate, prepare, copy to the
    # bucket, pretrain with the strategy chosen by auto, export.
    for step in (
        "pip install",
        "auth.authenticate_user()",
        "keras-electra prepare",
        "gsutil -m cp",
        'strategy="auto"',
        "keras-electra export",
    ):
        assert step in text, step
    assert 'DATA = f"gs://{BUCKET}/' in text


def test_pretraining_reads_tfrecords_and_vocab_from_a_url(small_corpus, tmp_path):
    """The notebook's ``pretrain([gs://...], vocab=gs://.../vocab.txt)``, with ram:// for gs://."""
    import tensorflow as tf

    from keras_electra.data import (
        ElectraTokenizer,
        is_tfrecord_input,
        learn_vocab,
        load_vocab,
        resolve_tfrecord_files,
        save_vocab,
        write_pretraining_tfrecords,
    )
    from keras_electra.errors import InputDataError
    from keras_electra.pretraining.run import pretrain

    local = tmp_path / "tfrecords"
    tokens = learn_vocab([str(small_corpus)], 500)
    write_pretraining_tfrecords(
        str(small_corpus),
        ElectraTokenizer(tokens),
        str(local),
        max_seq_length=32,
        num_shards=2,
        progress=False,
    )
    save_vocab(tokens, str(local / "vocab.txt"))
    bucket = f"ram://bucket-{tmp_path.name}/tfrecords"
    tf.io.gfile.makedirs(bucket)
    for path in local.iterdir():
        tf.io.gfile.copy(str(path), f"{bucket}/{path.name}", overwrite=True)

    assert is_tfrecord_input([bucket])
    assert [p.rsplit("/", 1)[-1] for p in resolve_tfrecord_files(f"{bucket}/*.tfrecord")] == [
        "pretraining-00000-of-00002.tfrecord",
        "pretraining-00001-of-00002.tfrecord",
    ]
    assert load_vocab(f"{bucket}/vocab.txt") == tokens
    with pytest.raises(InputDataError, match="does not exist"):
        resolve_tfrecord_files(f"{bucket}/missing.tfrecord")

    result = pretrain(
        [bucket],
        tmp_path / "run",
        vocab=f"{bucket}/vocab.txt",
        strategy="auto",
        steps=2,
        log_every=1,
        batch_size=8,
        max_seq_length=32,
        progress=False,
        config_overrides={"num_layers": 1},
    )
    assert [r["step"] for r in result.history] == [1, 2]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["corpus"] == [bucket]
