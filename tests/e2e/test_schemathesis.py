"""Schemathesis fuzzes every operation of the committed OpenAPI v3 document: no request is a 5xx (issue 15 §4).

The run is bounded (``RUN_SECONDS``) and derandomized (Hypothesis's deterministic mode; the seed is fixed too)
against a real server on its own database, as an administrator, so that every operation is reached and
nothing the fuzzer creates or deletes touches other tests. The only check is ``not_a_server_error``: a
malformed request must be a 4xx Status, and anything else the server answers is the schema's business.

The path parameter ``namespace`` is fixed to a project that exists (else nearly every namespaced request
would stop at 404), and ``watch`` and ``follow`` are forced off: a watch or a followed log streams until
its timeout, which would spend the budget waiting; they have their own tests (test_watch.py, test_logs.py,
test_stream_limits.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.apimachinery.sealing import Keyring
from tests.conftest import make_project
from tests.support import cluster as clusters

# Two minutes of fuzzing: in the slow tier, which CI runs after `make test` (.ci/run).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "openapi" / "v3" / "apis" / "nodus.dev" / "v1.json"
RUN_SECONDS = 100
SEED = 15


@pytest.fixture(scope="module")
def fuzzed(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    directory = tmp_path_factory.mktemp("schemathesis")
    keys = directory / "secret-keys"
    Keyring.generate(keys)  # Secrets are fuzzed too: without keys their writes are a 503 by design
    with clusters.on_own_database(database_server, directory / "cluster", ("--secret-key-file", str(keys))) as running:
        yield running


def test_no_request_from_the_openapi_document_is_a_server_error(fuzzed: clusters.Cluster, tmp_path: Path) -> None:
    with fuzzed.client() as admin:
        project = make_project(admin, prefix="fuzz")
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        f'[parameters]\n"path.namespace" = "{project}"\n"query.watch" = "false"\n"query.follow" = "false"\n'
        "[cache]\nenabled = false\n"
    )
    command = [
        *(sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run", str(DOCUMENT)),
        *("--url", fuzzed.url, "--header", f"Authorization: Bearer {fuzzed.tokens['admin']}"),
        *("--tls-verify", str(fuzzed.ca_file), "--checks", "not_a_server_error"),
        *("--generation-deterministic", "--seed", str(SEED), "--max-time", str(RUN_SECONDS)),
        *("--workers", "2", "--request-timeout", "30", "--no-color", "--warnings", "off"),
    ]
    run = subprocess.run(command, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_SECONDS + 180)
    report = run.stdout[-20_000:] + run.stderr[-5_000:]
    assert run.returncode == 0, f"{report}\n--- apiserver log ---\n{fuzzed.logs()[-20_000:]}"
    assert "Server error" not in run.stdout, report
