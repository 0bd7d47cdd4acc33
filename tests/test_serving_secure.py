"""The clients reach a TF Serving behind TLS and an authenticating proxy.

TF Serving has no authentication of its own; production puts it behind TLS and a proxy
that checks a credential. Here the TF Serving stand-in plays both on 127.0.0.1: its gRPC
server speaks TLS and refuses calls without the expected ``authorization`` metadata
(UNAUTHENTICATED), its REST server speaks HTTPS and answers 401 without the header, with
certificates this module makes with ``openssl`` (a CA, the server's certificate for
127.0.0.1, a client certificate for mutual TLS). The clients succeed with the
credentials and fail with one sentence without them, and no error or repr shows the
token.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from test_serving_clients import TEXTS, _Discriminator
from tfserving_standin import ModelServer

from keras_electra.serving.errors import ServingError
from keras_electra.serving.grpc_client import GrpcClient
from keras_electra.serving.rest_client import RestClient

SECRET = "s3cret-token-4c1d"
REQUIRED = ("authorization", f"Bearer {SECRET}")

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make certs")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both CA-signed."""
    d = tmp_path_factory.mktemp("pki")
    subject = "/CN=keras-electra test CA"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "2", "-subj", subject, cwd=d)  # fmt: skip
    uses = {"server": "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
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


def _server(electra, pki, *, mutual: bool = False) -> ModelServer:
    tls = (pki["server_key"].read_bytes(), pki["server_pem"].read_bytes())
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
            refused = subprocess.run(base, capture_output=True, text=True, timeout=300)
            assert refused.returncode == 2
            assert "pass the credentials" in _no_secret(refused.stderr.strip())
