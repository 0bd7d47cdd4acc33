"""Peak memory of fine-tuning: ElectraClassifier (small preset, mixed_bfloat16, batch 32 x 128)
trained through OneGraphTraining ("ours") or Keras' own train function ("keras").

    python benchmarks/finetune_memory.py ours
    python benchmarks/finetune_memory.py keras

Prints one JSON line: peak RSS, RSS before fit, seconds per step over 10 steps, traces.
Run each mode in its own process (peak RSS is per process).
"""

import json
import resource
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from keras_electra.config import ElectraConfig
from keras_electra.finetuning import ElectraClassifier
from keras_electra.layers import ElectraBackbone
from keras_electra.training.precision import dtype_policy


def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in ("ours", "keras"):
        sys.exit("usage: python benchmarks/finetune_memory.py ours|keras")
    mode = sys.argv[1]
    config = ElectraConfig.from_preset("small", max_position_embeddings=128)
    keras.utils.set_random_seed(0)
    policy = dtype_policy("mixed_bfloat16")
    model = ElectraClassifier(ElectraBackbone(config, dtype=policy), num_classes=2, dtype=policy)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    if mode == "keras":
        from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

        TensorFlowTrainer.make_train_function(model)
    rng = np.random.default_rng(0)
    n = 32 * 8
    x = {
        "token_ids": rng.integers(5, config.vocab_size, (n, 128)).astype("int32"),
        "segment_ids": np.zeros((n, 128), "int32"),
        "padding_mask": np.ones((n, 128), "int32"),
    }
    y = rng.integers(0, 2, n).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    before = rss()
    model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)
    t0 = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=10, verbose=0)
    dt = (time.perf_counter() - t0) / 10
    traces = getattr(
        getattr(model.train_function, "on_iterator", None),
        "experimental_get_tracing_count",
        lambda: None,
    )()
    print(
        json.dumps(
            {
                "mode": mode,
                "peak_rss_mb": round(rss()),
                "before_fit_mb": round(before),
                "seconds_per_step": round(dt, 3),
                "traces": traces,
            }
        )
    )


if __name__ == "__main__":
    main()
