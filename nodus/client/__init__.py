"""An async client of ``nodus.dev/v1`` over HTTPS, for controllers, the node agent and the CLI.

Objects are plain JSON dicts (camelCase keys, as served). Errors are :class:`APIError` subclasses
built from the server's ``metav1.Status``; transport failures are ``httpx.TransportError``.
This package is an API client: it never imports ``nodus.api`` or ``nodus.storage``.
"""

from nodus.client.config import ClientConfig
from nodus.client.errors import (
    AlreadyExists,
    APIError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    Unauthorized,
)
from nodus.client.rest import API_PREFIX, Client, Object
from nodus.client.watching import WatchEvent

__all__ = [
    "API_PREFIX",
    "APIError",
    "AlreadyExists",
    "Client",
    "ClientConfig",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "Object",
    "Unauthorized",
    "WatchEvent",
]
