"""Front-proxy (requestheader) authentication, for serving behind kube-apiserver aggregation.

kube-apiserver forwards the user it authenticated in ``X-Remote-User``, ``X-Remote-Group`` and
``X-Remote-Extra-<key>`` headers, on a TLS connection where it presents its front-proxy client
certificate. Those headers are trusted only on such a connection: the TLS layer has verified the
certificate against ``--requestheader-client-ca-file``, and its common name must be one of
``--requestheader-allowed-names`` (any name when that list is empty, as in kube-apiserver).
Anyone else sending the headers is ignored (and, with no bearer token, gets 401).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from cryptography import x509
from cryptography.x509.oid import NameOID

from nodus.api.auth.principal import AUTHENTICATED_GROUP, Principal, claims_server_identity


@dataclass(frozen=True)
class RequestHeaderConfig:
    client_ca_file: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("x-remote-user",)
    group_headers: tuple[str, ...] = ("x-remote-group",)
    extra_header_prefixes: tuple[str, ...] = ("x-remote-extra-",)
    uid_headers: tuple[str, ...] = field(default=("x-remote-uid",))


def common_name(der: bytes) -> str | None:
    cert = x509.load_der_x509_certificate(der)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


def authenticate(
    config: RequestHeaderConfig, peer_certificate: bytes | None, headers: Sequence[tuple[bytes, bytes]]
) -> Principal | None:
    """The forwarded user, if the connection carries a verified front-proxy certificate."""
    if peer_certificate is None:
        return None
    name = common_name(peer_certificate)
    if config.allowed_names and name not in config.allowed_names:
        return None
    user = uid = ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    for raw_key, raw_value in headers:
        key, value = raw_key.decode("latin-1").lower(), raw_value.decode("latin-1")
        if key in config.username_headers and not user:
            user = value
        elif key in config.uid_headers and not uid:
            uid = value
        elif key in config.group_headers:
            groups.append(value)
        else:
            for prefix in config.extra_header_prefixes:
                if key.startswith(prefix):
                    extra.setdefault(unquote(key[len(prefix) :]), []).append(value)
    if not user or claims_server_identity(user, groups) is not None:
        return None  # node and bootstrap identities are the API server's to grant, never a proxy's
    if AUTHENTICATED_GROUP not in groups:
        groups.append(AUTHENTICATED_GROUP)
    return Principal(user=user, uid=uid, groups=tuple(groups), extra={k: tuple(v) for k, v in extra.items()})
