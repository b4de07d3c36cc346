"""Attempt logs through the real API server: agents append lines, project members read them."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.objects import API, job, jobs_path

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}
T0 = "2026-11-29T12:00:00.123456Z"


def attempts_path(project: str, name: str = "") -> str:
    return f"{API}/namespaces/{project}/attempts" + (f"/{name}" if name else "")


def log_path(project: str, name: str) -> str:
    return attempts_path(project, name) + "/log"


def entry(line: str, stream: str = "stdout", time: str = T0) -> dict[str, str]:
    return {"stream": stream, "time": time, "line": line}


def create_attempt(
    admin: httpx.Client, project: str, job_name: str = "", index: int = 0, number: int = 1, job_uid: str = ""
) -> str:
    """An Attempt as the Job controller would create it; returns its name."""
    job_name = job_name or f"j-{uuid.uuid4().hex[:6]}"
    name = f"{job_name}-{index}-{number}"
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Attempt",
        "metadata": {"name": name, "labels": {"nodus.dev/job": job_name, "nodus.dev/index": str(index)}},
        "spec": {"job": job_name, "jobUID": job_uid or str(uuid.uuid4()), "index": index, "number": number},
    }
    response = admin.post(attempts_path(project), json=body)
    assert response.status_code == 201, response.text
    return name


def post(client: httpx.Client, project: str, name: str, *entries: dict[str, str]) -> httpx.Response:
    return client.post(log_path(project, name), json={"entries": list(entries)})


def set_phase(admin: httpx.Client, project: str, name: str, phase: str) -> None:
    response = admin.patch(attempts_path(project, name) + "/status", json={"status": {"phase": phase}}, headers=MERGE)
    assert response.status_code == 200, response.text


def read(client: httpx.Client, path: str, **params: Any) -> httpx.Response:
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
    return client.get(path, params=query)


@pytest.fixture
def logged(admin: httpx.Client, project: str) -> str:
    """An attempt with three stdout lines and two stderr lines, interleaved."""
    name = create_attempt(admin, project)
    first = post(admin, project, name, entry("out 1"), entry("err 1", "stderr"), entry("out 2"))
    assert first.status_code == 204, first.text
    assert post(admin, project, name, entry("err 2", "stderr"), entry("out 3")).status_code == 204
    return name


def test_lines_read_back_as_plain_text_in_order(admin: httpx.Client, project: str, logged: str) -> None:
    response = read(admin, log_path(project, logged))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "out 1\nerr 1\nout 2\nerr 2\nout 3\n"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        pytest.param({"tailLines": 2}, "err 2\nout 3\n", id="tail"),
        pytest.param({"tailLines": 0}, "", id="tail-0"),
        pytest.param({"stream": "stderr"}, "err 1\nerr 2\n", id="stderr"),
        pytest.param({"stream": "stdout", "tailLines": 1}, "out 3\n", id="stdout-tail"),
        pytest.param({"stream": "All"}, "out 1\nerr 1\nout 2\nerr 2\nout 3\n", id="all"),
        pytest.param({"limitBytes": 8}, "out 1\ner", id="limit-bytes"),
        pytest.param({"sinceTime": "2026-11-29T12:00:01Z"}, "", id="since-time-after-every-line"),
        pytest.param({"sinceTime": "2026-11-29T12:00:00Z"}, "out 1\nerr 1\nout 2\nerr 2\nout 3\n", id="since-time"),
        pytest.param({"follow": True}, "out 1\nerr 1\nout 2\nerr 2\nout 3\n", id="follow-terminal"),
        pytest.param({"tailLines": 10**30}, "out 1\nerr 1\nout 2\nerr 2\nout 3\n", id="tail-beyond-any-log"),
        pytest.param({"sinceSeconds": 10**30}, "out 1\nerr 1\nout 2\nerr 2\nout 3\n", id="since-before-time"),
    ],
)
def test_read_options(admin: httpx.Client, project: str, logged: str, params: dict[str, Any], expected: str) -> None:
    set_phase(admin, project, logged, "Failed")  # a finished attempt: follow ends once every line is sent
    response = read(admin, log_path(project, logged), **params)
    assert response.status_code == 200, response.text
    assert response.text == expected


def test_timestamps_prefix_each_line_with_its_time(admin: httpx.Client, project: str) -> None:
    name = create_attempt(admin, project)
    later = "2026-11-29T12:00:01+02:00"
    assert post(admin, project, name, entry("one"), entry("two", time=later)).status_code == 204
    response = read(admin, log_path(project, name), timestamps=True)
    assert response.text == "2026-11-29T12:00:00.123456000Z one\n2026-11-29T10:00:01.000000000Z two\n"


def test_since_seconds_keeps_recent_lines(admin: httpx.Client, project: str) -> None:
    name = create_attempt(admin, project)
    recent = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    old = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    assert post(admin, project, name, entry("old", time=old), entry("recent", time=recent)).status_code == 204
    assert read(admin, log_path(project, name), sinceSeconds=3600).text == "recent\n"
    assert read(admin, log_path(project, name)).text == "old\nrecent\n"


def test_a_line_keeps_no_trailing_newline_and_long_lines_are_cut(admin: httpx.Client, project: str) -> None:
    name = create_attempt(admin, project)
    long = "x" * 20_000
    assert post(admin, project, name, entry("ends\n"), entry("crlf\r\n"), entry(long)).status_code == 204
    lines = read(admin, log_path(project, name)).text.split("\n")
    assert lines[:2] == ["ends", "crlf"]
    assert lines[2].endswith("[line truncated: 20000 bytes]") and len(lines[2]) <= 16 * 1024


async def test_follow_streams_new_lines_until_the_attempt_succeeds(
    cluster: Cluster, admin: httpx.Client, admin_async: httpx.AsyncClient, project: str
) -> None:
    name = create_attempt(admin, project)
    assert post(admin, project, name, entry("before 1"), entry("before 2")).status_code == 204
    set_phase(admin, project, name, "Running")
    received: list[str] = []

    async def follow() -> None:
        params = {"follow": "true"}
        async with admin_async.stream("GET", log_path(project, name), params=params) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                received.append(line)
                if line == "before 2":  # the stream is open: write more while it follows
                    await admin_async.post(
                        log_path(project, name), json={"entries": [entry("during 1"), entry("during 2", "stderr")]}
                    )
                if line == "during 2":
                    await admin_async.post(log_path(project, name), json={"entries": [entry("last")]})
                    await admin_async.patch(
                        attempts_path(project, name) + "/status", json={"status": {"phase": "Succeeded"}}, headers=MERGE
                    )

    await asyncio.wait_for(follow(), timeout=120)  # a safety net, not a timing assertion: the stream ends by itself
    assert received == ["before 1", "before 2", "during 1", "during 2", "last"]


async def test_follow_with_tail_zero_sends_only_new_lines(
    admin: httpx.Client, admin_async: httpx.AsyncClient, project: str
) -> None:
    name = create_attempt(admin, project)
    assert post(admin, project, name, entry("old")).status_code == 204
    received: list[str] = []

    async def follow() -> None:
        params = {"follow": "true", "tailLines": "0"}
        async with admin_async.stream("GET", log_path(project, name), params=params) as response:
            assert response.status_code == 200
            posted = await admin_async.post(log_path(project, name), json={"entries": [entry("new")]})
            assert posted.status_code == 204
            await admin_async.patch(
                attempts_path(project, name) + "/status", json={"status": {"phase": "Stopped"}}, headers=MERGE
            )
            received.extend([line async for line in response.aiter_lines()])

    await asyncio.wait_for(follow(), timeout=120)
    assert received == ["new"]


def test_job_log_by_index_and_attempt(admin: httpx.Client, project: str) -> None:
    created = admin.post(jobs_path(project), json=job("train", completions=4))
    assert created.status_code == 201, created.text
    uid = created.json()["metadata"]["uid"]
    for index, number in ((0, 1), (0, 2), (1, 1)):
        name = create_attempt(admin, project, "train", index, number, uid)
        assert post(admin, project, name, entry(f"index {index} attempt {number}")).status_code == 204
    # An attempt of an earlier Job with the same name is not this Job's.
    stale = create_attempt(admin, project, "train", 0, 3, str(uuid.uuid4()))
    assert post(admin, project, stale, entry("stale")).status_code == 204

    path = jobs_path(project, "train") + "/log"
    latest = read(admin, path)
    assert latest.text == "index 0 attempt 2\n"
    assert latest.headers["Nodus-Attempt"] == "2"  # which attempt "the latest" was
    first = read(admin, path, attempt=1)
    assert first.text == "index 0 attempt 1\n"
    assert first.headers["Nodus-Attempt"] == "1"
    assert read(admin, path, index=1).text == "index 1 attempt 1\n"
    assert read(admin, path, index=1, timestamps=True).text == "2026-11-29T12:00:00.123456000Z index 1 attempt 1\n"

    # Attempts still to come: a 404 that says when to ask again (what `nodus logs -f` waits on).
    missing_index = read(admin, path, index=3)
    assert missing_index.status_code == 404
    assert missing_index.json()["reason"] == "NotFound"
    assert missing_index.json()["message"] == 'job "train" has no attempt for index 3 yet'
    assert missing_index.json()["details"]["retryAfterSeconds"] == 1
    missing_attempt = read(admin, path, attempt=5)
    assert missing_attempt.status_code == 404
    assert missing_attempt.json()["message"] == 'job "train" has no attempt 5 for index 0; it has attempts 1, 2'
    assert missing_attempt.json()["details"]["retryAfterSeconds"] == 1
    # Attempts that will never come: no retry.
    beyond = read(admin, path, index=4)
    assert beyond.status_code == 404
    assert beyond.json()["message"] == 'job "train" has no index 4: its indexes are 0 to 3'
    assert "retryAfterSeconds" not in beyond.json()["details"]
    assert "retryAfterSeconds" not in read(admin, path, index=3, rank=1).json()["details"]  # not a gang
    missing_job = read(admin, jobs_path(project, "nope") + "/log")
    assert missing_job.status_code == 404
    assert missing_job.json()["message"] == 'jobs.nodus.dev "nope" not found'
    assert read(admin, path, index=-1).status_code == 400
    assert read(admin, path, index=10**30).status_code == 404
    finished = admin.patch(
        jobs_path(project, "train") + "/status", json={"status": {"phase": "Succeeded"}}, headers=MERGE
    )
    assert finished.status_code == 200, finished.text
    assert "retryAfterSeconds" not in read(admin, path, index=3).json()["details"]


def test_viewers_read_only_administrators_write(cluster: Cluster, project: str, logged: str) -> None:
    with cluster.client("carol") as viewer, cluster.client("bob") as editor, cluster.client("dave") as outsider:
        assert read(viewer, log_path(project, logged), tailLines=1).text == "out 3\n"
        for client, user in ((viewer, "carol"), (editor, "bob"), (outsider, "dave")):
            denied = post(client, project, logged, entry("forged"))
            assert denied.status_code == 403, denied.text
            assert denied.json()["reason"] == "Forbidden"
            assert f'User "{user}" cannot create resource "attempts/log"' in denied.json()["message"]
        hidden = read(outsider, log_path(project, logged))
        assert hidden.status_code == 403
        assert hidden.json()["reason"] == "Forbidden"
        assert 'User "dave" cannot get resource "attempts"' in hidden.json()["message"]
        assert read(outsider, jobs_path(project, "any") + "/log").status_code == 403
        # A missing attempt is not revealed to an outsider either.
        assert read(outsider, log_path(project, "no-such-attempt")).status_code == 403
        assert read(viewer, log_path(project, logged)).text.count("forged") == 0


def test_missing_attempt_is_404(admin: httpx.Client, project: str) -> None:
    for response in (read(admin, log_path(project, "ghost-0-1")), post(admin, project, "ghost-0-1", entry("x"))):
        assert response.status_code == 404
        body = response.json()
        assert body["kind"] == "Status" and body["reason"] == "NotFound"
        assert body["message"] == 'attempts.nodus.dev "ghost-0-1" not found'


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        pytest.param(
            {"entries": [{"stream": "stdin", "time": T0, "line": "x"}]}, 422, "entries[0].stream", id="stream"
        ),
        pytest.param(
            {"entries": [entry("ok"), {"stream": "stdout", "line": "x"}]}, 422, "entries[1].time", id="no-time"
        ),
        pytest.param({"entries": [entry("x", time="yesterday")]}, 422, "entries[0].time", id="bad-time"),
        pytest.param({"entries": [{"stream": "stdout", "time": T0, "line": 7}]}, 422, "entries[0].line", id="line"),
        pytest.param({"lines": []}, 422, "entries", id="no-entries"),
        pytest.param({"entries": "x"}, 422, "entries", id="entries-not-a-list"),
        pytest.param([], 422, "entries", id="not-an-object"),
    ],
)
def test_bad_bodies_name_the_field(
    admin: httpx.Client, project: str, logged: str, body: Any, code: int, field: str
) -> None:
    response = admin.post(log_path(project, logged), json=body)
    assert response.status_code == code, response.text
    status = response.json()
    assert status["kind"] == "Status" and status["reason"] == "Invalid"
    assert [cause["field"] for cause in status["details"]["causes"]] == [field]
    assert field in status["message"] and field in status["fix"]
    assert "out 1" in read(admin, log_path(project, logged)).text  # nothing of a refused body was stored
    assert "ok" not in read(admin, log_path(project, logged)).text


def test_too_many_entries_and_malformed_requests(admin: httpx.Client, project: str, logged: str) -> None:
    too_many = post(admin, project, logged, *[entry(str(i)) for i in range(1001)])
    assert too_many.status_code == 413
    assert too_many.json()["reason"] == "RequestEntityTooLarge"
    assert "1000" in too_many.json()["message"]
    not_json = admin.post(log_path(project, logged), content=b"{nope", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["reason"] == "BadRequest"
    assert post(admin, project, logged, *[entry(str(i)) for i in range(1000)]).status_code == 204
    for params in ({"tailLines": "-1"}, {"stream": "stdin"}, {"follow": "maybe"}, {"sinceSeconds": "0"},
                   {"sinceSeconds": "5", "sinceTime": T0}, {"sinceTime": "noon"}, {"limitBytes": "0"}):  # fmt: skip
        response = admin.get(log_path(project, logged), params=params)
        assert response.status_code == 400, params
        assert response.json()["reason"] == "BadRequest"
        assert next(iter(params)) in response.json()["message"]
    deleted = admin.delete(log_path(project, logged))
    assert deleted.status_code == 405 and deleted.json()["reason"] == "MethodNotAllowed"
