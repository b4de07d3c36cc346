"""An async client of ``nodus.dev/v1`` over HTTPS, for controllers, the node agent and the CLI.

Objects are plain JSON dicts (camelCase keys, as served). Errors are :class:`APIError` subclasses
built from the server's ``metav1.Status``; transport failures are ``httpx.TransportError``.
This package is an API client: it never imports ``nodus.api`` or ``nodus.storage``.

Beside the client, the machinery of long-running clients, after client-go's ``tools``: informers
(:mod:`nodus.client.informers`, list-watch caches with indexes and handlers), work queues
(:mod:`nodus.client.workqueue`) and leader election over a Lease (:mod:`nodus.client.leaderelection`).
The controllers and the node agent both build on them; reconcilers and their manager are the
controllers' own (:mod:`nodus.controllers.manager`).
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
