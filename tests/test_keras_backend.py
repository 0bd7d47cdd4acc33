"""keras-electra runs on Keras' TensorFlow backend: importing it chooses TensorFlow while Keras
is not loaded (whatever ``KERAS_BACKEND`` or ``keras.json`` say); Keras already running
another backend stops the import with one sentence naming the fix. Each case is a fresh
Python process, since Keras chooses its backend once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

BACKEND_SENTENCE = (
    "keras-electra runs on Keras' TensorFlow backend, but Keras was imported first with the "
    "'torch' backend; set KERAS_BACKEND=tensorflow (or import keras_electra before keras) "
    "in a new Python process."
)


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**environment, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_importing_keras_electra_first_chooses_tensorflow(tmp_path):
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "torch"}))
    code = "import keras_electra, keras; print(keras.config.backend())"
    for env in ({"KERAS_BACKEND": "jax"}, {"KERAS_HOME": str(tmp_path)}):
        done = _python(code, **env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["tensorflow"], (env, done.stdout)


def test_keras_already_on_another_backend_is_one_sentence():
    done = _python("import keras; import keras_electra", KERAS_BACKEND="torch")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"keras_electra.errors.BackendError: {BACKEND_SENTENCE}", done.stderr[-3000:]
