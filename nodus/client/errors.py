"""Errors of the API, parsed from the ``metav1.Status`` body of every non-2xx response.

The class says what a caller usually branches on: :class:`NotFound` (404), :class:`AlreadyExists`
(409 ``AlreadyExists``: a create hit an existing name), :class:`Conflict` (any other 409: a stale
``resourceVersion`` or a server-side apply conflict), :class:`Gone` (410 ``Expired``: list again and
watch from the new list's resourceVersion). Every error keeps the full Status in ``body``.
"""

from __future__ import annotations

from typing import Any

import orjson


class APIError(Exception):
    """A non-2xx response (or a watch ``ERROR`` event) from the API server."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body: dict[str, Any] = body if body is not None else {}

    @property
    def causes(self) -> list[dict[str, Any]]:
        """``details.causes`` of the Status: per-field validation errors, apply conflicts."""
        details = self.body.get("details")
        causes = details.get("causes") if isinstance(details, dict) else None
        return [c for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []


class Unauthorized(APIError):
    """401: no or unknown credentials."""


class Forbidden(APIError):
    """403: the caller may not do this."""


class NotFound(APIError):
    """404: the object (or the kind, or the project) does not exist."""


class Conflict(APIError):
    """409 other than AlreadyExists: the object changed since it was read (stale resourceVersion)."""


class AlreadyExists(APIError):
    """409 ``AlreadyExists``: an object of that name exists."""


class Gone(APIError):
    """410 ``Expired``: the resourceVersion or continue token is older than the watch log."""


class Invalid(APIError):
    """422 ``Invalid``: see :attr:`APIError.causes` for the fields."""


_BY_STATUS: dict[int, type[APIError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
}


def from_status(status: dict[str, Any], http_status: int | None = None) -> APIError:
    """The error for a ``metav1.Status`` object (a response body or a watch ERROR event)."""
    code = http_status
    if code is None:
        declared = status.get("code")
        code = declared if isinstance(declared, int) and declared > 0 else 500
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "")
    cls = AlreadyExists if code == 409 and reason == "AlreadyExists" else _BY_STATUS.get(code, APIError)
    return cls(code, reason, message, status)


def from_response(http_status: int, reason_phrase: str, content: bytes) -> APIError:
    """The error for an HTTP response with status >= 400, Status body or not."""
    try:
        body = orjson.loads(content) if content else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return from_status(body, http_status)
    text = content.decode("utf-8", "replace").strip()
    status = {"kind": "Status", "status": "Failure", "code": http_status, "reason": reason_phrase, "message": text}
    return from_status(status, http_status)
