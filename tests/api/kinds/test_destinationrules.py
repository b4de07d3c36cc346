"""Admission of what the agent will reach for a Job (ADR 0032): each refused destination at its field, with the
fix, under the policy of a server with and without ``--allow-loopback-endpoints``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nodus.api.kinds import destinationrules
from nodus.api.kinds.connection import ConnectionStrategy
from nodus.api.kinds.job import JobStrategy
from nodus.apimachinery import destinations
from nodus.apimachinery.fieldpath import ErrorType, FieldError
from tests.api.kinds import jobbuilder
from tests.api.kinds.jobbuilder import JobBuilder, make_job

Mutation = Callable[[JobBuilder], JobBuilder]
INVALID, FORBIDDEN = ErrorType.INVALID, ErrorType.FORBIDDEN
# A server started with --allow-loopback-endpoints, its database at 127.0.0.1:5432, listening on 0.0.0.0:8443.
LOOPBACK = destinationrules.server_policy(True, ["0.0.0.0:8443"], "postgresql://nodus@127.0.0.1:5432/nodus")
STRICT = destinationrules.server_policy(False, ["0.0.0.0:8443"], "postgresql://nodus@db.internal:5432/nodus")


class Server:
    """The Job and Connection strategies of a server started with a policy (``configured``)."""

    job = JobStrategy()
    connection = ConnectionStrategy()


@pytest.fixture
def configured() -> Iterator[Callable[[destinations.Policy], None]]:
    def start(policy: destinations.Policy) -> None:
        Server.job, Server.connection = JobStrategy(policy), ConnectionStrategy(policy)

    yield start
    start(destinations.Policy())


def create(job: dict[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
    return jobbuilder.create(job, Server.job)


def update(job: dict[str, Any], old: dict[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
    return jobbuilder.update(job, old, Server.job)


def url_input(url: str) -> dict[str, Any]:
    return {"name": "data", "url": {"url": url}}


def bucket_input() -> dict[str, Any]:
    return {"name": "raw", "bucket": {"connection": "lake", "uri": "s3://acme-data/raw/a.parquet"}}


def git(repo: str) -> Mutation:
    return lambda b: b.set("spec.source", {"git": {"repo": repo}})


def sink() -> dict[str, Any]:
    return {"name": "scores", "path": "/nodus/outputs/s.csv", "sink": {"connection": "warehouse", "table": "scores"}}


def errors_of(problems: list[FieldError]) -> list[tuple[ErrorType, str]]:
    return [(problem.type, problem.field) for problem in problems]


DENIED = [
    (INVALID, "spec.inputs[0].url.url"),
    (FORBIDDEN, "spec.inputs[1].bucket"),
    (FORBIDDEN, "spec.outputs[0].sink"),
]
# mutation, errors without the loopback flag, errors with it
CASES = [
    pytest.param(lambda b: b.inputs(url_input("https://example.com/a.csv")), [], [], id="public-url"),
    pytest.param(
        lambda b: b.inputs(url_input("https://169.254.169.254/latest/meta-data/iam/")),
        [(INVALID, "spec.inputs[0].url.url")],
        [(INVALID, "spec.inputs[0].url.url")],
        id="metadata-service",
    ),
    pytest.param(
        lambda b: b.inputs(url_input("https://localhost:9000/a.csv")),
        [(INVALID, "spec.inputs[0].url.url")],
        [],
        id="loopback",
    ),
    pytest.param(
        lambda b: b.inputs(url_input("https://2130706433:8443/apis")),
        [(INVALID, "spec.inputs[0].url.url")],
        [(INVALID, "spec.inputs[0].url.url")],
        id="the-api-server",
    ),
    pytest.param(
        lambda b: b.inputs(url_input("https://[::ffff:127.0.0.1]:5432/")),
        [(INVALID, "spec.inputs[0].url.url")],
        [(INVALID, "spec.inputs[0].url.url")],
        id="the-database",
    ),
    pytest.param(
        lambda b: b.inputs(url_input("https://db.internal:5432/")),
        [(INVALID, "spec.inputs[0].url.url")],
        [],
        id="the-database-by-name",
    ),
    pytest.param(git("acme/train"), [], [], id="git-github"),
    pytest.param(
        git("https://x-access-token:s3cret@127.0.0.1:8443/a/b.git"),
        [(INVALID, "spec.source.git.repo")],
        [(INVALID, "spec.source.git.repo")],
        id="git-the-api-server",
    ),
    pytest.param(
        git("https://0x7f.1/a/b.git"), [(INVALID, "spec.source.git.repo")], [], id="git-loopback-hex"
    ),
    # The Job's egress governs the agent's fetches.
    pytest.param(
        lambda b: b.egress("Deny").inputs(url_input("https://example.com/a.csv"), bucket_input()).outputs(sink()),
        DENIED,
        DENIED,
        id="deny",
    ),
    pytest.param(lambda b: git("acme/train")(b.egress("Deny")), [(INVALID, "spec.source.git.repo")],
                 [(INVALID, "spec.source.git.repo")], id="deny-git"),
    pytest.param(
        lambda b: b.egress("AllowList", allow=["data.example.com"]).inputs(
            url_input("https://data.example.com/a.csv"), url_input("https://other.example.com/b.csv") | {"name": "b"}
        ),
        [(INVALID, "spec.inputs[1].url.url")],
        [(INVALID, "spec.inputs[1].url.url")],
        id="allow-list",
    ),
    pytest.param(
        lambda b: git("acme/train")(b.egress("AllowList", presets=["github"])), [], [], id="allow-list-preset"
    ),
    pytest.param(
        lambda b: git("acme/train")(b.egress("AllowList", allow=["pypi.org"])),
        [(INVALID, "spec.source.git.repo")],
        [(INVALID, "spec.source.git.repo")],
        id="allow-list-git",
    ),
    pytest.param(
        lambda b: b.egress("AllowList", allow=["pypi.org"]).inputs(bucket_input()).outputs(sink()),
        [],
        [],
        id="allow-list-connections-are-checked-by-the-agent",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "strict", "loopback"), CASES)
def test_destinations_at_create(
    configured: Callable[[destinations.Policy], None],
    mutate: Mutation,
    strict: list[tuple[ErrorType, str]],
    loopback: list[tuple[ErrorType, str]],
) -> None:
    for policy, expected in ((STRICT, strict), (LOOPBACK, loopback)):
        configured(policy)
        _, problems = create(mutate(make_job()).build())
        assert errors_of(problems) == expected


def test_the_field_error_names_the_address_and_the_fix(configured: Callable[[destinations.Policy], None]) -> None:
    configured(STRICT)
    _, problems = create(make_job().inputs(url_input("https://169.254.169.254/latest/meta-data/?t=x")).build())
    assert [problem.message() for problem in problems] == [
        'Invalid value: "https://169.254.169.254/latest/meta-data/?…": 169.254.169.254 is '
        "link-local (the cloud metadata service): refused; name a public host; the agent never connects to its own "
        "host, link-local addresses or the control plane"
    ]


def test_a_token_in_a_repository_url_is_never_echoed(configured: Callable[[destinations.Policy], None]) -> None:
    configured(STRICT)
    _, problems = create(git("https://x-access-token:s3cret@127.0.0.1/a/b.git")(make_job()).build())
    assert problems and all("s3cret" not in problem.message() for problem in problems)


def test_deny_names_the_fix(configured: Callable[[destinations.Policy], None]) -> None:
    configured(STRICT)
    _, problems = create(make_job().egress("Deny").outputs(sink()).build())
    assert [problem.message() for problem in problems] == [
        "Forbidden: the Job's egress policy is Deny and a sink is loaded by the agent into a "
        "database over the network; set spec.network.egress.policy to AllowList (or Open), or remove it"
    ]


def test_a_stored_job_stays_updatable_after_the_policy_changes(
    configured: Callable[[destinations.Policy], None],
) -> None:
    configured(LOOPBACK)
    stored, problems = create(make_job().inputs(url_input("https://localhost:9000/a.csv")).build())
    assert problems == []
    configured(STRICT)  # the server restarted without --allow-loopback-endpoints
    changed = make_job().inputs(url_input("https://localhost:9000/a.csv")).set("spec.parallelism", 1).build()
    assert update(changed, stored)[1] == []


def validate_connection(spec: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    obj = {"metadata": {"name": "c"}, "spec": spec}
    strategy = Server.connection
    problems = strategy.validate(obj) if old is None else strategy.validate_update(obj, {"spec": old})
    return [(problem.field, problem.message()) for problem in problems]


S3 = {"region": "us-east-1", "bucket": "b", "credentialsSecret": "s"}


@pytest.mark.parametrize(
    ("endpoint", "strict", "loopback"),
    [
        pytest.param("https://s3.us-east-1.amazonaws.com", [], [], id="aws"),
        pytest.param("http://127.0.0.1:9000", ["spec.s3.endpoint"], [], id="local-minio"),
        pytest.param("http://localhost:9000", ["spec.s3.endpoint"], [], id="localhost"),
        pytest.param("https://169.254.169.254", ["spec.s3.endpoint"], ["spec.s3.endpoint"], id="metadata"),
        pytest.param("http://127.0.0.1:5432", ["spec.s3.endpoint"], ["spec.s3.endpoint"], id="the-database"),
        pytest.param("https://[::1]:8443", ["spec.s3.endpoint"], ["spec.s3.endpoint"], id="the-api-server"),
    ],
)
def test_s3_endpoints(
    configured: Callable[[destinations.Policy], None], endpoint: str, strict: list[str], loopback: list[str]
) -> None:
    for policy, expected in ((STRICT, strict), (LOOPBACK, loopback)):
        configured(policy)
        assert [field for field, _ in validate_connection({"type": "S3", "s3": {**S3, "endpoint": endpoint}})] == (
            expected
        )


def test_an_unchanged_endpoint_is_not_checked_again(configured: Callable[[destinations.Policy], None]) -> None:
    configured(STRICT)
    old = {"type": "S3", "s3": {**S3, "endpoint": "http://127.0.0.1:9000"}}
    assert validate_connection({**old, "s3": {**old["s3"], "bucket": "c"}}, old) == []
    assert validate_connection({**old, "s3": {**old["s3"], "endpoint": "http://127.0.0.1:9001"}}, old) == [
        (
            "spec.s3.endpoint",
            'Invalid value: "http://127.0.0.1:9001": 127.0.0.1 is loopback (this host): refused; '
            "name a host other than the agent's own; loopback is reached only when the API server and agents run "
            "with --allow-loopback-endpoints (tests, nodus dev)",
        )
    ]
