"""API errors: every non-2xx response is a ``metav1.Status`` with a registered reason.

The body adds three top-level extensions that Kubernetes clients ignore: ``docs`` (a page this
server serves for the reason), ``fix`` (what to do next) and ``requestId`` (also in the
``X-Request-Id`` header and the server log). A 500 never carries a stack trace.
"""

from __future__ import annotations

from typing import Any

from nodus.api.reasons import reason
from nodus.apimachinery.fieldpath import FieldError


class APIError(Exception):
    """An error with its HTTP status and registered reason; rendered by :func:`status_body`."""

    def __init__(
        self,
        reason_code: str,
        message: str,
        *,
        fix: str | None = None,
        details: dict[str, Any] | None = None,
        code: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        registered = reason(reason_code)
        self.reason = reason_code
        self.code = code or registered.http_status
        self.message = message
        self.fix = fix or registered.fix
        self.details = details
        self.headers = headers or {}

    def status_body(self, request_id: str, docs_base: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": _wire_reason(self.reason),
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        body["docs"] = f"{docs_base}/docs/reasons/{self.reason}"
        body["fix"] = self.fix
        body["requestId"] = request_id
        return body


def _wire_reason(code: str) -> str:
    # Kubernetes clients branch on metav1.StatusReason; codes that refine a standard reason are sent
    # as that reason so `kubectl` reacts as it would to kube-apiserver (the docs link keeps the detail).
    return {"FieldManagerConflict": "Conflict", "TooLargeResourceVersion": "Timeout"}.get(code, code)


def resource_name(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> APIError:
    return APIError(
        "NotFound",
        f'{resource_name(plural, group)} "{name}" not found',
        details={"name": name, "group": group, "kind": plural},
    )


def already_exists(plural: str, group: str, name: str) -> APIError:
    return APIError(
        "AlreadyExists",
        f'{resource_name(plural, group)} "{name}" already exists',
        details={"name": name, "group": group, "kind": plural},
    )


def conflict(plural: str, group: str, name: str, why: str | None = None) -> APIError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return APIError(
        "Conflict",
        f'Operation cannot be fulfilled on {resource_name(plural, group)} "{name}": {why}',
        details={"name": name, "group": group, "kind": plural},
    )


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> APIError:
    messages = [f"{e.field}: {e.message()}" for e in errors]
    joined = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    fields = ", ".join(dict.fromkeys(e.field for e in errors))
    return APIError(
        "Invalid",
        f'{kind}.{group} "{name}" is invalid: {joined}',
        fix=f"Fix {fields}; `kubectl explain {kind.lower()}s.{fields.split(', ')[0].split('[')[0]}` describes it.",
        details={
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": e.type.value, "message": e.message(), "field": e.field} for e in errors],
        },
    )


def bad_request(message: str, fix: str | None = None) -> APIError:
    return APIError("BadRequest", message, fix=fix)


def method_not_allowed(verb: str, plural: str) -> APIError:
    return APIError(
        "MethodNotAllowed", f"the server does not allow this method on the requested resource: {verb} {plural}"
    )


def expired(message: str) -> APIError:
    return APIError("Expired", message)


def internal(request_id: str) -> APIError:
    return APIError(
        "InternalError",
        f"Internal error occurred: the server could not complete the request (request id {request_id})",
    )
