"""SignatureDef method names, the ``classify`` signature contract and the keys of TF
Serving's Classify and Regress APIs.

``tf.saved_model.save`` writes every signature with the method name
``tensorflow/serving/predict``, which TF Serving's Classify API accepts only without
``--enable_signature_method_name_check``; :func:`set_signature_method_name` rewrites it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from keras_electra import internals
from keras_electra.atomic import write_atomic
from keras_electra.serving.errors import ServingError

PREDICT_METHOD_NAME = "tensorflow/serving/predict"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"
SERVE_TAG = "serve"

# Keys TF Serving's Classify API requires (tensorflow/cc/saved_model/signature_constants.h).
CLASSIFY_INPUTS = "inputs"
CLASSIFY_OUTPUT_CLASSES = "classes"
CLASSIFY_OUTPUT_SCORES = "scores"
# Keys TF Serving's Regress API requires: one input, one float output.
REGRESS_INPUTS = "inputs"
REGRESS_OUTPUTS = "outputs"

_DT_STRING = 7
_DT_FLOAT = 1


def check_classify_signature(name: str, signature: meta_graph_pb2.SignatureDef) -> None:
    """Raises :class:`ServingError` unless the SignatureDef ``name`` has what TF Serving's
    Classify API needs: one input named ``inputs`` (serialized ``tf.Example`` strings), and
    outputs ``classes`` (DT_STRING) and/or ``scores`` (DT_FLOAT), ``[batch, num_classes]``."""
    problems = []
    inputs, outputs = signature.inputs, signature.outputs
    if list(inputs) != [CLASSIFY_INPUTS] or inputs[CLASSIFY_INPUTS].dtype != _DT_STRING:
        problems.append(f"one DT_STRING input named '{CLASSIFY_INPUTS}' (has {sorted(inputs)})")
    known = {CLASSIFY_OUTPUT_CLASSES: _DT_STRING, CLASSIFY_OUTPUT_SCORES: _DT_FLOAT}
    if not outputs or set(outputs) - set(known):
        problems.append(f"outputs 'classes' and/or 'scores' only (has {sorted(outputs)})")
    for key, dtype in known.items():
        if key in outputs and outputs[key].dtype != dtype:
            problems.append(f"output '{key}' of type {'DT_STRING' if dtype == 7 else 'DT_FLOAT'}")
    if problems:
        raise ServingError(
            f"Signature '{name}' cannot serve TF Serving's Classify API: it needs "
            f"{'; '.join(problems)}."
        )


def set_signature_method_name(
    export_dir: str | os.PathLike[str],
    signature_name: str,
    method_name: str = CLASSIFY_METHOD_NAME,
    *,
    tags: Iterable[str] = (SERVE_TAG,),
) -> None:
    """Rewrites one signature's method name in the SavedModel at ``export_dir`` (in the
    MetaGraph of ``tags``), and its fingerprint to match; the graph, variables and other
    signatures are untouched (``tf.saved_model.load`` ignores method names). For
    :data:`CLASSIFY_METHOD_NAME` the signature is checked with
    :func:`check_classify_signature`; a missing MetaGraph or signature is a
    :class:`ServingError`.

    Examples:
        >>> signatures = {"classify": module.classify, ...}  # doctest: +SKIP
        >>> tf.saved_model.save(module, "out/1", signatures=signatures)  # doctest: +SKIP
        >>> set_signature_method_name("out/1", "classify", CLASSIFY_METHOD_NAME)  # doctest: +SKIP
    """
    path = os.path.join(os.fspath(export_dir), "saved_model.pb")
    saved_model = saved_model_pb2.SavedModel()
    try:
        with open(path, "rb") as handle:
            saved_model.ParseFromString(handle.read())
    except OSError as err:
        raise ServingError(f"Cannot read the SavedModel at {path}: {err.strerror}.") from err
    wanted = set(tags)
    graphs = [g for g in saved_model.meta_graphs if set(g.meta_info_def.tags) == wanted]
    if not graphs:
        raise ServingError(
            f"The SavedModel at {export_dir} has no MetaGraph tagged {sorted(wanted)}."
        )
    for graph in graphs:
        if signature_name not in graph.signature_def:
            raise ServingError(
                f"The SavedModel at {export_dir} has no signature '{signature_name}' "
                f"(it has {sorted(graph.signature_def)})."
            )
        signature = graph.signature_def[signature_name]
        if method_name == CLASSIFY_METHOD_NAME:
            check_classify_signature(signature_name, signature)
        signature.method_name = method_name
    write_atomic(path, saved_model.SerializeToString())
    if os.path.exists(os.path.join(os.fspath(export_dir), "fingerprint.pb")):  # for metrics only
        internals.write_saved_model_fingerprint(os.fspath(export_dir))
