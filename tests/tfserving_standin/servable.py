"""TF Serving's request semantics on top of :class:`SignatureRunner`.

:class:`ServedModel` answers the ``tensorflow.serving`` request protos
(``PredictRequest``, ``ClassificationRequest``, ``RegressionRequest``,
``GetModelMetadataRequest``, ``GetModelStatusRequest``) the way
``tensorflow_model_server`` does: the same model-spec resolution, the same
validation and the same error codes and messages (in substance). The
in-process gRPC and REST servers and the warmup replay in :mod:`.server` all
go through it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import numpy as np
import tensorflow as tf
from google.protobuf import any_pb2, text_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    input_pb2,
    model_pb2,
    predict_pb2,
    regression_pb2,
)

from keras_electra.serving.errors import ServingError
from keras_electra.serving.export_reader import DEFAULT_SIGNATURE
from keras_electra.serving.signatures import (
    CLASSIFY_INPUTS,
    CLASSIFY_METHOD_NAME,
    CLASSIFY_OUTPUT_CLASSES,
    CLASSIFY_OUTPUT_SCORES,
    REGRESS_INPUTS,
    REGRESS_METHOD_NAME,
    REGRESS_OUTPUTS,
)
from keras_electra.serving.tensors import (
    dtype_name,
    ndarray_to_tensor_proto,
    tensor_proto_to_ndarray,
)

from .runner import SignatureRunner

SIGNATURE_DEF_FIELD = "signature_def"


def find_versions(base_dir: str | os.PathLike[str]) -> dict[int, str]:
    """Lists a model's servable versions the way TF Serving's file-system source does.

    Args:
        base_dir: A model base path holding numeric version folders, or a
            SavedModel directory itself (then served as version 1).

    Returns:
        Version number to SavedModel directory.

    Raises:
        ServingError: If there is no SavedModel.

    Example:
        >>> find_versions("saved_models/electra")
        {1: 'saved_models/electra/1', 2: 'saved_models/electra/2'}
    """
    base = os.fspath(base_dir)
    if os.path.isfile(os.path.join(base, "saved_model.pb")):
        return {1: base}
    versions = {}
    if os.path.isdir(base):
        for entry in os.listdir(base):
            path = os.path.join(base, entry)
            if re.fullmatch(r"\d+", entry) and os.path.isfile(os.path.join(path, "saved_model.pb")):
                versions[int(entry)] = path
    if not versions:
        raise ServingError(
            f"No servable versions found under {base}: TF Serving expects numeric version "
            "folders (e.g. 1/) each holding a saved_model.pb."
        )
    return versions


class ServedModel:
    """One model name with its loaded version(s), answering TF Serving requests.

    Args:
        name: The model name clients use (``model_spec.name``).
        runners: Version number to loaded :class:`SignatureRunner`.
        version_labels: Optional label (e.g. ``"stable"``) to version map.
        method_name_check: Mirror of ``--enable_signature_method_name_check``
            (TF Serving's default is ``False``). When ``True``, Classify only
            accepts signatures whose method name is
            ``tensorflow/serving/classify``, and Regress only
            ``tensorflow/serving/regress``.

    Example:
        >>> model = ServedModel("electra", {1: SignatureRunner("saved_models/electra/1")})
        >>> response = model.predict(request)
    """

    def __init__(
        self,
        name: str,
        runners: Mapping[int, SignatureRunner],
        *,
        version_labels: Mapping[str, int] | None = None,
        method_name_check: bool = False,
    ) -> None:
        self.name = name
        self.runners = dict(runners)
        self.version_labels = dict(version_labels or {})
        self.method_name_check = method_name_check

    # -- model spec resolution -------------------------------------------------

    def resolve(self, spec: model_pb2.ModelSpec) -> tuple[int, SignatureRunner]:
        """Finds the servable a ``ModelSpec`` asks for (latest version by default).

        Raises:
            ServingError: ``NOT_FOUND`` for an unknown model or version,
                ``INVALID_ARGUMENT`` for an unknown version label.
        """
        if spec.name != self.name:
            raise ServingError(
                f"Servable not found for request: Latest({spec.name})", code="NOT_FOUND"
            )
        if spec.HasField("version"):
            version = spec.version.value
            if version not in self.runners:
                raise ServingError(
                    f"Servable not found for request: Specific({spec.name}, {version})",
                    code="NOT_FOUND",
                )
        elif spec.version_label:
            if spec.version_label not in self.version_labels:
                raise ServingError(
                    f"Unrecognized servable version label: {spec.version_label}",
                    code="INVALID_ARGUMENT",
                )
            version = self.version_labels[spec.version_label]
            if version not in self.runners:
                raise ServingError(
                    f"Servable not found for request: Specific({spec.name}, {version})",
                    code="NOT_FOUND",
                )
        else:
            version = max(self.runners)
        return version, self.runners[version]

    def _spec(self, version: int, signature_name: str) -> model_pb2.ModelSpec:
        spec = model_pb2.ModelSpec(name=self.name, signature_name=signature_name)
        spec.version.value = version
        return spec

    # -- Predict ------------------------------------------------------------------

    def predict(self, request: predict_pb2.PredictRequest) -> predict_pb2.PredictResponse:
        """Answers a ``PredictRequest`` like ``PredictionService.Predict``."""
        version, runner = self.resolve(request.model_spec)
        signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        runner.signature(signature_name)
        feeds = {}
        for alias, proto in request.inputs.items():
            try:
                feeds[alias] = tensor_proto_to_ndarray(proto)
            except (TypeError, ValueError) as err:
                raise ServingError(
                    f"tensor parsing error: {alias} ({err})", code="INVALID_ARGUMENT"
                ) from err
        outputs = runner.run(signature_name, feeds, output_filter=list(request.output_filter))
        response = predict_pb2.PredictResponse(model_spec=self._spec(version, signature_name))
        for alias, array in outputs.items():
            response.outputs[alias].CopyFrom(ndarray_to_tensor_proto(array))
        return response

    # -- Classify -----------------------------------------------------------------

    def classify(
        self, request: classification_pb2.ClassificationRequest
    ) -> classification_pb2.ClassificationResponse:
        """Answers a ``ClassificationRequest`` like ``PredictionService.Classify``."""
        version, runner = self.resolve(request.model_spec)
        signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        if signature_name not in runner.signatures:
            raise ServingError(
                f"No signature was found with the name: {signature_name}",
                code="INVALID_ARGUMENT",
            )
        signature = runner.signatures[signature_name]
        self._check_classify_signature(signature)
        examples = serialized_examples(request.input)
        outputs = runner.run(signature_name, {CLASSIFY_INPUTS: examples})
        classes = outputs.get(CLASSIFY_OUTPUT_CLASSES)
        scores = outputs.get(CLASSIFY_OUTPUT_SCORES)
        num_classes = 0
        for key, array in ((CLASSIFY_OUTPUT_CLASSES, classes), (CLASSIFY_OUTPUT_SCORES, scores)):
            if array is None:
                continue
            if array.ndim != 2:
                raise ServingError(
                    f"Expected Tensor shape: [batch_size num_classes] but got {list(array.shape)}",
                    code="INVALID_ARGUMENT",
                )
            if array.shape[0] != len(examples):
                raise ServingError(
                    f"Expected {key} output batch size of {len(examples)}. Got: {array.shape[0]}",
                    code="INVALID_ARGUMENT",
                )
            num_classes = array.shape[1]
        if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
            raise ServingError(
                "Tensors class and score should match in dim_size(1). "
                f"Got {classes.shape[1]} vs. {scores.shape[1]}",
                code="INVALID_ARGUMENT",
            )
        if scores is not None and scores.dtype != np.float32:
            raise ServingError(
                f"Expected scores Tensor of DT_FLOAT. Got: {scores.dtype}", code="INVALID_ARGUMENT"
            )
        response = classification_pb2.ClassificationResponse(
            model_spec=self._spec(version, signature_name)
        )
        for i in range(len(examples)):
            result = response.result.classifications.add()
            for c in range(num_classes):
                item = result.classes.add()
                if classes is not None:
                    item.label = bytes(classes[i, c]).decode("utf-8", "replace")
                if scores is not None:
                    item.score = float(scores[i, c])
        return response

    def _check_method_and_one_input(
        self, signature: object, kind: str, method_name: str
    ) -> tuple[object, object]:
        """The first two checks TF Serving's Classify and Regress share (with their
        messages): the signature's method name, then exactly one input tensor."""
        method = signature.method_name  # type: ignore[attr-defined]
        if self.method_name_check and method != method_name:
            raise ServingError(
                f"Expected {kind} signature method_name to be {method_name}. Was: {method}",
                code="INVALID_ARGUMENT",
            )
        inputs, outputs = signature.inputs, signature.outputs  # type: ignore[attr-defined]
        if len(inputs) != 1:
            raise ServingError("Expected one input Tensor.", code="INVALID_ARGUMENT")
        return inputs, outputs

    def _check_classify_signature(self, signature: object) -> None:
        inputs, outputs = self._check_method_and_one_input(
            signature, "classification", CLASSIFY_METHOD_NAME
        )
        if len(outputs) not in (1, 2):
            raise ServingError(
                f"Expected one or two output Tensors, found {len(outputs)}",
                code="INVALID_ARGUMENT",
            )
        if CLASSIFY_INPUTS not in inputs:
            raise ServingError(  # TF Serving goes on with the whole SignatureDef
                "No classification inputs found in SignatureDef: "
                f"{text_format.MessageToString(signature)}",  # type: ignore[arg-type]
                code="FAILED_PRECONDITION",
            )
        if CLASSIFY_OUTPUT_CLASSES not in outputs and CLASSIFY_OUTPUT_SCORES not in outputs:
            raise ServingError(
                'Expected classification signature outputs to contain at least one of "classes" '
                'or "scores".',
                code="FAILED_PRECONDITION",
            )

    # -- Regress ------------------------------------------------------------------

    def regress(
        self, request: regression_pb2.RegressionRequest
    ) -> regression_pb2.RegressionResponse:
        """Answers a ``RegressionRequest`` like ``PredictionService.Regress``
        (``servables/tensorflow/regressor.cc``): the signature is checked, the serialized
        examples fed to ``inputs`` and ``outputs`` (float32, ``[batch]`` or
        ``[batch, 1]``) read as one value per example."""
        version, runner = self.resolve(request.model_spec)
        signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        if signature_name not in runner.signatures:
            raise ServingError(
                f"No signature was found with the name: {signature_name}",
                code="INVALID_ARGUMENT",
            )
        self._check_regress_signature(runner.signatures[signature_name])
        examples = serialized_examples(request.input)
        outputs = runner.run(
            signature_name, {REGRESS_INPUTS: examples}, output_filter=[REGRESS_OUTPUTS]
        )
        values = outputs[REGRESS_OUTPUTS]
        if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
            shape = ",".join(str(size) for size in values.shape)
            raise ServingError(
                "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] "
                f"but got [{shape}]",
                code="INVALID_ARGUMENT",
            )
        if values.shape[0] != len(examples):
            raise ServingError(
                "Input batch size did not match output batch size: "
                f"{len(examples)} vs. {values.shape[0]}",
                code="INVALID_ARGUMENT",
            )
        if values.dtype != np.float32:
            raise ServingError(
                "Expected output Tensor of DT_FLOAT.  Got: "
                f"{dtype_name(tf.dtypes.as_dtype(values.dtype).as_datatype_enum)}",
                code="INVALID_ARGUMENT",
            )
        response = regression_pb2.RegressionResponse(model_spec=self._spec(version, signature_name))
        for value in values.reshape(-1):
            response.result.regressions.add(value=float(value))
        return response

    def _check_regress_signature(self, signature: object) -> None:
        """TF Serving's checks of a regression signature, with its messages (those for a
        missing input or output end with the SignatureDef's text, over several lines)."""
        inputs, outputs = self._check_method_and_one_input(
            signature, "regression", REGRESS_METHOD_NAME
        )
        if len(outputs) != 1:
            raise ServingError("Expected one output Tensor.", code="INVALID_ARGUMENT")
        for kind, found, key in (
            ("inputs", inputs, REGRESS_INPUTS),
            ("outputs", outputs, REGRESS_OUTPUTS),
        ):
            if key not in found:
                raise ServingError(
                    f"No regression {kind} found in SignatureDef: "
                    f"{text_format.MessageToString(signature)}",  # type: ignore[arg-type]
                    code="INVALID_ARGUMENT",
                )

    # -- Metadata and status ------------------------------------------------------

    def metadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        """Answers a ``GetModelMetadataRequest`` (only the ``signature_def`` field exists)."""
        if not request.metadata_field:
            raise ServingError(
                "GetModelMetadataRequest must specify at least one metadata_field",
                code="INVALID_ARGUMENT",
            )
        for field in request.metadata_field:
            if field != SIGNATURE_DEF_FIELD:
                raise ServingError(
                    f"Metadata field {field} is not supported", code="INVALID_ARGUMENT"
                )
        version, runner = self.resolve(request.model_spec)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for name, signature in runner.signatures.items():
            signature_map.signature_def[name].CopyFrom(signature)
        packed = any_pb2.Any()
        packed.Pack(signature_map)
        response = get_model_metadata_pb2.GetModelMetadataResponse(
            model_spec=self._spec(version, "")
        )
        response.model_spec.ClearField("signature_name")
        response.metadata[SIGNATURE_DEF_FIELD].CopyFrom(packed)
        return response

    def status(
        self, request: get_model_status_pb2.GetModelStatusRequest
    ) -> get_model_status_pb2.GetModelStatusResponse:
        """Answers a ``GetModelStatusRequest`` like ``ModelService.GetModelStatus``."""
        spec = request.model_spec
        if spec.name != self.name:
            raise ServingError(
                f"Could not find any versions of model {spec.name}", code="NOT_FOUND"
            )
        if spec.HasField("version") or spec.version_label:
            version, _ = self.resolve(spec)
            versions = [version]
        else:
            versions = sorted(self.runners, reverse=True)
        response = get_model_status_pb2.GetModelStatusResponse()
        for version in versions:
            status = response.model_version_status.add(
                version=version, state=get_model_status_pb2.ModelVersionStatus.AVAILABLE
            )
            status.status.error_message = ""
        return response


def serialized_examples(model_input: input_pb2.Input) -> np.ndarray:
    """Serializes a request's examples like TF Serving (context merged into each example).

    Args:
        model_input: An ``Input`` with ``example_list`` or ``example_list_with_context``.

    Returns:
        A 1-D object array of serialized ``tf.Example`` bytes.

    Raises:
        ServingError: ``INVALID_ARGUMENT`` if there are no examples.

    Example:
        >>> serialized_examples(request.input).shape
        (2,)
    """
    kind = model_input.WhichOneof("kind")
    if kind == "example_list":
        blobs = [example.SerializeToString() for example in model_input.example_list.examples]
    elif kind == "example_list_with_context":
        with_context = model_input.example_list_with_context
        context = with_context.context.SerializeToString()
        # Parsing concatenated messages merges them: example features win over context.
        blobs = [context + example.SerializeToString() for example in with_context.examples]
    else:
        blobs = []
    if not blobs:
        raise ServingError("Input is empty.", code="INVALID_ARGUMENT")
    array = np.empty(len(blobs), dtype=object)
    array[:] = blobs
    return array
