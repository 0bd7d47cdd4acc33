"""The Colab TPU notebook stays valid and runs, and the data path it relies on (gs:// URLs)
works.

There is no TPU or bucket here, so the notebook runs whole on the CPU through
nbclient with its local-disk settings (an empty ``BUCKET``, the tiny preset, a few
steps); its structure and Python are checked; and its pretraining call is run on
TFRecords and a vocabulary read from TensorFlow's in-memory ``ram://`` filesystem: the
same ``tf.io.gfile`` route that ``gs://`` paths take.
"""

import json

import pytest
from conftest import REPO

NOTEBOOK = REPO / "examples" / "colab_tpu.ipynb"


def _python_source(cell: dict) -> str:
    """A code cell with its IPython shell (``!``) and magic (``%``) lines as ``pass`` at
    their indentation (a block may hold only shell lines), line numbers kept."""
    kept, continued = [], False
    for line in "".join(cell["source"]).splitlines():
        shell = continued or line.lstrip().startswith(("!", "%"))
        indent = line[: len(line) - len(line.lstrip())]
        kept.append("" if continued else indent + "pass" if shell else line)
        continued = shell and line.rstrip().endswith("\\")
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


def test_the_colab_notebooks_pretraining_warms_up_within_its_run():
    """Its pretrain() call, with its settings cell's defaults: the small preset's 10,000
    warm-up steps outlasted its 2,000-step run (the rate peaked at 5% of its value)."""
    import ast

    from keras_electra.pretraining.plan import warmup_note
    from keras_electra.settings import PretrainSettings

    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    names: dict = {"sys": __import__("sys"), "__builtins__": __builtins__}
    exec(next(s for s in sources if s.startswith("# Settings")), names)
    call = next(
        node
        for s in sources
        for node in ast.walk(ast.parse(_python_source({"source": [s]})))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "pretrain"
    )
    keywords = {
        k.arg: eval(compile(ast.Expression(k.value), "cell", "eval"), names) for k in call.keywords
    }
    keywords.pop("vocab")
    keywords.pop("log_every")
    keywords.pop("checkpoint_every")
    settings = PretrainSettings(corpus=["a.txt"], **keywords).resolved()
    assert (settings.steps, settings.warmup_steps) == (2000, 200)
    assert warmup_note(settings) is None


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


def test_the_notebook_runs_end_to_end_on_the_cpu_with_local_paths(tmp_path, monkeypatch):
    """Every cell executed in a real Jupyter kernel: prepare, pretrain, read the metrics,
    export, score. The settings cell's values are overridden by a cell after it, as a
    user edits the form: no bucket (local disk), the tiny preset, six steps."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    import os
    import sys

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    settings = next(i for i, c in enumerate(notebook.cells) if "BUCKET =" in c.source)
    overrides = (
        'BUCKET = ""\n'
        f"WORK = {str(tmp_path)!r}\n"
        f"CORPUS = {str(REPO / 'data' / 'sample' / 'shakespeare_valid.txt')!r}\n"
        'PRESET, STEPS, BATCH_SIZE, MAX_SEQ_LENGTH = "tiny", 6, 8, 32\n'
        'DATA, RUN_DIR = f"{WORK}/tfrecords", f"{WORK}/runs/electra"\n'
    )
    notebook.cells.insert(settings + 1, nbformat.v4.new_code_cell(overrides))
    # The kernel and its `!keras-electra` commands run from this environment.
    bin_dir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()

    def output(index: int) -> str:
        cell = notebook.cells[index]
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")

    texts = [output(i) for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
    everything = "\n".join(texts)
    assert "Wrote 8 shards" in everything
    assert "with 1 replicas" in everything  # one device here; a TPU runtime shows 8
    assert f"Exported {tmp_path / 'saved_models' / 'electra' / '1'}" in everything
    assert "replaced_prob" in texts[-1]  # the exported model scored the sentence
    lines = (tmp_path / "runs" / "electra" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["step"] == 6
