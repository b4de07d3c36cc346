"""BootstrapToken (``bootstraptokens.nodus.dev/v1``, cluster-scoped): how a host earns its node credential.

The kubelet TLS-bootstrap pattern (ADR 0035). A bootstrap token is ``<id>.<secret>``: six and sixteen
characters of ``[a-z0-9]``, exactly as Kubernetes spells its bootstrap tokens. The object is named by
the id; the secret is written once, on create, as ``spec.secret`` and stored only as its SHA-256
(``spec.secretHash``), so neither a read of the object nor a copy of the database reveals a usable
token. A host presents the token to ``POST /apis/nodus.dev/v1/nodecredentials`` and gets its own
node credential in exchange; the token authenticates nothing else.

* ``spec.expiration`` ends it (default: 24 hours after creation; at most 30 days);
* ``spec.nodeName`` binds it to one node name (the simulated cloud issues one such token per host);
  without it, the host names its node when it joins;
* deleting the object revokes it; credentials already issued live on until they expire or their
  Node is deleted.

Only administrators and the controllers read or write BootstrapTokens. ``status`` records the last
use and the nodes that joined with the token; the API server writes it when a token is exchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import datetime, timedelta

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath, units
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.bootstraptoken import BootstrapTokenSpec, BootstrapTokenStatus

TOKEN_PATTERN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
ID_PATTERN = re.compile(r"^[a-z0-9]{6}$")
SECRET_PATTERN = re.compile(r"^[a-z0-9]{16}$")
DEFAULT_TTL = timedelta(hours=24)
MAX_TTL = timedelta(days=30)
# Nodes remembered in status.nodes: enough to audit a join token, bounded so the object stays small.
NODES_KEPT = 32


def secret_hash(secret: str) -> str:
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def matches(obj: Object, secret: str) -> bool:
    """Whether ``secret`` is the token's secret (constant time)."""
    stored = str((obj.get("spec") or {}).get("secretHash") or "")
    return bool(stored) and hmac.compare_digest(stored, secret_hash(secret))


def expiration(obj: Object) -> datetime | None:
    return units.time_or_none((obj.get("spec") or {}).get("expiration"))


class BootstrapTokenStrategy(Strategy):
    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        secret = spec.pop("secret", None)
        # A well-formed secret becomes its hash; a malformed one stays to be named by validation.
        if isinstance(secret, str) and SECRET_PATTERN.match(secret):
            spec["secretHash"] = secret_hash(secret)
        elif secret is not None:
            spec["secret"] = secret
        if not spec.get("expiration"):
            created = units.parse_time(obj["metadata"]["creationTimestamp"])
            spec["expiration"] = units.format_time(created + DEFAULT_TTL)

    def validate(self, obj: Object) -> list[FieldError]:
        spec = obj.get("spec")
        _, errors = validate_model(BootstrapTokenSpec, spec if spec is not None else {}, Path("spec"))
        name = str(obj["metadata"].get("name") or "")
        if not ID_PATTERN.match(name):
            errors.append(
                fieldpath.invalid(
                    Path("metadata", "name"),
                    name,
                    "must be the token id: 6 characters of [a-z0-9] (the part of the token before the dot)",
                )
            )
        if not isinstance(spec, dict):
            return errors
        if spec.get("secret") is not None:
            errors.append(fieldpath.invalid(Path("spec", "secret"), "<redacted>", "must be 16 characters of [a-z0-9]"))
        elif not spec.get("secretHash"):
            errors.append(
                fieldpath.required(
                    Path("spec", "secret"), "the token's secret: 16 characters of [a-z0-9] (nodus nodes join-token)"
                )
            )
        errors.extend(_expiration_errors(obj))
        return errors

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        errors = self.validate(new)
        if new.get("spec") != old.get("spec"):
            errors.append(
                fieldpath.forbidden(Path("spec"), "a bootstrap token cannot change; delete it and create another")
            )
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(BootstrapTokenStatus, obj.get("status") or {}, Path("status"))
        return errors


def _expiration_errors(obj: Object) -> list[FieldError]:
    text = (obj.get("spec") or {}).get("expiration")
    path = Path("spec", "expiration")
    try:
        when = units.parse_time(str(text))
    except ValueError:
        return [fieldpath.invalid(path, text, "must be an RFC 3339 time such as 2026-12-01T12:00:00Z")]
    created = units.time_or_none(obj["metadata"].get("creationTimestamp")) or units.now()
    if when - created > MAX_TTL:
        return [fieldpath.invalid(path, text, f"must be at most {units.format_duration(MAX_TTL)} after creation")]
    return []


def _expires(obj: Object) -> str:
    return str((obj.get("spec") or {}).get("expiration") or "")


def _node(obj: Object) -> str:
    return str((obj.get("spec") or {}).get("nodeName") or "<any>")


BOOTSTRAP_TOKEN = KindInfo(
    kind="BootstrapToken",
    plural="bootstraptokens",
    singular="bootstraptoken",
    namespaced=False,
    description="BootstrapToken lets a host join: exchanged once per host for the node's own credential, it "
    "authenticates nothing else. Named by the token id; only the secret's hash is stored.",
    spec_model=BootstrapTokenSpec,
    status_model=BootstrapTokenStatus,
    strategy=BootstrapTokenStrategy(),
    printer_columns=(
        PrinterColumn("Node", "string", ".spec.nodeName", "NodeName is the node the token may register.", value=_node),
        PrinterColumn("Expires", "string", ".spec.expiration", "Expiration ends the token.", value=_expires),
        PrinterColumn("Last-Used", "date", ".status.lastUsedTime", "LastUsedTime is the last exchange."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the token was created."),
        PrinterColumn("Description", "string", ".spec.description", "Description.", priority=1),
    ),
    short_names=("bt",),
    categories=(),
    verbs=("create", "delete", "deletecollection", "get", "list", "watch"),
    user_writable=False,
    cluster_readable=False,
)
