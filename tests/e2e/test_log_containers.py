"""Log lines of an attempt's other programs (init commands, sidecars) apart from the main program's."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.test_logs import T0, create_attempt, entry, log_path, post, read
from tests.support.objects import job, jobs_path

pytestmark = pytest.mark.e2e


def in_container(line: str, container: str, stream: str = "stdout") -> dict[str, str]:
    return {**entry(line, stream), "container": container}


@pytest.fixture
def mixed(admin: httpx.Client, project: str) -> str:
    """An attempt whose init command, main program and sidecar wrote interleaved lines."""
    name = create_attempt(admin, project)
    response = post(
        admin,
        project,
        name,
        in_container("fetching", "init"),
        entry("main 1"),
        in_container("proxy up", "sidecar-proxy", "stderr"),
        {**entry("main 2"), "container": ""},
        in_container("fetched", "init"),
    )
    assert response.status_code == 204, response.text
    return name


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({}, "main 1\nmain 2\n", id="default-main-program"),
        pytest.param({"container": "init"}, "fetching\nfetched\n", id="init"),
        pytest.param({"container": "sidecar-proxy", "stream": "stderr"}, "proxy up\n", id="sidecar-stderr"),
        pytest.param({"container": "init", "tailLines": 1}, "fetched\n", id="init-tail"),
        pytest.param({"container": "nobody"}, "", id="unknown-container"),
        pytest.param(
            {"allContainers": True},
            "[init] fetching\nmain 1\n[sidecar-proxy] proxy up\nmain 2\n[init] fetched\n",
            id="all-containers",
        ),
    ],
)
def test_container_filter(
    admin: httpx.Client, project: str, mixed: str, params: dict[str, object], expected: str
) -> None:
    response = read(admin, log_path(project, mixed), **params)
    assert response.status_code == 200, response.text
    assert response.text == expected


def test_all_containers_with_timestamps_puts_the_prefix_after_the_time(
    admin: httpx.Client, project: str, mixed: str
) -> None:
    lines = read(admin, log_path(project, mixed), allContainers=True, timestamps=True).text.splitlines()
    assert lines[0] == "2026-11-29T12:00:00.123456000Z [init] fetching"


def test_the_job_log_takes_the_container_too(admin: httpx.Client, project: str) -> None:
    created = admin.post(jobs_path(project), json=job("withinit"))
    assert created.status_code == 201, created.text
    name = create_attempt(admin, project, "withinit", 0, 1, created.json()["metadata"]["uid"])
    assert post(admin, project, name, in_container("setup", "init"), entry("run")).status_code == 204
    path = jobs_path(project, "withinit") + "/log"
    assert read(admin, path).text == "run\n"
    assert read(admin, path, container="init").text == "setup\n"


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"container": "Not_A_Label"}, id="bad-name"),
        pytest.param({"container": "init", "allContainers": "true"}, id="both"),
        pytest.param({"allContainers": "maybe"}, id="bad-bool"),
    ],
)
def test_bad_container_parameters_are_400(
    admin: httpx.Client, project: str, mixed: str, params: dict[str, str]
) -> None:
    response = admin.get(log_path(project, mixed), params=params)
    assert response.status_code == 400, response.text
    assert response.json()["reason"] == "BadRequest"


def test_a_bad_container_in_an_entry_names_the_field(admin: httpx.Client, project: str, mixed: str) -> None:
    response = post(
        admin, project, mixed, entry("ok"), {"stream": "stdout", "time": T0, "line": "x", "container": "UP"}
    )
    assert response.status_code == 422, response.text
    assert [cause["field"] for cause in response.json()["details"]["causes"]] == ["entries[1].container"]
