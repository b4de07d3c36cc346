"""``nodus secrets reseal``: every stored Secret version sealed again under the active key (operators).

Key rotation (ADR 0013, ADR 0035): append a new key to the secret key file, restart the API servers
(the new key seals from then on, every key still opens), run this against the database, then remove the
old key from the file. Each Secret is rewritten with a precondition on its resourceVersion and retried on
a conflict, so it is safe while the servers run; values and version numbers do not change (watchers see
one MODIFIED event per resealed Secret, with the same served form).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from nodus.api.kinds import secret
from nodus.apimachinery.sealing import KeyFileError, Keyring, OpenError
from nodus.storage import errors
from nodus.storage.errors import Key
from nodus.storage.listing import ListQuery
from nodus.storage.objects import Storage


def add_reseal_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--secret-key-file", type=Path, required=True, help="the API servers' key file")
    parser.add_argument("--database-url", help="default: $NODUS_DATABASE_URL")


def reseal(args: argparse.Namespace) -> None:
    url = args.database_url or os.environ.get("NODUS_DATABASE_URL")
    if not url:
        raise SystemExit("nodus secrets reseal needs --database-url or NODUS_DATABASE_URL")
    try:
        ring = Keyring.load(args.secret_key_file)
    except KeyFileError as exc:
        raise SystemExit(f"--secret-key-file: {exc}") from None
    secrets_seen, versions = asyncio.run(_reseal_all(url, ring))
    print(f"resealed {versions} versions of {secrets_seen} Secrets under key {ring.active_id}")


async def _reseal_all(url: str, ring: Keyring) -> tuple[int, int]:
    storage = Storage(url, pool_size=2)
    await storage.start()
    try:
        async with storage.open_list(ListQuery(kind="Secret")) as cursor:
            keys = [Key("Secret", namespace, name) async for batch in cursor.batches() for namespace, name, _ in batch]
        total = 0
        for key in keys:
            total += await _reseal_one(storage, ring, key)
        return len(keys), total
    finally:
        await storage.stop()


async def _reseal_one(storage: Storage, ring: Keyring, key: Key) -> int:
    while True:
        obj = await storage.get(key)
        if obj is None:
            return 0
        try:
            resealed, changed = secret.reseal(ring, obj)
        except OpenError as exc:
            raise SystemExit(f"Secret {key.namespace}/{key.name}: {exc}; is every old key still in the file?") from None
        if not changed:
            return 0
        try:
            await storage.update(key, resealed, int(obj["metadata"]["resourceVersion"]))
            return changed
        except errors.Conflict:
            continue  # written meanwhile: reseal what is there now
        except errors.NotFound:
            return 0
