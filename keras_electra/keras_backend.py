"""The Keras backend keras-electra runs on: TensorFlow, chosen before Keras loads.

Keras 3 picks its backend once, when ``keras`` is first imported, from the
``KERAS_BACKEND`` environment variable (else ``~/.keras/keras.json``). keras-electra's
layers, training steps, compiled kernels and exports are TensorFlow code, so importing
``keras_electra`` sets ``KERAS_BACKEND=tensorflow`` while Keras is not loaded yet,
whatever the variable said (a shell that exports ``KERAS_BACKEND=jax`` for other work
still runs ``keras-electra`` commands). Keras already running another backend in this
process cannot be switched: that import fails with one sentence naming the fix.

Examples:
    >>> use_tensorflow()  # what ``import keras_electra`` did
    'tensorflow'
"""

from __future__ import annotations

import os
import sys

from keras_electra.errors import BackendError

VARIABLE = "KERAS_BACKEND"
REQUIRED = "tensorflow"


def use_tensorflow() -> str:
    """Make Keras run on TensorFlow: set ``KERAS_BACKEND`` before Keras loads, or check
    the backend Keras already runs.

    Returns:
        ``"tensorflow"``.

    Raises:
        BackendError: Keras was imported before keras-electra with another backend.
    """
    keras = sys.modules.get("keras")
    running = getattr(getattr(keras, "config", None), "backend", None)
    if keras is None or running is None:  # not loaded (or still loading): choose for it
        os.environ[VARIABLE] = REQUIRED
        return REQUIRED
    backend = running()
    if backend != REQUIRED:
        raise BackendError(
            f"keras-electra runs on Keras' TensorFlow backend, but Keras was imported first "
            f"with the '{backend}' backend; set KERAS_BACKEND=tensorflow (or import "
            "keras_electra before keras) in a new Python process."
        )
    return REQUIRED
