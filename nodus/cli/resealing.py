"""Resealing every stored Secret version under the active key: the work of ``nodus secrets reseal``."""

from __future__ import annotations

from nodus.api.kinds import secret
from nodus.apimachinery.sealing import Keyring, OpenError
from nodus.storage import errors
from nodus.storage.errors import Key
from nodus.storage.listing import ListQuery
from nodus.storage.objects import Storage


async def reseal_all(url: str, ring: Keyring) -> tuple[int, int]:
    """Reseal every Secret in the database at ``url``; the number of Secrets seen and of versions resealed."""
    storage = Storage(url, pool_size=2)
    await storage.start()
    try:
        async with storage.open_list(ListQuery(kind="Secret")) as cursor:
            keys = [Key("Secret", namespace, name) async for batch in cursor.batches() for namespace, name, _ in batch]
        total = 0
        for key in keys:
            total += await reseal_one(storage, ring, key)
        return len(keys), total
    finally:
        await storage.stop()


async def reseal_one(storage: Storage, ring: Keyring, key: Key) -> int:
    """Reseal one Secret, retried on a conflict; the number of versions resealed."""
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
