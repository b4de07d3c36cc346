"""Join tokens for the hosts the controllers boot: one BootstrapToken per host, bound to its node name.

A provider hands each new host a bootstrap token (ADR 0035); the host's agent exchanges it for its own
node credential. The token is:

* named deterministically from the Node's uid (:func:`token_id`), so a retried boot replaces the
  previous attempt's token rather than leaving one behind (the secret cannot be read back, so the old
  one is deleted and a new one created);
* bound to the node name, owned by the Node (deleted with it by the garbage collector) and short-lived
  (:data:`TTL`, longer than any boot timeout); and
* deleted once its host's agent has registered (the host keeps renewing its own credential).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import string
from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects
from nodus.client import Client, errors

Object = dict[str, Any]
TTL = timedelta(hours=1)
_ALPHABET = string.ascii_lowercase + string.digits


def token_id(node: Object) -> str:
    """Six characters of [a-z0-9], a function of the Node's uid."""
    uid = objects.read(objects.Node, node).metadata.uid
    number = int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big")
    return "".join(_ALPHABET[(number >> (6 * i)) % len(_ALPHABET)] for i in range(6))


async def issue(client: Client, node: Object) -> str:
    """Create the host's token (replacing an earlier one) and return it, ``<id>.<secret>``."""
    meta = objects.read(objects.Node, node).metadata
    name, uid = meta.name, meta.uid
    ident = token_id(node)
    secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "BootstrapToken",
        "metadata": {
            "name": ident,
            "labels": {labels.NODE: name},
            "ownerReferences": [{"apiVersion": "nodus.dev/v1", "kind": "Node", "name": name, "uid": uid}],
        },
        "spec": {
            "nodeName": name,
            "secret": secret,
            "expiration": units.format_time(units.now() + TTL),
            "description": f"joins host {name} ({objects.read(objects.Node, node).spec.provider or 'manual'})",
        },
    }
    await revoke(client, node)
    await client.create("bootstraptokens", body)
    return f"{ident}.{secret}"


async def revoke(client: Client, node: Object) -> None:
    """Delete the host's token; a no-op when it is gone."""
    with contextlib.suppress(errors.NotFound):
        await client.delete("bootstraptokens", token_id(node))
