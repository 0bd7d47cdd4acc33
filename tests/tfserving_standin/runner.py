"""Run a SavedModel's signatures exactly the way TensorFlow Serving does.

TF Serving loads a SavedModel with the TF1 C++ loader into a ``Session``, reads
the SignatureDefs from the MetaGraph, and runs a request by feeding and
fetching the tensor names the SignatureDef lists. :class:`SignatureRunner`
does the same from Python (``tf.compat.v1.saved_model.loader.load`` into a
session on its own graph), so a model that runs here runs on the server.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np
import tensorflow as tf

# TF Serving's binary has TF Text's ops built in, and keras-electra's exports tokenize
# with them: loading the library registers them here, whatever the process imported.
import tensorflow_text  # noqa: F401
from tensorflow.core.protobuf import error_codes_pb2, meta_graph_pb2

from keras_electra.serving.errors import ServingError
from keras_electra.serving.rest_client import NUMPY_DTYPES, as_array
from keras_electra.serving.signatures import SERVE_TAG
from keras_electra.serving.tensors import dtype_name


def _type_string(dtype_enum_name: str) -> str:
    """TensorFlow's short type name (``DataTypeString``), e.g. ``"float"``, ``"string"``."""
    return dtype_enum_name[3:].lower()


def _numpy_type_string(array: np.ndarray) -> str:
    if array.dtype.kind in "OUS":
        return "string"
    for name, np_type in NUMPY_DTYPES.items():
        if np_type is not object and array.dtype == np.dtype(np_type):
            return _type_string(name)
    return str(array.dtype)


def _shape_fits(shape: Sequence[int], info: meta_graph_pb2.TensorInfo) -> bool:
    if info.tensor_shape.unknown_rank:
        return True
    dims = [dim.size for dim in info.tensor_shape.dim]
    return len(dims) == len(shape) and all(d in (-1, s) for d, s in zip(dims, shape, strict=True))


def _error_code(err: tf.errors.OpError) -> str:
    try:
        return error_codes_pb2.Code.Name(err.error_code)
    except ValueError:
        return "UNKNOWN"


class SignatureRunner:
    """A SavedModel loaded like TF Serving loads it, ready to run signatures.

    Session use is serialized with a lock, so one runner can be shared by
    server threads.

    Args:
        export_dir: The SavedModel directory (holding ``saved_model.pb``).
        tags: The MetaGraph tag set to load; TF Serving uses ``{"serve"}``.
        session_config: An optional ``tf.compat.v1.ConfigProto``.

    Raises:
        ServingError: If the SavedModel cannot be loaded.

    Example:
        >>> with SignatureRunner("saved_models/electra/1") as runner:
        ...     outputs = runner.run("serving_default", {"text": ["the cat sat"]})
        >>> sorted(outputs)
        ['num_tokens', 'replaced_prob', 'token_ids', 'tokens']
    """

    def __init__(
        self,
        export_dir: str | os.PathLike[str],
        *,
        tags: Iterable[str] = (SERVE_TAG,),
        session_config: Any = None,
    ) -> None:
        self.export_dir = os.fspath(export_dir)
        self._lock = threading.Lock()
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph, config=session_config)
        try:
            with self._graph.as_default():
                self.meta_graph_def: meta_graph_pb2.MetaGraphDef = (
                    tf.compat.v1.saved_model.loader.load(self._session, list(tags), self.export_dir)
                )
        except (OSError, RuntimeError, ValueError, tf.errors.OpError) as err:
            self._session.close()
            raise ServingError(
                f"TF Serving could not load the SavedModel at {self.export_dir}: {err}"
            ) from err

    @property
    def signatures(self) -> Mapping[str, meta_graph_pb2.SignatureDef]:
        """The SignatureDefs of the loaded MetaGraph, by signature name."""
        return self.meta_graph_def.signature_def

    def signature(self, signature_name: str) -> meta_graph_pb2.SignatureDef:
        """Returns one SignatureDef.

        Args:
            signature_name: The signature's key, e.g. ``"serving_default"``.

        Raises:
            ServingError: (``FAILED_PRECONDITION``) if there is no such signature.

        Example:
            >>> runner.signature("serving_default").method_name
            'tensorflow/serving/predict'
        """
        if signature_name not in self.signatures:
            available = sorted(k for k in self.signatures if not k.startswith("__"))
            raise ServingError(
                f'Serving signature key "{signature_name}" not found; the SavedModel has '
                f"{available}.",
                code="FAILED_PRECONDITION",
            )
        return self.signatures[signature_name]

    def _feed(
        self, signature: meta_graph_pb2.SignatureDef, feeds: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        expected, given = sorted(signature.inputs), sorted(feeds)
        unknown = [alias for alias in given if alias not in signature.inputs]
        if len(expected) == len(given) and unknown:
            raise ServingError(
                f"input tensor alias not found in signature: {unknown[0]}. Inputs expected to "
                f"be in the set {{{','.join(expected)}}}.",
                code="INVALID_ARGUMENT",
            )
        if expected != given:
            missing = sorted(set(expected) - set(given))
            extra = sorted(set(given) - set(expected))
            raise ServingError(
                f"input size does not match signature: {len(given)}!={len(expected)} "
                f"len({{{','.join(given)}}}) != len({{{','.join(expected)}}}). "
                f"Sent extra: {{{','.join(extra)}}}. "
                f"Missing but required: {{{','.join(missing)}}}.",
                code="INVALID_ARGUMENT",
            )
        feed_dict: dict[str, np.ndarray] = {}
        for index, alias in enumerate(expected):
            info = signature.inputs[alias]
            if info.WhichOneof("encoding") != "name":
                raise ServingError(
                    f"Input '{alias}' is a composite tensor; TF Serving feeds only dense tensors.",
                    code="INVALID_ARGUMENT",
                )
            array = as_array(feeds[alias])
            want = dtype_name(info.dtype)
            got = _numpy_type_string(array)
            if got != _type_string(want):
                raise ServingError(
                    f"Expects arg[{index}] to be {_type_string(want)} but {got} is provided "
                    f"(input '{alias}').",
                    code="INVALID_ARGUMENT",
                )
            if want == "DT_STRING":
                array = _to_bytes_array(array, alias)
            if not _shape_fits(array.shape, info):
                dims = [d.size for d in info.tensor_shape.dim]
                raise ServingError(
                    f"Input '{alias}' has shape {list(array.shape)} but the signature "
                    f"expects {dims}.",
                    code="INVALID_ARGUMENT",
                )
            feed_dict[info.name] = array
        return feed_dict

    def run(
        self,
        signature_name: str,
        feeds: Mapping[str, Any],
        *,
        output_filter: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs one signature by feeding and fetching its SignatureDef tensor names.

        Inputs are checked as TF Serving checks them: the set of input names
        must equal the signature's, and each dtype must match exactly (no
        casting: a float64 array for a DT_FLOAT input is an error). ``str``
        values for string inputs are UTF-8 encoded.

        Args:
            signature_name: The signature key.
            feeds: Input alias to array-like.
            output_filter: Output aliases to fetch; all outputs if ``None``.

        Returns:
            Output alias to numpy array; strings are object arrays of ``bytes``.

        Raises:
            ServingError: With ``code`` ``FAILED_PRECONDITION`` for an unknown
                signature, ``INVALID_ARGUMENT`` for bad inputs, or the
                TensorFlow error's code if the graph fails.

        Example:
            >>> runner.run("score_pair", {"text_a": ["a b"], "text_b": ["c"]})["num_tokens"]
            array([3], dtype=int32)
        """
        signature = self.signature(signature_name)
        feed_dict = self._feed(signature, feeds)
        aliases = list(output_filter) if output_filter else sorted(signature.outputs)
        unknown = [alias for alias in aliases if alias not in signature.outputs]
        if unknown:
            raise ServingError(
                f"output tensor alias not found in signature: {unknown[0]} Outputs expected to "
                f"be in the set {{{','.join(sorted(signature.outputs))}}}.",
                code="INVALID_ARGUMENT",
            )
        fetches = {alias: signature.outputs[alias].name for alias in aliases}
        try:
            with self._lock:
                results = self._session.run(fetches, feed_dict)
        except tf.errors.OpError as err:
            raise ServingError(err.message, code=_error_code(err)) from err
        return {alias: np.asarray(value) for alias, value in results.items()}

    def close(self) -> None:
        """Closes the session."""
        self._session.close()

    def __enter__(self) -> SignatureRunner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _to_bytes_array(array: np.ndarray, alias: str) -> np.ndarray:
    out = np.empty(array.shape, dtype=object)
    for index, item in np.ndenumerate(array):
        if isinstance(item, str):
            out[index] = item.encode("utf-8")
        elif isinstance(item, bytes):
            out[index] = item
        else:
            raise ServingError(
                f"Input '{alias}' is a string tensor but holds a {type(item).__name__} value.",
                code="INVALID_ARGUMENT",
            )
    return out
