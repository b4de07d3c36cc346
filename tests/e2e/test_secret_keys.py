"""Key rotation for Secret values through the real server and ``nodus secrets reseal`` (ADR 0013, ADR 0035)."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodus.apimachinery.sealing import Keyring
from nodus.storage import database
from tests.support import cluster as clusters
from tests.support.objects import API

pytestmark = pytest.mark.e2e


def test_a_key_is_rotated_out_after_reseal(database_server: str, tmp_path: Path) -> None:
    keys = tmp_path / "secret-keys"
    Keyring.generate(keys, "k1")
    url = asyncio.run(database.create_database(database_server))
    try:
        first = clusters.start(tmp_path / "one", url, extra_args=("--secret-key-file", str(keys)))
        try:
            with first.client() as admin:
                project = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": "rot"}, "spec": {}}
                assert admin.post(f"{API}/projects", json=project).status_code == 201
                body = {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": "s"}}
                created = admin.post(f"{API}/namespaces/rot/secrets", json={**body, "stringData": {"k": "v1"}})
                assert created.status_code == 201, created.text
        finally:
            first.stop()
        # Rotate: a new key seals from now on; reseal moves what is stored; the old key leaves the file.
        with keys.open("a") as handle:
            handle.write(f"k2 {base64.b64encode(os.urandom(32)).decode()}\n")
        command = [sys.executable, "-m", "nodus", "secrets", "reseal", "--secret-key-file", str(keys)]
        resealed = subprocess.run([*command, "--database-url", url], capture_output=True, text=True, check=True)
        assert resealed.stdout.strip() == "resealed 1 versions of 1 Secrets under key k2"
        again = subprocess.run([*command, "--database-url", url], capture_output=True, text=True, check=True)
        assert again.stdout.strip() == "resealed 0 versions of 1 Secrets under key k2"
        keys.write_text(keys.read_text().splitlines()[1] + "\n")
        second = clusters.start(tmp_path / "two", url, extra_args=("--secret-key-file", str(keys)), migrate=False)
        try:
            with second.client() as admin:
                values = admin.get(f"{API}/namespaces/rot/secrets/s/values")
                assert values.status_code == 200, values.text
                assert base64.b64decode(values.json()["data"]["k"]) == b"v1"
        finally:
            second.stop()
    finally:
        asyncio.run(database.drop_database(url))
