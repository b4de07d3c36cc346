"""Objects a fresh installation starts with (``nodus dev`` creates project ``default``)."""

from __future__ import annotations

import logging
from decimal import Decimal

from nodus.api import credits
from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.registry import API_VERSION
from nodus.api.store import GenericStore
from nodus.billing import ledger, money
from nodus.storage.objects import Storage

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


async def grant_initial_credits(projects: GenericStore, storage: Storage, name: str, amount: Decimal) -> None:
    """Grant ``name`` its starting credit once (``nodus dev``): the key names the project, so a restart
    grants nothing more."""
    context = RequestContext(principal=BOOTSTRAP, request_id="bootstrap", field_manager="nodus-bootstrap")
    posted = await ledger.grant(storage, name, amount, f"bootstrap:{name}", memo="starting credit of nodus dev")
    if not posted.replayed:
        log.info("granted project %s %s USD of starting credit", name, money.text(amount))
    await credits.show(projects, storage, name, context)
