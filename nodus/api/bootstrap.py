"""Objects a fresh installation starts with (``nodus dev`` creates project ``default``)."""

from __future__ import annotations

import logging

from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.registry import API_VERSION
from nodus.api.store import GenericStore

log = logging.getLogger(__name__)

BOOTSTRAP = Principal(user="system:nodus-bootstrap", groups=(ADMIN_GROUP,))


async def ensure_project(projects: GenericStore, name: str, display_name: str = "") -> None:
    """Create the project unless it exists. Idempotent; safe when several servers start at once."""
    context = RequestContext(principal=BOOTSTRAP, request_id="bootstrap", field_manager="nodus-bootstrap")
    body = {
        "apiVersion": API_VERSION,
        "kind": "Project",
        "metadata": {"name": name},
        "spec": {"displayName": display_name or name},
    }
    try:
        await projects.create(None, body, context)
        log.info("created project %s", name)
    except APIError as error:
        if error.reason != "AlreadyExists":
            raise
