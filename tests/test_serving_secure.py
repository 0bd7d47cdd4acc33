"""The clients reach a TF Serving behind TLS and an authenticating proxy, and never leak
its credentials.

TF Serving has no authentication of its own; production puts it behind TLS and a proxy
that checks a credential. Here the TF Serving stand-in plays both on 127.0.0.1: its gRPC
server speaks TLS and refuses calls without the expected ``authorization`` metadata
(UNAUTHENTICATED), its REST server speaks HTTPS and answers 401 without the header, with
certificates this module makes with ``openssl`` (a CA, the server's certificate for
127.0.0.1, a client certificate for mutual TLS, a certificate for another name, another
CA). The clients succeed with the credentials and fail with one sentence without them;
they send credentials only over TLS (or when told ``insecure``), follow no redirect, say
which TLS check failed without retrying it, and no error or repr shows the token.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tensorflow as tf
import test_serving_clients
from doc_snippets import run_here, snippet
from test_serving_clients import TEXTS, _Discriminator
from tfserving_standin import ModelServer

from keras_electra.serving import client as serving_client
from keras_electra.serving.credentials import diagnose
from keras_electra.serving.errors import ServingError
from keras_electra.serving.grpc_client import GrpcClient
from keras_electra.serving.rest_client import RestClient

# The serving clients' tests' stand-in exports (a classifier among them), as a fixture here.
exports = test_serving_clients.exports

SECRET = "s3cret-token-4c1d"
REQUIRED = ("authorization", f"Bearer {SECRET}")

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make certs")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both CA-signed;
    a server certificate for another name only, and another CA (``other_pem``)."""
    d = tmp_path_factory.mktemp("pki")
    for name, subject in (("ca", "/CN=keras-electra test CA"), ("other", "/CN=another CA")):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.pem", "-days", "2", "-subj", subject, cwd=d)  # fmt: skip
    uses = {"server": "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
            "elsewhere": "subjectAltName=DNS:elsewhere.example\nextendedKeyUsage=serverAuth",
            "client": "extendedKeyUsage=clientAuth"}  # fmt: skip
    for name, extensions in uses.items():
        (d / f"{name}.ext").write_text(extensions + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                 "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return {p.stem + p.suffix.replace(".", "_"): p for p in d.iterdir()}


@pytest.fixture(scope="module")
def electra(tmp_path_factory) -> Path:
    """The clients' tests' small replaced-token SavedModel (its signatures are the export's)."""
    base = tmp_path_factory.mktemp("electra") / "electra"
    model = _Discriminator()
    signatures = {"serving_default": model.serve, "score_pair": model.score_pair}
    tf.saved_model.save(model, str(base / "1"), signatures=signatures)
    return base


def _server(electra, pki, *, mutual: bool = False, name: str = "server") -> ModelServer:
    tls = (pki[f"{name}_key"].read_bytes(), pki[f"{name}_pem"].read_bytes())
    return ModelServer(
        electra,
        "electra",
        tls=tls,
        client_ca=pki["ca_pem"].read_bytes() if mutual else None,
        required_header=REQUIRED,
    )


def _no_secret(error: BaseException | str) -> str:
    text = str(error)
    assert SECRET not in text and SECRET not in repr(error)
    assert len(text.strip().splitlines()) == 1, text
    return text


def test_grpc_over_tls_with_a_token_and_refused_without(electra, pki):
    calls = []

    def token() -> str:  # a token that expires is refreshed here, before each call
        calls.append(1)
        return SECRET

    with _server(electra, pki) as server:
        with GrpcClient(
            server.grpc_target, "electra", root_certificates=pki["ca_pem"], token=token
        ) as client:
            outputs = client.predict({"text": TEXTS})
            client.predict({"text": TEXTS[:1]})
            assert SECRET not in repr(client.credentials)
        assert outputs["num_tokens"].tolist() == [5, 2, 1]
        assert len(calls) == 2
        # Without the token: the proxy's UNAUTHENTICATED, one sentence naming the fix.
        with GrpcClient(server.grpc_target, "electra", root_certificates=pki["ca_pem"]) as bare:
            with pytest.raises(ServingError) as refused:
                bare.predict({"text": TEXTS})
        assert refused.value.code == "UNAUTHENTICATED"
        assert "pass the credentials" in _no_secret(refused.value)
        # Without the CA that signed the server: no TLS connection, one sentence.
        with GrpcClient(
            server.grpc_target, "electra", tls=True, token=SECRET, retries=0
        ) as untrusting:
            with pytest.raises(ServingError) as untrusted:
                untrusting.predict({"text": TEXTS})
        assert "root_certificates" in _no_secret(untrusted.value)


def test_https_rest_with_a_token_and_refused_without(electra, pki):
    with _server(electra, pki) as server:
        assert server.rest_url.startswith("https://")
        client = RestClient(
            server.rest_url, "electra", root_certificates=pki["ca_pem"], token=SECRET
        )
        assert client.predict({"text": TEXTS})["num_tokens"].tolist() == [5, 2, 1]
        assert SECRET not in repr(client.credentials)
        bare = RestClient(server.rest_url, "electra", root_certificates=pki["ca_pem"])
        with pytest.raises(ServingError) as refused:
            bare.predict({"text": TEXTS})
        assert refused.value.http_status == 401
        assert "pass the credentials" in _no_secret(refused.value)
        untrusting = RestClient(server.rest_url, "electra", token=SECRET, retries=0)
        with pytest.raises(ServingError) as untrusted:
            untrusting.predict({"text": TEXTS})
        assert "root_certificates" in _no_secret(untrusted.value)
    with pytest.raises(ServingError, match="not in the URL"):
        RestClient(f"https://user:{SECRET}@127.0.0.1:1", "electra")


def test_mutual_tls_needs_the_client_certificate(electra, pki):
    with _server(electra, pki, mutual=True) as server:
        mutual = dict(client_certificate=pki["client_pem"], client_key=pki["client_key"])
        with GrpcClient(
            server.grpc_target, "electra", root_certificates=pki["ca_pem"], token=SECRET, **mutual
        ) as client:
            assert client.predict({"text": TEXTS})["num_tokens"].tolist() == [5, 2, 1]
        rest = RestClient(
            server.rest_url, "electra", root_certificates=pki["ca_pem"], token=SECRET, **mutual
        )
        assert rest.predict({"text": TEXTS})["num_tokens"].tolist() == [5, 2, 1]
        anonymous = RestClient(
            server.rest_url, "electra", root_certificates=pki["ca_pem"], token=SECRET, retries=0
        )
        # Under TLS 1.3 the refusal comes after the handshake: as an alert on the first
        # read, or as a closed socket, depending on timing; both are one sentence.
        with pytest.raises(ServingError, match="client certificate") as refused:
            anonymous.predict({"text": TEXTS})
        assert "\n" not in str(refused.value) and SECRET not in str(refused.value)
        with GrpcClient(
            server.grpc_target, "electra", root_certificates=pki["ca_pem"], token=SECRET,
            retries=0,
        ) as anonymous_grpc:  # fmt: skip
            with pytest.raises(ServingError):
                anonymous_grpc.predict({"text": TEXTS})
    with pytest.raises(ServingError, match="both client_certificate and client_key"):
        GrpcClient("127.0.0.1:1", "electra", client_certificate=pki["client_pem"])


def test_keras_electra_score_reaches_an_https_server_with_a_token_file(
    electra,
    pki,
    tmp_path,
):
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    with _server(electra, pki) as server:
        for address in (server.rest_url, server.grpc_target):
            base = [sys.executable, "-m", "keras_electra.cli", "score", "--server", address,
                    "--root-certificates", str(pki["ca_pem"]), "--json", "a cat"]  # fmt: skip
            done = subprocess.run(
                [*base, "--token-file", str(token_file)], capture_output=True, text=True,
                timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            assert '"replaced_prob"' in done.stdout
            assert done.stderr == "", done.stderr  # no gRPC core log, no TensorFlow notice
            refused = subprocess.run(base, capture_output=True, text=True, timeout=300)
            assert refused.returncode == 2
            assert "pass the credentials" in _no_secret(refused.stderr.strip())


def test_a_token_file_holds_one_token_else_one_sentence(tmp_path, capsys):
    # Only the first line was read: a file of two tokens (or a token under a comment) sent
    # the first line and ignored the rest, and a blank first line read as an empty file.
    from keras_electra.cli import main
    from keras_electra.serving.credentials import read_token

    token_file = tmp_path / "token"
    for text in (SECRET, SECRET + "\n", SECRET + "\r\n", "\n\n  " + SECRET + "  \n\n"):
        token_file.write_text(text)
        assert read_token(token_file) == SECRET, repr(text)
    cases = [
        ("", "is empty; write the token in it."),
        ("\n \n", "is empty; write the token in it."),
        (f"{SECRET}\nsecond\n", "holds 2 lines of text, not one token; write the token alone"),
        (f"# staging\n{SECRET}\n\nthird", "holds 3 lines of text, not one token"),
    ]
    for text, said in cases:
        token_file.write_text(text)
        with pytest.raises(ServingError, match=f"^--token-file '{token_file}' {said}"):
            read_token(token_file)
        capsys.readouterr()
        args = ["score", "--server", "127.0.0.1:9", "--token-file", str(token_file), "a cat"]
        assert main(args) == 2  # refused before any connection
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and SECRET not in err, err


# -- headers: checked when the client is made, never shown --------------------------------

BAD_HEADERS = [
    # A key read from a file keeps its newline: REST raised "ValueError: Invalid header
    # value b'...\\n'" showing the key, gRPC "INTERNAL: Invalid metadata" naming nothing.
    ("X-Api-Key", SECRET + "\n", "The value of header 'X-Api-Key' holds a line break (a key "
     "read from a file keeps its newline: strip it)."),
    ("X-Api-Key", f"{SECRET}\r\nX-Other: 1", "The value of header 'X-Api-Key' holds a line break"),
    ("X-Api-Key", SECRET + "\x00", "The value of header 'X-Api-Key' holds a control character"),
    ("X-Api-Key", SECRET + "\u00e9", "The value of header 'X-Api-Key' holds a non-ASCII character"),
    ("X Api Key", SECRET, "The headers hold the header name 'X Api Key', which is not"),
    ("X-Api-Key:", SECRET, "The headers hold the header name 'X-Api-Key:', which is not"),
    ("", SECRET, "The headers hold a header name that is empty"),
]  # fmt: skip


def _hidden(error: BaseException, *logs: str) -> str:
    """``error``'s message, checked to be one sentence that shows the secret nowhere: not in
    its message, repr or traceback, nor in anything logged or printed meanwhile."""
    shown = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    for text in (shown, repr(error), *logs):
        assert SECRET not in text, text
    return _no_secret(error)


def test_a_header_that_cannot_be_sent_is_refused_when_the_client_is_made(
    pki, tmp_path, caplog, capfd
):
    key_file = tmp_path / "key.txt"
    key_file.write_text(SECRET + "\n")
    caplog.set_level(logging.DEBUG)
    clients = {
        "rest": lambda **kw: RestClient("https://localhost:8531", "electra", **kw),
        "grpc": lambda **kw: GrpcClient("localhost:8530", "electra", **kw),
    }
    for kind, make in clients.items():
        # The report's call, as written: the key read from its file.
        with pytest.raises(ServingError) as refused:
            make(root_certificates=pki["ca_pem"], headers={"X-Api-Key": open(key_file).read()})
        assert str(refused.value) == BAD_HEADERS[0][2]
        for name, value, said in BAD_HEADERS:
            with pytest.raises(ServingError) as refused:
                make(root_certificates=pki["ca_pem"], headers={name: value})
            message = _hidden(refused.value, caplog.text, *capfd.readouterr())
            assert message.startswith(said), (kind, message)
    with pytest.raises(ServingError, match="'grpc-timeout' is gRPC's own"):
        clients["grpc"](tls=True, headers={"grpc-timeout": "1S"})
    with pytest.raises(ServingError, match="not a dict of header names"):
        clients["rest"](headers=[("X-Api-Key", SECRET)])


def test_a_header_function_is_checked_at_each_call_and_nothing_is_sent(electra, pki, caplog):
    """Headers from a function are known only at the call: the same sentence then, before
    the request goes out; good headers, binary gRPC metadata among them, go through."""
    caplog.set_level(logging.DEBUG)
    with _server(electra, pki) as server:
        good = {"X-Api-Key": "a-key", "authorization": f"Bearer {SECRET}"}
        options = dict(root_certificates=pki["ca_pem"], retries=0)
        with GrpcClient(server.grpc_target, "electra", **options, headers=lambda: good) as grpc_:
            assert grpc_.predict({"text": TEXTS})["num_tokens"].tolist() == [5, 2, 1]
        binary = {"x-trace-bin": b"\x00\n\xff", "X-Api-Key": "a-key"}
        with GrpcClient(
            server.grpc_target, "electra", token=SECRET, headers=binary, **options
        ) as client:
            assert client.predict({"text": TEXTS})["num_tokens"].tolist() == [5, 2, 1]

        def from_a_file() -> dict[str, str]:
            return {"X-Api-Key": SECRET + "\n"}

        for client in (
            GrpcClient(server.grpc_target, "electra", headers=from_a_file, **options),
            RestClient(server.rest_url, "electra", headers=from_a_file, **options),
        ):
            with pytest.raises(ServingError, match="^The value of header 'X-Api-Key' holds a line"):
                client.status()
            assert "headers()" in repr(client.credentials)
            _hidden(ServingError("stand-in"), caplog.text, repr(client.credentials))


def test_a_client_certificate_and_key_that_are_not_a_pair_are_refused_at_once(
    electra, pki, monkeypatch, capfd
):
    """Was: REST raised ssl.SSLError (the command: "could not access (...); free space or fix
    the path"), and gRPC logged "Invalid private key" a dozen times, retried four times and
    said to check that the server is running."""
    from keras_electra.cli import main

    slept: list[float] = []
    monkeypatch.setattr(serving_client, "time", SimpleNamespace(sleep=slept.append))
    cases = [  # certificate, key, what is said besides naming both files
        (pki["server_pem"], pki["client_key"], "does not match the client key"),
        (pki["client_key"], pki["client_pem"], "the one holds a private key, the other a"),
    ]
    with _server(electra, pki, mutual=True) as server:
        for certificate, key, said in cases:
            options = dict(root_certificates=pki["ca_pem"], token=SECRET, retries=3)
            pair = dict(client_certificate=certificate, client_key=key)
            for make, where in ((GrpcClient, server.grpc_target), (RestClient, server.rest_url)):
                with pytest.raises(ServingError) as refused:
                    make(where, "electra", **options, **pair)
                message = _no_secret(refused.value)
                assert f"client certificate '{certificate}' does not match" in message
                assert f"client key '{key}'" in message and said in message
                assert "swapped?" in message
            for address in (server.rest_url, server.grpc_target):
                capfd.readouterr()
                command = ["score", "--server", address, "--root-certificates",
                           str(pki["ca_pem"]), "--client-certificate", str(certificate),
                           "--client-key", str(key), "a cat"]  # fmt: skip
                assert main(command) == 2
                err = capfd.readouterr().err
                assert err.count("\n") == 1 and "swapped?" in err and "free space" not in err, err
        as_pem = dict(client_certificate=pki["server_pem"].read_bytes(),
                      client_key=pki["client_key"].read_bytes())  # fmt: skip
        with pytest.raises(ServingError, match=r"^The client certificate \(given as PEM\) does"):
            RestClient(server.rest_url, "electra", root_certificates=pki["ca_pem"], **as_pem)
    assert slept == []  # nothing was retried


def test_a_grpc_client_at_the_wrong_kind_of_port_is_told_which_at_once(electra, pki, monkeypatch):
    """Plaintext gRPC at a TLS port (gRPC said "Socket closed") and TLS gRPC at the REST
    port's TLS ("missing selected ALPN property") were retried four times, then "check that
    the server is running"; each is one sentence naming the fix, at once."""
    slept: list[float] = []
    monkeypatch.setattr(serving_client, "time", SimpleNamespace(sleep=slept.append))
    with _server(electra, pki) as server:
        with GrpcClient(server.grpc_target, "electra", retries=3) as plaintext:
            with pytest.raises(ServingError) as tls_port:
                plaintext.status()
        at_rest = f"127.0.0.1:{server.rest_port}"
        with GrpcClient(at_rest, "electra", root_certificates=pki["ca_pem"], retries=3) as tls:
            with pytest.raises(ServingError) as rest_port:
                tls.status()
    assert "it speaks TLS: pass --tls or --root-certificates" in _no_secret(tls_port.value)
    message = _no_secret(rest_port.value)
    assert message.startswith(f"{at_rest} chose HTTP/1 over TLS (no h2 in ALPN), not gRPC")
    assert f"reach its REST API at https://{at_rest}" in message
    assert slept == []


def test_score_over_grpc_prints_only_its_own_line_when_tls_fails(electra, pki):
    """gRPC's core logged the failed handshake ("I1201 ... ssl_transport_security.cc ...
    Handshake failed with error SSL_ERROR_SSL ...") above the command's sentence."""
    environment = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    with _server(electra, pki) as server:
        command = [sys.executable, "-m", "keras_electra.cli", "score", "--server",
                   server.grpc_target, "--tls", "a cat"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 2
    assert done.stderr.startswith("keras-electra score: error: TLS to TF Serving at ")
    assert done.stderr.count("\n") == 1, done.stderr


# -- credentials only over TLS ----------------------------------------------------------


def test_plaintext_targets_refuse_credentials_unless_the_caller_opts_in(electra):
    """Like gRPC's call credentials on an insecure channel: a token or headers bound for a
    plaintext target are refused in one sentence, unless ``insecure=True``; a token with
    a trailing newline (as files and environments give it) goes out stripped."""
    with ModelServer(electra, "electra", required_header=REQUIRED) as server:
        clients = {
            "grpc": lambda **kw: GrpcClient(server.grpc_target, "electra", **kw),
            "rest": lambda **kw: RestClient(server.rest_url, "electra", **kw),
        }
        for make in clients.values():
            for credentials in ({"token": SECRET}, {"headers": {"x-api-key": SECRET}}):
                with pytest.raises(ServingError, match="would go to .* unencrypted") as refused:
                    make(**credentials)
                assert "insecure=True (--insecure)" in _no_secret(refused.value)
        with clients["grpc"](token=SECRET + "\n", insecure=True) as client:
            assert client.predict({"text": TEXTS})["num_tokens"].tolist() == [5, 2, 1]
        rest = clients["rest"](token=f"  {SECRET}\r\n", insecure=True)
        assert rest.predict({"text": TEXTS})["num_tokens"].tolist() == [5, 2, 1]
        with pytest.raises(ServingError, match="one word of printable ASCII") as inner:
            clients["rest"](token="s3cret token", insecure=True).status()
        _no_secret(inner.value)


def test_score_sends_the_environment_token_only_over_tls_or_with_insecure(
    electra, monkeypatch, capsys
):
    from keras_electra.cli import main

    monkeypatch.setenv("KERAS_ELECTRA_TOKEN", SECRET + "\n")
    with ModelServer(electra, "electra", required_header=REQUIRED) as server:
        for address in (server.grpc_target, server.rest_url):
            command = ["score", "--server", address, "--json", "a cat"]
            capsys.readouterr()
            assert main(command) == 2
            assert "--insecure" in _no_secret(capsys.readouterr().err.strip())
            assert main([*command, "--insecure"]) == 0  # the server got the stripped token
            assert '"replaced_prob"' in capsys.readouterr().out
        assert main(["score", "--server", server.rest_url, "--tls", "--insecure", "x"]) == 2
    error = _no_secret(capsys.readouterr().err.strip())
    assert "--tls asks for TLS but" in error and "plaintext http:// URL" in error


# -- no redirects -----------------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    """Records every request (method, path, headers) and answers 200 with ``{}``."""

    def _answer(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        location = getattr(self.server, "location", None)
        self.send_response(302 if location else 200)
        if location:
            self.send_header("Location", location + self.path)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@contextmanager
def _http_server(pki=None, location: str | None = None) -> Iterator[Any]:
    """An HTTP(S) server on 127.0.0.1 that records requests and, given ``location``,
    answers each with a 302 there."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen, server.location = [], location  # type: ignore[attr-defined]
    scheme = "http"
    if pki is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki["server_pem"], pki["server_key"])
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    server.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_redirect_to_plaintext_never_carries_the_token(pki, tmp_path, capsys):
    """An HTTPS server answering 302 with a plaintext server on another port: neither the
    client nor ``keras-electra score`` follows it (urllib's default would, resending the
    Authorization header in cleartext and turning the POST into a GET); one sentence
    names the Location."""
    from keras_electra.cli import main

    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    with _http_server() as plain, _http_server(pki, plain.url + "/elsewhere") as secure:
        client = RestClient(secure.url, "electra", root_certificates=pki["ca_pem"], token=SECRET)
        with pytest.raises(ServingError) as refused:
            client.status()
        message = _no_secret(refused.value)
        assert f"redirect (HTTP 302) to {plain.url}/elsewhere/v1/models/electra" in message
        assert refused.value.http_status == 302
        client.typed_outputs = False  # straight to the POST
        with pytest.raises(ServingError, match=r"/elsewhere/v1/models/electra:predict, which"):
            client.predict({"text": TEXTS})
        capsys.readouterr()
        command = ["score", "--server", secure.url, "--root-certificates", str(pki["ca_pem"]),
                   "--token-file", str(token_file), "a cat"]  # fmt: skip
        assert main(command) == 2
        error = _no_secret(capsys.readouterr().err.strip())
        assert f"to {plain.url}/elsewhere/v1/models/electra/metadata, which" in error
    assert plain.seen == []  # the plaintext server never saw a request, let alone the token
    methods = [method for method, _, _ in secure.seen]
    assert methods == ["GET", "POST", "GET"], methods  # one each: a redirect is not retried


# -- TLS failures: what failed, at once ----------------------------------------------------

TLS_FAILURES = {
    "wrong-ca": "its certificate is not signed by a CA this client trusts",
    "name-mismatch": "its certificate is not valid for the name '127.0.0.1'",
    "no-client-certificate": "the server requires a client certificate",
}


@pytest.mark.parametrize("case", sorted(TLS_FAILURES))
def test_each_tls_failure_says_what_failed_and_is_not_retried(case, electra, pki, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(serving_client, "time", SimpleNamespace(sleep=slept.append))
    root = pki["other_pem"] if case == "wrong-ca" else pki["ca_pem"]
    name = "elsewhere" if case == "name-mismatch" else "server"
    with _server(electra, pki, mutual=case == "no-client-certificate", name=name) as server:
        options = dict(root_certificates=root, token=SECRET, retries=3)
        with GrpcClient(server.grpc_target, "electra", **options) as client:
            with pytest.raises(ServingError) as grpc_error:
                client.predict({"text": TEXTS})
        with pytest.raises(ServingError) as rest_error:
            RestClient(server.rest_url, "electra", **options).predict({"text": TEXTS})
    for error, where in ((grpc_error.value, server.grpc_target), (rest_error.value, "https://")):
        message = _no_secret(error)
        assert message.startswith(f"TLS to TF Serving at {where}") and TLS_FAILURES[case] in message
        assert error.code == "UNAVAILABLE"
    assert slept == []  # no second attempt: waiting cannot fix a certificate


def test_transient_failures_of_a_tls_client_are_still_retried(electra, pki, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(serving_client, "time", SimpleNamespace(sleep=slept.append))
    with _server(electra, pki) as server:
        target, url = server.grpc_target, server.rest_url
    options = dict(root_certificates=pki["ca_pem"], token=SECRET, retries=2, timeout=5)
    with GrpcClient(target, "electra", **options) as client:  # nothing listens any more
        with pytest.raises(ServingError, match="after 3 attempts") as grpc_error:
            client.status()
    with pytest.raises(ServingError, match="after 3 attempts") as rest_error:
        RestClient(url, "electra", **options).status()
    _no_secret(grpc_error.value)
    _no_secret(rest_error.value)
    assert len(slept) == 4  # two waits for each client


def test_tls_to_localhost_names_the_certificate_failure_not_another_address(
    electra, pki, monkeypatch
):
    """The server listens on 127.0.0.1 only. Where ``localhost`` resolves to ``::1``
    first (nothing listens there: "Connection refused"), the certificate failure on
    127.0.0.1 is still what the client reports."""
    real = socket.getaddrinfo

    def ipv6_first(host, port, *args, **kwargs):
        found = real("127.0.0.1" if host == "localhost" else host, port, *args, **kwargs)
        if host != "localhost":
            return found
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)), *found]

    with _server(electra, pki) as server:
        with GrpcClient(f"localhost:{server.grpc_port}", "electra", tls=True, retries=0) as c:
            with pytest.raises(ServingError, match=TLS_FAILURES["wrong-ca"]):
                c.status()
        monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
        failure = diagnose("localhost", server.grpc_port, 5.0, root=pki["other_pem"])
        assert failure is not None and failure.startswith(TLS_FAILURES["wrong-ca"])
        url = f"https://localhost:{server.rest_port}"
        rest = RestClient(url, "electra", root_certificates=pki["other_pem"], token=SECRET)
        with pytest.raises(ServingError, match=TLS_FAILURES["wrong-ca"]) as rest_error:
            rest.status()
        assert "Connection refused" not in _no_secret(rest_error.value)


def test_a_client_reads_its_certificates_once_when_built(electra, pki, tmp_path):
    """The certificates are read when the client is built: a TLS failure is still told
    (here by the client's own handshake, gRPC saying only that the socket closed) once the
    files are gone."""
    root = tmp_path / "ca.pem"
    shutil.copy(pki["ca_pem"], root)
    with _server(electra, pki, mutual=True) as server:
        options = dict(root_certificates=root, token=SECRET, retries=0)
        with GrpcClient(server.grpc_target, "electra", **options) as client:
            rest = RestClient(server.rest_url, "electra", **options)
            root.unlink()
            for call in (client.status, rest.status):
                with pytest.raises(ServingError, match=TLS_FAILURES["no-client-certificate"]):
                    call()


# === The pages' Python for a secured server, as written ===

QUICKSTART_3 = "## 3. A server behind TLS, with a token, from Python"


def test_the_quickstarts_tls_snippet_classifies_with_the_environment_token(
    exports, pki, monkeypatch
):
    monkeypatch.setenv("KERAS_ELECTRA_TOKEN", SECRET)
    tls = (pki["server_key"].read_bytes(), pki["server_pem"].read_bytes())
    with ModelServer(exports["classifier"], "cls", tls=tls, required_header=REQUIRED) as server:
        printed = run_here(
            snippet("docs/quickstart.md", QUICKSTART_3),
            {
                '"models.example.com:443"': repr(server.grpc_target),
                '"https://models.example.com"': repr(server.rest_url),
                '"ca.pem"': repr(str(pki["ca_pem"])),
            },
        )
    classified, predicted = printed.strip().splitlines()
    assert "('positive'," in classified and "'scores'" in predicted, printed
    assert SECRET not in printed


def test_the_serving_readmes_tls_snippet_calls_with_a_token_source(electra, pki):
    with _server(electra, pki) as server:
        printed = run_here(
            snippet("serving/README.md", "## Exposing the server"),
            {
                '"serving.example.com:443"': repr(server.grpc_target),
                '"https://serving.example.com"': repr(server.rest_url),
                '"ca.pem"': repr(str(pki["ca_pem"])),
                '"client.pem"': repr(str(pki["client_pem"])),
                '"client.key"': repr(str(pki["client_key"])),
            },
            names={"my_token_source": lambda: SECRET, "key": "an-api-key"},
        )
    assert printed == ""  # it calls and builds; a refused call would raise
