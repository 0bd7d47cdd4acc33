"""SavedModels with an in-graph tokenizer, for TF Serving 2.21: the modules' base
(:class:`ServingModule`), a pretraining run's (:class:`ReplacedTokenModule`, and an
Electric run's :class:`EnergyModule`) and :func:`export_module`, which saves any of them.

A pretraining run's export has the signatures ``serving_default`` (input ``text``) and
``score_pair`` (``text_a``, ``text_b``); their outputs, and an Electric run's, are in
docs/serving.md. ``L`` is fixed (the model's maximum
sequence length) and outputs are dense, never ragged, so TF Serving's batching can
concatenate requests; the tokenizer is tf-text ops TF Serving links. ``assets.extra/``
holds the warmup requests, the run's ``config.json`` and ``vocab.txt``.

The version folder is written under a temporary non-numeric name and renamed
at the end, because TF Serving loads any numeric folder it sees.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import tensorflow as tf

from keras_electra.atomic import check_writable
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError, ElectraError
from keras_electra.pretraining.loading import load_run
from keras_electra.pretraining.masking import candidate_mask
from keras_electra.pretraining.objectives.electric import sentence_scores
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


class ServingModule(tf.Module):
    """A model's variables and tokenizer, with the signatures TF Serving answers.

    A subclass sets ``serve`` (the ``serving_default`` function, made with
    :meth:`signature`) and :meth:`warmup_feeds`; it adds signatures in :meth:`signatures`
    and TF Serving method names in :meth:`method_names`.

    Args:
        name: the module's name.
        tokenizer: the model's tokenizer.
        max_length: the fixed sequence length ``L`` of every output.
        variables: the model's variables.
    """

    def __init__(self, name: str, tokenizer: ElectraTokenizer, max_length: int, variables):
        super().__init__(name=name)
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        # The graph captures the tf.Variables inside Keras 3's variable wrappers;
        # TF Serving restores only variables in the SavedModel's object graph, so
        # track exactly those tf.Variables (tracking the wrappers would save a
        # second, unused copy and leave the captured ones uninitialized).
        self.model_variables = [v.value for v in variables]

    @staticmethod
    def signature(function, *names: str):
        """``function`` as a graph function of string vectors ``[-1]`` named ``names``."""
        specs = [tf.TensorSpec([None], tf.string, name=n) for n in names]
        return tf.function(function, input_signature=specs, autograph=False)

    @staticmethod
    def check_same_length(a: tf.Tensor, b: tf.Tensor, names: str) -> None:
        """Fail the request unless ``a`` and ``b`` (``names``: "a and b") are as long."""
        message = f"{names} must have the same length"
        tf.debugging.assert_equal(tf.shape(a), tf.shape(b), message=message)

    def signatures(self) -> dict:
        return {"serving_default": self.serve}

    def method_names(self) -> dict[str, str]:
        """Method names to set after saving (``tf.saved_model.save`` writes predict only)."""
        return {}

    def warmup_feeds(self) -> dict[str, list[str]]:
        raise NotImplementedError

    def warmup_records(self) -> list:
        """Predict requests of every warm-up input, then of the first alone."""
        feeds = self.warmup_feeds()
        return [predict_log(feeds), predict_log({k: v[:1] for k, v in feeds.items()})]


class FinetunedModule(ServingModule):
    """The base of a fine-tuned model's module (:mod:`keras_electra.export.classifier`)."""

    def __init__(self, name: str, finetuned, max_length: int | None = None):
        length = max_length or finetuned.settings.max_seq_length
        super().__init__(name, finetuned.tokenizer, length, finetuned.model.variables)
        self.model = finetuned.model


class ReplacedTokenModule(ServingModule):
    """The discriminator with its tokenizer, as TF Serving signatures.

    Args:
        tokenizer: the run's tokenizer.
        discriminator: the discriminator ``ElectraBackbone``.
        head: the ``DiscriminatorHead``.
        max_length: the fixed sequence length ``L`` of every output.
        name: the module's name.
    """

    def __init__(
        self,
        tokenizer: ElectraTokenizer,
        discriminator,
        head,
        max_length: int,
        name: str = "electra_replaced_token_detection",
    ):
        variables = [*discriminator.variables, *head.variables]
        super().__init__(name, tokenizer, max_length, variables)
        self.discriminator = discriminator
        self.head = head
        self.serve = self.signature(self._serve, "text")
        self.score_pair = self.signature(self._score_pair, "text_a", "text_b")

    def _score(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        mask = inputs["padding_mask"]
        logits = tf.cast(self.head(self.discriminator(inputs, training=False)), tf.float32)
        tokens = self.tokenizer.detokenize_ids(inputs["token_ids"])
        return {
            **self._head_outputs(logits, inputs),
            "tokens": tf.where(tf.cast(mask, tf.bool), tokens, ""),
            "token_ids": inputs["token_ids"],
            "num_tokens": tf.reduce_sum(mask, axis=1),
        }

    def _head_outputs(self, logits: tf.Tensor, inputs: dict[str, tf.Tensor]) -> dict:
        return {"replaced_prob": tf.sigmoid(logits) * tf.cast(inputs["padding_mask"], tf.float32)}

    def _serve(self, text):
        return self._score(encode_texts(self.tokenizer, text, max_length=self.max_length))

    def _score_pair(self, text_a, text_b):
        self.check_same_length(text_a, text_b, "text_a and text_b")
        return self._score(encode_texts(self.tokenizer, text_a, text_b, max_length=self.max_length))

    @classmethod
    def from_run(cls, run_dir: str | Path, max_length: int | None = None) -> ReplacedTokenModule:
        """The module for a pretraining run's discriminator (latest checkpoint).

        Args:
            run_dir: a directory written by ``keras-electra pretrain`` (or an init
                directory from ``keras-electra convert``).
            max_length: ``L`` (default: the run's ``max_seq_length``; the position
                table's size where ``run.json`` has none).

        Raises:
            ConfigError: if the run has no replaced-token head (``--objective mlm``), or
                (:class:`EnergyModule`) was not pretrained with ``--objective electric``.
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
        return {**super().signatures(), "score_pair": self.score_pair}

    def warmup_feeds(self) -> dict[str, list[str]]:
        return {"text": list(WARMUP_TEXTS)}

    def warmup_records(self) -> list:
        texts = list(WARMUP_TEXTS)
        pair = predict_log({"text_a": texts[:2], "text_b": texts[2:]}, "score_pair")
        return [*super().warmup_records(), pair]


class EnergyModule(ReplacedTokenModule):
    """An Electric run's discriminator (``--objective electric``) with its tokenizer: the
    replaced-token module's signatures and warm-up, with ``energy`` and ``sentence_score``
    (docs/serving.md; ``[CLS]`` and ``[SEP]``, the ``special_ids``, left out of the score)
    for ``replaced_prob``. The export reader's kind for it is ``sentence_score``.

    Args:
        tokenizer: the run's tokenizer.
        discriminator: the discriminator ``ElectraBackbone``.
        head: the energy head (a ``DiscriminatorHead``).
        special_ids: the ids a sentence score leaves out (``[CLS]``, ``[SEP]``).
        max_length: the fixed sequence length ``L`` of every output.
    """

    def __init__(
        self,
        tokenizer: ElectraTokenizer,
        discriminator,
        head,
        special_ids: tuple[int, ...],
        max_length: int,
    ):
        super().__init__(tokenizer, discriminator, head, max_length, name="electric_energies")
        self.special_ids = tuple(int(i) for i in special_ids)

    def _head_outputs(self, logits: tf.Tensor, inputs: dict[str, tf.Tensor]) -> dict:
        mask = inputs["padding_mask"]
        scored = candidate_mask(inputs["token_ids"], mask, self.special_ids)
        energy = logits * tf.cast(mask, tf.float32)
        return {"energy": energy, "sentence_score": sentence_scores(logits, scored)}

    @classmethod
    def _check_run(cls, model, run_dir: str | Path) -> None:
        if model.objective != "electric":
            raise ConfigError(
                f"Run '{run_dir}' was pretrained with --objective {model.objective}, which "
                "gives no energies; export it as it is, or pretrain with --objective electric."
            )

    @classmethod
    def _from_model(cls, model, tokenizer: ElectraTokenizer, length: int) -> EnergyModule:
        specials = (model.config.cls_token_id, model.config.sep_token_id)
        return cls(tokenizer, model.discriminator_backbone(), model.token_head, specials, length)


def next_version(base: str | Path) -> int:
    """One more than the highest numeric version folder under ``base`` (1 if none)."""
    base = Path(base)
    found = base.iterdir() if base.is_dir() else ()
    return max((int(p.name) for p in found if p.is_dir() and p.name.isdigit()), default=0) + 1


def check_export_base(output: str | Path) -> None:
    """Refuse an export ``output`` that is not a model's base folder: a SavedModel (a
    version folder: the new version would be nested inside it, where TF Serving never
    looks) or a run directory.

    Raises:
        ConfigError: one sentence naming the folder to pass instead.
        StorageError: ``output`` cannot be written.
    """
    check_writable(output)  # a URL (gs://...) is left to the write
    base = Path(output)
    if (base / "saved_model.pb").is_file():
        raise ConfigError(
            f"--output '{base}' is an export's version folder (it holds saved_model.pb); pass "
            f"the model's base folder, '{base.parent}', and the next version is written there."
        )
    if RunDirectory(base).has_config():
        raise ConfigError(
            f"--output '{base}' holds a run or a fine-tuned model (config.json), not exports; "
            "pass a folder for the model's versions, such as saved_models/NAME."
        )


def served_kind(base: str | Path) -> tuple[str, Path] | None:
    """The kind (``replaced_token``, ``sentence_score``, ``classify``, ...) of the highest
    version under a model's base folder and that version's folder, read from its
    ``saved_model.pb`` alone (nothing is loaded); None without a version keras-electra
    reads (a URL, no versions, another program's export)."""
    from google.protobuf import json_format
    from tensorflow.core.protobuf import saved_model_pb2

    from keras_electra.serving.export_reader import export_reader, signature_defs_to_dict

    folder = Path(base)
    if "://" in str(base) or not folder.is_dir():
        return None
    versions = [
        p for p in folder.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file()
    ]
    if not versions:
        return None
    latest = max(versions, key=lambda p: int(p.name))
    model = saved_model_pb2.SavedModel()
    try:
        model.ParseFromString((latest / "saved_model.pb").read_bytes())
        graph = model.meta_graphs[0]
        signatures = json_format.MessageToDict(graph)["signatureDef"]
        return export_reader(signature_defs_to_dict(signatures)).kind, latest
    except Exception:  # noqa: BLE001 - unreadable or foreign: nothing to compare with
        return None


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

    The caller checks ``output`` with :func:`check_export_base` before it builds the
    module.

    Raises:
        ConfigError: ``version`` is not positive.
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
