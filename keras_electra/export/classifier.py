"""SavedModels of fine-tuned classifiers and regressors, for TF Serving 2.21, and
:func:`finetuned_module`, which picks the module of any task (taggers:
:mod:`keras_electra.export.tagger`, QA models: :mod:`keras_electra.export.qa`).

Their signatures are in docs/serving.md; a regressor's ``regress`` (method
``tensorflow/serving/regress``) takes ``inputs`` (serialized ``tf.Example``) and returns
``outputs`` (float32 ``[-1, 1]``), for TF Serving's Regress API. ``assets.extra/`` keeps
``config.json``, ``vocab.txt``, ``finetune.json``, ``labels.txt`` and the warmup requests
(for every task).

Examples:
    >>> export("runs/sst2", "saved_models/sst2")  # doctest: +SKIP
    PosixPath('saved_models/sst2/1')
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    input_pb2,
    model_pb2,
    prediction_log_pb2,
    regression_pb2,
)

from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError
from keras_electra.export.qa import QuestionAnsweringModule
from keras_electra.export.saved_model import FinetunedModule
from keras_electra.export.tagger import TextTaggerModule
from keras_electra.finetuning.saved import FinetunedModel
from keras_electra.serving.signatures import CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME
from keras_electra.serving.tensors import make_example

CLASSIFIER_TASKS = ("classify", "regress")
EXPORTABLE_TASKS = ("classify", "regress", "tag", "qa")
WARMUP_TEXTS = ("A fine example sentence.", "", "Ünïcödé and emoji 🙂 text.")


class TextClassifierModule(FinetunedModule):
    """A fine-tuned classifier or regressor with its tokenizer, as TF Serving signatures.

    Args:
        finetuned: the loaded model (see :func:`keras_electra.finetuning.load_finetuned`).
        max_length: the fixed sequence length (default: the fine-tuning one).

    Examples:
        >>> module = TextClassifierModule(load_finetuned("runs/sst2"))  # doctest: +SKIP
        >>> module.serve(tf.constant(["great"]))["scores"].shape  # doctest: +SKIP
        TensorShape([1, 2])
    """

    def __init__(self, finetuned: FinetunedModel, max_length: int | None = None):
        settings = finetuned.settings
        if settings.task not in CLASSIFIER_TASKS:
            raise ConfigError(
                f"TextClassifierModule exports classify and regress models, not "
                f"'{settings.task}'; use export(), which picks the module for the task."
            )
        super().__init__("electra_text_classifier", finetuned, max_length)
        self.task = settings.task
        self.pair = settings.text_pair_column is not None
        self.labels = list(settings.labels)
        self.label_names = tf.constant(self.labels or [""], tf.string)
        self.serve = self.signature(self._serve, *(["text", "text_b"] if self.pair else ["text"]))
        self.from_examples = self.signature(self._from_examples, "inputs")

    def _outputs(self, text, text_b=None) -> dict[str, tf.Tensor]:
        inputs = encode_texts(self.tokenizer, text, text_b, max_length=self.max_length)
        logits = tf.cast(self.model(inputs, training=False), tf.float32)
        if self.task == "regress":
            return {"scores": logits}
        scores = tf.nn.softmax(logits, axis=-1)
        classes = tf.tile(self.label_names[None, :], [tf.shape(scores)[0], 1])
        return {"scores": scores, "classes": classes}

    def _serve(self, text, text_b=None):
        if text_b is not None:
            self.check_same_length(text, text_b, "text and text_b")
        return self._outputs(text, text_b)

    def _from_examples(self, inputs):
        spec = {"text": tf.io.FixedLenFeature([], tf.string)}
        if self.pair:
            spec["text_b"] = tf.io.FixedLenFeature([], tf.string)
        features = tf.io.parse_example(inputs, spec)
        outputs = self._outputs(features["text"], features.get("text_b"))
        if self.task == "regress":
            return {"outputs": outputs["scores"]}
        return outputs

    @property
    def example_signature(self) -> str:
        """Name of the tf.Example signature: ``classify`` or ``regress``."""
        return "regress" if self.task == "regress" else "classify"

    def signatures(self) -> dict:
        return {**super().signatures(), self.example_signature: self.from_examples}

    def method_names(self) -> dict[str, str]:
        method = REGRESS_METHOD_NAME if self.task == "regress" else CLASSIFY_METHOD_NAME
        return {self.example_signature: method}

    def warmup_feeds(self) -> dict[str, list[str]]:
        texts = list(WARMUP_TEXTS)
        return {"text": texts, **({"text_b": texts[1:] + texts[:1]} if self.pair else {})}

    def warmup_records(self) -> list:
        """The predict records, then one request through the tf.Example signature's own API
        (Classify or Regress), so that its first real call is warm too."""
        feeds = self.warmup_feeds()
        examples = [make_example({k: v[i] for k, v in feeds.items()}) for i in range(2)]
        spec = model_pb2.ModelSpec(signature_name=self.example_signature)
        batch = input_pb2.Input(example_list=input_pb2.ExampleList(examples=examples))
        if self.task == "regress":
            request = regression_pb2.RegressionRequest(model_spec=spec, input=batch)
            log = prediction_log_pb2.PredictionLog(
                regress_log=prediction_log_pb2.RegressLog(request=request)
            )
        else:
            request = classification_pb2.ClassificationRequest(model_spec=spec, input=batch)
            log = prediction_log_pb2.PredictionLog(
                classify_log=prediction_log_pb2.ClassifyLog(request=request)
            )
        return [*super().warmup_records(), log]


def finetuned_module(finetuned: FinetunedModel, max_length: int | None = None) -> tf.Module:
    """The serving module for a fine-tuned model's task (one of :data:`EXPORTABLE_TASKS`).

    Examples:
        >>> finetuned_module(load_finetuned("runs/ner")).name  # doctest: +SKIP
        'electra_tagger'
    """
    modules = {"tag": TextTaggerModule, "qa": QuestionAnsweringModule}
    return modules.get(finetuned.settings.task, TextClassifierModule)(finetuned, max_length)
