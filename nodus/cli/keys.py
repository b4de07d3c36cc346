"""``nodus secrets reseal``: every stored Secret version sealed again under the active key (operators).

Key rotation (ADR 0013, ADR 0035): append a new key to the secret key file, restart the API servers
(the new key seals from then on, every key still opens), run this against the database, then remove the
old key from the file. Each Secret is rewritten with a precondition on its resourceVersion and retried on
a conflict, so it is safe while the servers run; values and version numbers do not change (watchers see
one MODIFIED event per resealed Secret, with the same served form). The work is ``nodus.cli.resealing``'s,
imported only when the command runs: every ``nodus`` command (a node agent's start included) builds this
parser, and the database libraries it needs take a quarter of a second to import.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from nodus.apimachinery.sealing import KeyFileError, Keyring


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
    from nodus.cli import resealing

    secrets_seen, versions = asyncio.run(resealing.reseal_all(url, ring))
    print(f"resealed {versions} versions of {secrets_seen} Secrets under key {ring.active_id}")
