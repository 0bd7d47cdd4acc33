"""SavedModels with an in-graph tokenizer, for TF Serving 2.21.

An export is a folder ``saved_models/NAME/VERSION/`` holding one SavedModel with the
signatures ``serving_default`` (input ``text``) and ``score_pair`` (``text_a``,
``text_b``), whose outputs are listed in docs/serving.md. ``L`` is fixed (the model's
maximum sequence length) and outputs are dense, never ragged, so TF Serving's batching
can concatenate requests; the tokenizer is tf-text ops TF Serving links.
``assets.extra/`` holds the warmup requests, the run's ``config.json`` and ``vocab.txt``.

The version folder is written under a temporary non-numeric name and renamed
at the end, because TF Serving loads any numeric folder it sees.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError, ElectraError
from keras_electra.pretraining.loading import load_run
from keras_electra.run_directory import RunDirectory
from keras_electra.serving.signatures import set_signature_method_name
from keras_electra.serving.warmup import ASSETS_EXTRA, predict_log, write_warmup_requests

SIGNATURE_NAMES = ("serving_default", "score_pair")

WARMUP_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "To be, or not to be, that is the question.",
    "",
    "Ünïcödé, emoji 🙂 and 中文 text.",
)


class ReplacedTokenModule(tf.Module):
    """The discriminator with its tokenizer, as TF Serving signatures.

    Args:
        tokenizer: the run's tokenizer.
        discriminator: the discriminator ``ElectraBackbone``.
        head: the ``DiscriminatorHead``.
        max_length: the fixed sequence length ``L`` of every output.
    """

    def __init__(
        self,
        tokenizer: ElectraTokenizer,
        discriminator,
        head,
        max_length: int,
        name: str = "electra_replaced_token_detection",
    ):
        super().__init__(name=name)
        self.tokenizer = tokenizer
        self.discriminator = discriminator
        self.head = head
        self.max_length = max_length
        # The graph captures the tf.Variables inside Keras 3's variable wrappers;
        # TF Serving restores only variables in the SavedModel's object graph, so
        # track exactly those tf.Variables (tracking the wrappers would save a
        # second, unused copy and leave the captured ones uninitialized).
        self.model_variables = [v.value for v in [*discriminator.variables, *head.variables]]

    def _score(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        mask = inputs["padding_mask"]
        logits = self.head(self.discriminator(inputs, training=False))
        present = tf.cast(mask, tf.bool)
        return {
            "replaced_prob": tf.sigmoid(tf.cast(logits, tf.float32)) * tf.cast(mask, tf.float32),
            "tokens": tf.where(present, self.tokenizer.detokenize_ids(inputs["token_ids"]), ""),
            "token_ids": inputs["token_ids"],
            "num_tokens": tf.reduce_sum(mask, axis=1),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def serve(self, text):
        return self._score(encode_texts(self.tokenizer, text, max_length=self.max_length))

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string, name=n) for n in ("text_a", "text_b")],
        autograph=False,
    )
    def score_pair(self, text_a, text_b):
        tf.debugging.assert_equal(
            tf.shape(text_a),
            tf.shape(text_b),
            message="text_a and text_b must have the same length",
        )
        return self._score(encode_texts(self.tokenizer, text_a, text_b, max_length=self.max_length))

    @classmethod
    def from_run(cls, run_dir: str | Path, max_length: int | None = None) -> ReplacedTokenModule:
        """The module for a pretraining run's discriminator (latest checkpoint).

        Args:
            run_dir: a directory written by ``keras-electra pretrain`` (or an init
                directory from ``keras-electra convert``).
            max_length: ``L`` (default: the run's ``max_seq_length``).

        Raises:
            ConfigError: if the run has no replaced-token head (``--objective mlm``).
        """
        model, tokenizer, _ = load_run(run_dir)
        cls._check_run(model, run_dir)
        settings = RunDirectory(run_dir).settings()
        length = (
            max_length or settings.get("max_seq_length") or model.config.max_position_embeddings
        )
        return cls._from_model(model, tokenizer, length)

    @classmethod
    def _check_run(cls, model, run_dir: str | Path) -> None:
        if model.token_head is None:
            raise ConfigError(
                f"Run '{run_dir}' was trained with --objective mlm and has no replaced-token "
                "head to export; fine-tune it or pretrain with --objective electra."
            )

    @classmethod
    def _from_model(cls, model, tokenizer: ElectraTokenizer, length: int) -> ReplacedTokenModule:
        # A plain backbone with the discriminator's effective embeddings in every sharing mode.
        return cls(tokenizer, model.discriminator_backbone(), model.token_head, length)

    def signatures(self) -> dict:
        return {"serving_default": self.serve, "score_pair": self.score_pair}

    def warmup_records(self) -> list:
        texts = list(WARMUP_TEXTS)
        return [
            predict_log({"text": texts}, "serving_default"),
            predict_log({"text": texts[:1]}, "serving_default"),
            predict_log({"text_a": texts[:2], "text_b": texts[2:]}, "score_pair"),
        ]


def next_version(base: str | Path) -> int:
    """One more than the highest numeric version folder under ``base`` (1 if none)."""
    base = Path(base)
    found = base.iterdir() if base.is_dir() else ()
    return max((int(p.name) for p in found if p.is_dir() and p.name.isdigit()), default=0) + 1


def export_module(
    module: tf.Module,
    output: str | Path,
    *,
    version: int | None = None,
    extra_files: dict[str, str | Path] | None = None,
) -> Path:
    """Save ``module`` (with ``signatures()``/``warmup_records()``) as ``output/VERSION``.

    Signatures the module lists in ``method_names()`` get those TF Serving method names
    (``tf.saved_model.save`` writes predict only). Returns the version folder.

    Raises:
        ElectraError: if the version folder already exists.
    """
    base = Path(output)
    version = next_version(base) if version is None else int(version)
    if version <= 0:
        raise ConfigError(f"--version must be a positive integer, got {version}.")
    final = base / str(version)
    if final.exists():
        raise ElectraError(
            f"Export '{final}' already exists; pass another --version or remove it first."
        )
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".tmp-{version}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tf.saved_model.save(module, str(tmp), signatures=module.signatures())
        for name, method in getattr(module, "method_names", dict)().items():
            set_signature_method_name(tmp, name, method)
        write_warmup_requests(tmp, module.warmup_records())
        for name, path in (extra_files or {}).items():
            shutil.copy(path, tmp / ASSETS_EXTRA / name)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
