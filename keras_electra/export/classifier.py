"""SavedModels of fine-tuned models, for TF Serving 2.21; classifiers and regressors here.

A fine-tuned output directory of any task exports with an in-graph tokenizer:
:func:`keras_electra.export.export` picks the module for its task (taggers:
:mod:`keras_electra.export.tagger`, QA models: :mod:`keras_electra.export.qa`).

A classifier (``C`` classes) has ``serving_default`` (input ``text``, and ``text_b`` for
a pair model -> ``scores`` float32 ``[-1, C]``, ``classes`` DT_STRING ``[-1, C]``) and
``classify`` for TF Serving's Classify API: docs/serving.md. A regressor has
``serving_default`` (``text``, ``text_b`` -> ``scores`` float32 ``[-1, 1]``) and
``regress``, method ``tensorflow/serving/regress``: input ``inputs`` (serialized
``tf.Example``) -> ``outputs`` (float32 ``[-1, 1]``), for TF Serving's Regress API.

``assets.extra/`` keeps ``config.json``, ``vocab.txt``, ``finetune.json`` and
``labels.txt`` and the warmup requests (for every task).

Examples:
    >>> export("runs/sst2", "saved_models/sst2")  # doctest: +SKIP
    PosixPath('saved_models/sst2/1')
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, input_pb2, model_pb2, prediction_log_pb2

from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError
from keras_electra.export.qa import QuestionAnsweringModule
from keras_electra.export.tagger import TextTaggerModule
from keras_electra.finetuning.saved import FinetunedModel
from keras_electra.serving.signatures import CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME
from keras_electra.serving.tensors import make_example
from keras_electra.serving.warmup import predict_log

CLASSIFIER_TASKS = ("classify", "regress")
EXPORTABLE_TASKS = ("classify", "regress", "tag", "qa")
WARMUP_TEXTS = ("A fine example sentence.", "", "Ünïcödé and emoji 🙂 text.")


class TextClassifierModule(tf.Module):
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
        super().__init__(name="electra_text_classifier")
        settings = finetuned.settings
        if settings.task not in CLASSIFIER_TASKS:
            raise ConfigError(
                f"TextClassifierModule exports classify and regress models, not "
                f"'{settings.task}'; use export(), which picks the module for the task."
            )
        self.task = settings.task
        self.pair = settings.text_pair_column is not None
        self.tokenizer = finetuned.tokenizer
        self.model = finetuned.model
        self.max_length = int(max_length or settings.max_seq_length)
        self.labels = list(settings.labels)
        self.label_names = tf.constant(self.labels or [""], tf.string)
        # TF Serving restores only variables in the object graph: track the tf.Variables
        # the graph captures, not Keras 3's wrappers (see ReplacedTokenModule).
        self.model_variables = [v.value for v in finetuned.model.variables]

        names = ["text", "text_b"] if self.pair else ["text"]
        specs = [tf.TensorSpec([None], tf.string, name=n) for n in names]
        self.serve = tf.function(self._serve, input_signature=specs, autograph=False)
        example_spec = [tf.TensorSpec([None], tf.string, name="inputs")]
        self.from_examples = tf.function(
            self._from_examples, input_signature=example_spec, autograph=False
        )

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
            tf.debugging.assert_equal(
                tf.shape(text),
                tf.shape(text_b),
                message="text and text_b must have the same length",
            )
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
        return {"serving_default": self.serve, self.example_signature: self.from_examples}

    def method_names(self) -> dict[str, str]:
        """Method names to set after saving (``tf.saved_model.save`` writes predict only)."""
        method = REGRESS_METHOD_NAME if self.task == "regress" else CLASSIFY_METHOD_NAME
        return {self.example_signature: method}

    def warmup_records(self) -> list:
        texts = list(WARMUP_TEXTS)
        feeds = {"text": texts}
        if self.pair:
            feeds["text_b"] = texts[1:] + texts[:1]
        records = [predict_log(feeds), predict_log({k: v[:1] for k, v in feeds.items()})]
        if self.task == "classify":
            examples = [make_example({k: v[i] for k, v in feeds.items()}) for i in range(2)]
            request = classification_pb2.ClassificationRequest(
                model_spec=model_pb2.ModelSpec(signature_name="classify"),
                input=input_pb2.Input(example_list=input_pb2.ExampleList(examples=examples)),
            )
            log = prediction_log_pb2.ClassifyLog(request=request)
            records.append(prediction_log_pb2.PredictionLog(classify_log=log))
        return records


def finetuned_module(finetuned: FinetunedModel, max_length: int | None = None) -> tf.Module:
    """The serving module for a fine-tuned model's task (one of :data:`EXPORTABLE_TASKS`).

    Examples:
        >>> finetuned_module(load_finetuned("runs/ner")).name  # doctest: +SKIP
        'electra_tagger'
    """
    modules = {"tag": TextTaggerModule, "qa": QuestionAnsweringModule}
    return modules.get(finetuned.settings.task, TextClassifierModule)(finetuned, max_length)
