"""Connection (``connections.nodus.dev/v1``): where an external store is and which Secret holds its credentials.

A Connection holds no credential itself: it names a Secret in the same project (ADR-0013), which a Job
pins at admission like any other Secret. ``spec.type`` selects exactly one block:

* ``S3``: ``spec.s3`` = ``{endpoint, region, bucket, credentialsSecret}``; the Secret holds
  ``accessKeyID`` and ``secretAccessKey`` (and optionally ``sessionToken``). The endpoint is an https
  URL; plain http is accepted only for localhost and 127.0.0.1 (a local MinIO or moto), so that keys
  never cross a network in the clear. The agent reaches it for bucket inputs, so it must be a
  destination the server's policy allows (ADR 0032): never link-local, unspecified or the control
  plane, loopback only on a server started with ``--allow-loopback-endpoints``. Checked on create and
  when the endpoint changes, so that a stored Connection stays updatable after a policy change.
* ``Postgres``, ``Neon``, ``Supabase`` (all PostgreSQL): ``spec.postgres`` = ``{dsnSecret, dsnKey}``;
  the DSN is the Secret's value under ``dsnKey`` (default ``dsn``).

Connections have no status: nothing observes them until a Job uses one.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from nodus.api import objectmeta
from nodus.api.kinds import destinationrules
from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.destinations import Policy
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.connection import (
    _LOCAL_HOSTS,
    DEFAULT_DSN_KEY,
    POSTGRES_TYPES,
    ConnectionSpec,
)


def _endpoint_problems(endpoint: str, path: Path) -> list[FieldError]:
    parts = urlsplit(endpoint)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not host:
        return [fieldpath.invalid(path, endpoint, "must be an https URL, such as https://s3.us-east-1.amazonaws.com")]
    if parts.scheme == "http" and host not in _LOCAL_HOSTS:
        return [
            fieldpath.invalid(
                path,
                endpoint,
                "plain http is allowed only for localhost and 127.0.0.1; use https so that credentials are encrypted "
                "in transit",
            )
        ]
    return []


class ConnectionStrategy(Strategy):
    """A Connection is all spec; ``postgres.dsnKey`` defaults to ``dsn``. An S3 endpoint must be one the agent
    may reach under ``destinations`` (the server's policy; strict by default)."""

    def __init__(self, destinations: Policy | None = None) -> None:
        self.destinations = destinations or Policy()

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        _default(obj)

    def prepare_for_update(self, new: Object, old: Object) -> None:
        super().prepare_for_update(new, old)
        _default(new)

    def validate(self, obj: Object) -> list[FieldError]:
        return self._validate(obj, None)

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        return self._validate(new, old)

    def _validate(self, obj: Object, old: Object | None) -> list[FieldError]:
        spec, problems = validate_model(ConnectionSpec, obj.get("spec"), Path("spec"))
        if spec is None:
            return problems
        if spec.type == "S3":
            if spec.s3 is None:
                problems.append(
                    fieldpath.required(
                        Path("spec", "s3"), "type S3 needs spec.s3 with endpoint, bucket and credentialsSecret"
                    )
                )
            else:
                endpoint_path = Path("spec", "s3", "endpoint")
                scheme_problems = _endpoint_problems(spec.s3.endpoint, endpoint_path)
                problems += scheme_problems
                if not scheme_problems and (old is None or spec.s3.endpoint != _endpoint(old)):
                    problems += destinationrules.endpoint_rule(spec.s3.endpoint, self.destinations, endpoint_path)
                problems += objectmeta.validate_name(
                    spec.s3.credentials_secret, Path("spec", "s3", "credentialsSecret"), dns_label=False
                )
            if spec.postgres is not None:
                problems.append(
                    fieldpath.forbidden(
                        Path("spec", "postgres"),
                        "may only be set when type is Postgres, Neon or Supabase; remove it, or change spec.type",
                    )
                )
        else:
            if spec.postgres is None:
                problems.append(
                    fieldpath.required(Path("spec", "postgres"), f"type {spec.type} needs spec.postgres with dsnSecret")
                )
            else:
                problems += objectmeta.validate_name(
                    spec.postgres.dsn_secret, Path("spec", "postgres", "dsnSecret"), dns_label=False
                )
            if spec.s3 is not None:
                problems.append(
                    fieldpath.forbidden(
                        Path("spec", "s3"), "may only be set when type is S3; remove it, or change spec.type"
                    )
                )
        return problems


def _default(obj: Object) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("type") not in POSTGRES_TYPES:
        return
    postgres = spec.get("postgres")
    if isinstance(postgres, dict) and postgres.get("dsnKey") is None:
        postgres["dsnKey"] = DEFAULT_DSN_KEY


def _endpoint(obj: Object) -> object:
    return ((obj.get("spec") or {}).get("s3") or {}).get("endpoint")


def _type(obj: Object) -> str:
    return str((obj.get("spec") or {}).get("type") or "")


CONNECTION = KindInfo(
    kind="Connection",
    plural="connections",
    singular="connection",
    namespaced=True,
    description="Connection says where an external store is (S3, or PostgreSQL on Neon, Supabase or elsewhere) "
    "and names the Secret that holds its credentials.",
    spec_model=ConnectionSpec,
    status_model=None,
    strategy=ConnectionStrategy(),
    printer_columns=(
        PrinterColumn("Type", "string", ".spec.type", "Type is S3, Postgres, Neon or Supabase.", value=_type),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the connection was created."),
    ),
    short_names=("conn",),
    categories=("nodus",),
    has_status=False,
)
