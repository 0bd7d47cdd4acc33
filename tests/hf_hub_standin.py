"""A Hugging Face Hub on 127.0.0.1 for the tests, laid out like the released repositories.

It answers what ``huggingface_hub`` asks: files under ``/ORG/NAME/resolve/REVISION/FILE``
(``REVISION`` ``main`` or a pull request's ``refs/pr/N``, URL-quoted) with the commit and
ETag headers it reads, the Hub's error codes for a missing repository, revision or file,
and the pull requests under ``/api/models/ORG/NAME/discussions``; :attr:`Hub.failing`
makes it answer an HTTP error for a file instead. Tests set ``HF_ENDPOINT`` to
:attr:`Hub.url`; :class:`FileServer` is a server that is not a Hub.
:func:`tf_weights_h5` writes a state dict the way transformers'
``TFElectraForPreTraining`` / ``TFElectraForMaskedLM`` saved ``tf_model.h5`` (its names
spelled out here, independently of the library's reader).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import io
import json
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

CONVERSION_TITLE = "Adding `safetensors` variant of this model"
CONVERSION_BOT = "SFconvertbot"


@dataclass
class Repo:
    """One model repository: its files by revision and its pull requests (``num``,
    ``title``, ``author``, ``status``; a pull request's files are ``refs/pr/NUM``'s)."""

    revisions: dict[str, dict[str, bytes]]
    pulls: list[dict] = field(default_factory=list)

    def commit(self, revision: str) -> str:
        """The revision's commit: a hash of its files."""
        digest = hashlib.sha1(revision.encode())
        for name, data in sorted(self.revisions[revision].items()):
            digest.update(name.encode() + hashlib.sha256(data).digest())
        return digest.hexdigest()


def conversion_pull(num: int, author: str = CONVERSION_BOT, status: str = "open") -> dict:
    """The Hub's safetensors conversion pull request ``num`` as the API lists it."""
    return {"num": num, "title": CONVERSION_TITLE, "author": author, "status": status}


class _Local(http.server.ThreadingHTTPServer):
    """A server on 127.0.0.1 at a free port, serving from a daemon thread."""

    def __init__(self, handler):
        super().__init__(("127.0.0.1", 0), handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class Hub(_Local):
    """The repositories ``repos`` (``ORG/NAME`` -> :class:`Repo`) served on 127.0.0.1 from
    a daemon thread; ``requests`` lists every path asked for (HEAD or GET), ``downloads``
    the paths of the files sent. ``failing`` maps ``ORG/NAME/FILE`` to an HTTP status
    answered for that file at every revision (a failing server: with ``Retry-After: 0``,
    so huggingface_hub's five retries take seconds, not its 23 s of backoff), and
    ``ORG/NAME/discussions`` to one answered for its list of pull requests."""

    def __init__(self, repos: dict[str, Repo]):
        self.repos, self.requests, self.downloads = repos, [], []
        self.failing: dict[str, int] = {}
        super().__init__(_Handler)

    @contextlib.contextmanager
    def answering(self, what: str, status: int):
        """``what`` (a ``failing`` key) answered with HTTP ``status`` inside the block."""
        self.failing[what] = status
        try:
            yield
        finally:
            del self.failing[what]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Hub

    def _answer(self, body: bool) -> None:
        self.server.requests.append(self.path)
        url = urlsplit(self.path)
        listing = re.fullmatch(r"/api/models/([^/]+/[^/]+)/discussions", url.path)
        if listing is not None:
            self._discussions(listing.group(1), parse_qs(url.query), body)
            return
        found = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", url.path)
        repo = self.server.repos.get(found.group(1)) if found else None
        if repo is None:
            self._missing("RepoNotFound")
            return
        revision, name = unquote(found.group(2)), unquote(found.group(3))
        status = self.server.failing.get(f"{found.group(1)}/{name}")
        if status is not None:
            self.send_response(status)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if revision not in repo.revisions:
            self._missing("RevisionNotFound")
            return
        data = repo.revisions[revision].get(name)
        if data is None:
            self._missing("EntryNotFound", repo.commit(revision))
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", repo.commit(revision))
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.server.downloads.append(self.path)
            self.wfile.write(data)

    def _discussions(self, repo_id: str, query: dict, body: bool) -> None:
        repo = self.server.repos.get(repo_id)
        if repo is None:
            self._missing("RepoNotFound")
            return
        failing = self.server.failing.get(f"{repo_id}/discussions")
        if failing is not None:
            self.send_response(failing)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status = query.get("status", ["all"])[0]
        wanted = [p for p in repo.pulls if status in ("all", p["status"])]
        listed = [
            {
                "num": p["num"],
                "title": p["title"],
                "author": {"name": p["author"]},
                "createdAt": "2023-05-01T00:00:00.000Z",
                "status": p["status"],
                "repo": {"name": repo_id, "type": "model"},
                "isPullRequest": True,
            }
            for p in sorted(wanted, key=lambda p: -p["num"])
        ]
        data = json.dumps({"discussions": listed, "count": len(listed), "start": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _missing(self, code: str, commit: str | None = None) -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", code)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self):  # noqa: N802 - http.server's names
        self._answer(body=False)

    def do_GET(self):  # noqa: N802
        self._answer(body=True)

    def log_message(self, *args):
        pass


class FileServer(_Local):
    """A plain file server on 127.0.0.1 (``http.server``'s own handler): it answers 200
    with the files under ``folder``, without a Hub's ``X-Repo-Commit`` and ``ETag``
    headers, as a wrong ``HF_ENDPOINT`` does."""

    def __init__(self, folder):
        super().__init__(functools.partial(_QuietFiles, directory=str(folder)))


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def tf_weights_h5(state: dict[str, np.ndarray], heads: int | None = None) -> bytes:
    """A PyTorch-named ELECTRA state dict as transformers' TF model saved it in
    ``tf_model.h5``: Keras' HDF5 weights layout (``layer_names``, a group per top layer
    with its ``weight_names``), the variables named from the model down
    (``tf_electra_for_pre_training/electra/encoder/layer_._0/.../kernel:0``), dense kernels
    ``[in, out]``, the generator's tied output projection not stored. With ``heads``, the
    attention's layers are saved split into that many heads, as ``EinsumDense`` saves them."""
    import h5py

    generator = any(k.startswith("generator_") for k in state)
    model = "tf_electra_for_masked_lm" if generator else "tf_electra_for_pre_training"
    layers: dict[str, list[tuple[str, np.ndarray]]] = {}
    for name, value in state.items():
        if name == "generator_lm_head.weight":
            continue  # tied to the word embeddings
        parts = name.split(".")
        leaf = parts.pop()
        path = "/".join(parts).replace("/layer/", "/layer_.", 1)
        path = re.sub(r"layer_\.(\d+)/", r"layer_._\1/", path)
        if parts[-1] == "LayerNorm":
            tf_leaf = {"weight": "gamma", "bias": "beta"}[leaf]
        elif parts[-1] in ("position_embeddings", "token_type_embeddings"):
            tf_leaf = "embeddings"  # keras.layers.Embedding's variable
        elif parts[-1] == "word_embeddings" or leaf == "bias":
            tf_leaf = leaf  # the embeddings' own "weight"; a bias
        else:
            tf_leaf, value = "kernel", value.T  # a Dense layer
        if heads and parts[-2:-1] == ["self"]:  # query, key, value: [in, heads, head_dim]
            value = value.reshape(value.shape[0], heads, -1) if tf_leaf == "kernel" else value
            value = value.reshape(heads, -1) if tf_leaf == "bias" else value
        elif heads and parts[-3:] == ["attention", "output", "dense"] and tf_leaf == "kernel":
            value = value.reshape(heads, -1, value.shape[-1])  # [heads, head_dim, out]
        layers.setdefault(parts[0], []).append((f"{model}/{path}/{tf_leaf}:0", value))
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f.attrs["layer_names"] = [n.encode() for n in layers]
        f.attrs["backend"], f.attrs["keras_version"] = b"tensorflow", b"2.3.0"
        for layer, weights in layers.items():
            group = f.create_group(layer)
            group.attrs["weight_names"] = [n.encode() for n, _ in weights]
            for weight_name, value in weights:
                group.create_dataset(weight_name, data=np.asarray(value, dtype="float32"))
    return buffer.getvalue()
