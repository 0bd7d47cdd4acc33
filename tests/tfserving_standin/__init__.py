"""An in-process stand-in for ``tensorflow_model_server``, for tests and benchmarks.

The TF Serving binary cannot be installed here, so the tests load exports the
way the server does and serve them over real gRPC and HTTP on 127.0.0.1:

- :class:`SignatureRunner` (``runner.py``): TF Serving's loader semantics (the
  TF1 ``saved_model.loader`` in a session, fed and fetched by SignatureDef
  tensor names, with its input checks).
- :class:`ModelServer` (``server.py``): TF Serving's gRPC services and REST API
  (``_grpc_server.py``, ``_rest_server.py``, ``_rest_codec.py``) over
  :class:`~tfserving_standin.servable.ServedModel` (``servable.py``, request
  semantics and error codes).
- :func:`replay_warmup` (``server.py``): runs a SavedModel's warmup file the
  way the server does when it loads a version.

This is test code, not part of the ``keras_electra`` package: users run the
real server and call it with ``keras_electra.serving.GrpcClient`` or
``RestClient``. Tests import it as ``tfserving_standin`` (``tests/`` is on
``sys.path`` under pytest); ``benchmarks/serving_throughput.py`` puts
``tests/`` on ``sys.path`` itself.

Example:
    >>> from tfserving_standin import ModelServer
    >>> with ModelServer("saved_models/electra", "electra") as server:
    ...     print(server.grpc_target)
    127.0.0.1:...
"""

from .runner import SignatureRunner
from .server import ModelServer, replay_warmup

__all__ = ["ModelServer", "SignatureRunner", "replay_warmup"]
