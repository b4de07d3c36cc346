"""Reading kubeconfigs: tokens, embedded or referenced certificates, contexts."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
import yaml

from nodus.client import ClientConfig


def _write(path: Path, clusters: list[dict[str, object]], users: list[dict[str, object]], **extra: object) -> Path:
    contexts = [
        {"name": "one", "context": {"cluster": "c1", "user": "u1", "namespace": "team"}},
        {"name": "two", "context": {"cluster": "c2", "user": "u2"}},
    ]
    document: dict[str, object] = {"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users}
    document["contexts"] = contexts
    document.update(extra)
    path.write_text(yaml.safe_dump(document))
    return path


def test_current_context_with_token_and_embedded_ca(tmp_path: Path) -> None:
    ca = b"-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n"
    path = _write(
        tmp_path / "config",
        [
            {
                "name": "c1",
                "cluster": {"server": "https://a:6443/", "certificate-authority-data": base64.b64encode(ca).decode()},
            }
        ],
        [{"name": "u1", "user": {"token": "secret"}}],
        **{"current-context": "one"},
    )
    config = ClientConfig.from_kubeconfig(path)
    assert (config.server, config.token, config.namespace) == ("https://a:6443", "secret", "team")
    assert config.ca_file is not None
    written = Path(config.ca_file)
    assert written.read_bytes() == ca
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o700
    assert config.cert_file is None and config.key_file is None


def test_named_context_with_client_certificate_files_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    path = _write(
        tmp_path / "config",
        [{"name": "c2", "cluster": {"server": "https://b", "certificate-authority": "pki/ca.crt"}}],
        [
            {
                "name": "u2",
                "user": {
                    "client-certificate": "pki/me.crt",
                    "client-key-data": base64.b64encode(b"key").decode(),
                    "tokenFile": "token",
                },
            }
        ],
    )
    config = ClientConfig.from_kubeconfig(str(path), context="two")
    assert config.ca_file == str(tmp_path / "pki" / "ca.crt")
    assert config.cert_file == str(tmp_path / "pki" / "me.crt")
    assert config.key_file is not None and Path(config.key_file).read_bytes() == b"key"
    assert config.token == "from-file"
    assert config.namespace is None


@pytest.mark.parametrize(
    ("context", "message"),
    [
        pytest.param(None, "no current-context", id="no-current-context"),
        pytest.param("three", "no context named 'three'", id="unknown-context"),
        pytest.param("one", "no cluster named 'c1'", id="unknown-cluster"),
    ],
)
def test_unusable_kubeconfig(tmp_path: Path, context: str | None, message: str) -> None:
    path = _write(tmp_path / "config", [], [])
    with pytest.raises(ValueError, match=message):
        ClientConfig.from_kubeconfig(path, context=context)
