"""What the runtime cannot run is refused at create, at its field, with the fix; never on update."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodus.agent import contract, launchers
from nodus.api.kinds.job import validation_runnable
from nodus.apimachinery.fieldpath import ErrorType
from nodus.apis.v1 import objects
from tests.api.kinds.jobbuilder import JobBuilder, create, kinds_and_fields, make_job, stored, update

REQUIRED, INVALID = ErrorType.REQUIRED, ErrorType.INVALID


def var(name: str) -> dict[str, Any]:
    return {"name": name, "value": "1"}


REFUSED = [
    pytest.param(lambda b: b.set("spec.command", ["", "x"]), [(INVALID, "spec.command[0]")], id="empty-program"),
    pytest.param(
        lambda b: b.sidecars({"name": "proxy", "command": ["", "x"]}),
        [(INVALID, "spec.sidecars[0].command[0]")],
        id="sidecar-empty-program",
    ),
    pytest.param(
        lambda b: b.sidecars({"name": "Proxy One", "command": ["proxy"]}),
        [(INVALID, "spec.sidecars[0].name")],
        id="sidecar-name",
    ),
    pytest.param(
        lambda b: b.env(var("A"), var("NODUS_INDEX"), var("CUDA_VISIBLE_DEVICES")),
        [(INVALID, "spec.env[1].name"), (INVALID, "spec.env[2].name")],
        id="env-nodus",
    ),
    pytest.param(
        lambda b: b.env({"name": "NODUS_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
        [(INVALID, "spec.env[0].name")],
        id="env-secret-nodus",
    ),
    pytest.param(
        lambda b: b.distributed(nodes=2).env(var("MASTER_PORT")), [(INVALID, "spec.env[0].name")], id="env-launcher"
    ),
    pytest.param(lambda b: b.set("spec.workingDir", "/"), [(INVALID, "spec.workingDir")], id="working-dir-root"),
    pytest.param(
        lambda b: b.set("spec.workingDir", "/usr/src/app"), [(INVALID, "spec.workingDir")], id="working-dir-usr"
    ),
    pytest.param(
        lambda b: b.set("spec.workingDir", "/nodus/outputs"), [(INVALID, "spec.workingDir")], id="working-dir-nodus"
    ),
    pytest.param(
        lambda b: b.volumes({"volume": "data", "mountPath": "/workspace"}),
        [(INVALID, "spec.volumes[0].mountPath")],
        id="volume-at-default-working-dir",
    ),
    pytest.param(
        lambda b: b.set("spec.workingDir", "/app").volumes({"volume": "data", "mountPath": "/app"}),
        [(INVALID, "spec.volumes[0].mountPath")],
        id="volume-at-working-dir",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), REFUSED)
def test_a_job_the_runtime_cannot_run_is_refused_at_create(mutate: Any, expected: list[tuple[ErrorType, str]]) -> None:
    _, errors = create(mutate(make_job()).build())
    assert kinds_and_fields(errors) == expected
    assert all(error.detail for error in errors)


ACCEPTED = [
    # Without a command the image's ENTRYPOINT and CMD run, as in a Kubernetes container (ADR 0040).
    pytest.param(lambda b: b.unset("spec.command"), id="no-command"),
    pytest.param(lambda b: b.set("spec.command", []), id="empty-command"),
    pytest.param(lambda b: b.unset("spec.command").set("spec.args", ["--epochs", "3"]), id="args-without-command"),
    pytest.param(lambda b: b.unset("spec.command").distributed(nodes=2), id="gang-without-command"),
    pytest.param(lambda b: b.sidecars({"name": "proxy"}), id="sidecar-without-command"),
    pytest.param(lambda b: b.set("spec.args", ["--epochs", "3"]), id="command-and-args"),
    pytest.param(lambda b: b.sidecars({"name": "proxy.v2_a", "command": ["proxy"]}), id="sidecar"),
    pytest.param(lambda b: b.env(var("MASTER_PORT"), var("RANK")), id="launcher-names-without-a-gang"),
    pytest.param(lambda b: b.env(var("NODUSX"), var("MY_NODUS_INDEX")), id="names-like-nodus"),
    pytest.param(lambda b: b.set("spec.workingDir", "/srv/app"), id="working-dir"),
    pytest.param(lambda b: b.set("spec.workingDir", "/usrdata"), id="working-dir-beside-usr"),
    pytest.param(lambda b: b.volumes({"volume": "data", "mountPath": "/workspace/data"}), id="volume-below"),
]


@pytest.mark.parametrize("mutate", ACCEPTED)
def test_what_the_runtime_runs_is_accepted(mutate: Any) -> None:
    stored(mutate(make_job()).build())


def test_an_update_of_a_stored_job_without_command_is_not_refused() -> None:
    """Rules of what runs apply to creates: a Job stored before them can still be cancelled."""
    old = stored(make_job().build())
    old["spec"].pop("command")
    new = JobBuilder("train").build()
    new["spec"] = {**old["spec"], "state": "Cancelled"}
    _, errors = update(new, old)
    assert errors == []


def test_the_reserved_names_are_every_variable_the_agent_sets() -> None:
    """The agent's own environment, as it builds it, is what the rule refuses: a name the agent starts to set
    without the rule knowing fails here."""
    attempt = objects.read(
        objects.Attempt,
        {"metadata": {"name": "a-0-1", "namespace": "p"}, "spec": {"index": 0, "job": "a", "jobUID": "u", "number": 1}},
    )
    host = contract.HostFacts(node="n", offering="o", gpu_indexes=[0], work_dir=Path("/tmp"))
    ours = set(contract.environment(attempt, host)) - {"PATH", "HOME", "LANG"}
    facts = launchers.GangFacts(0, 2, 1, "10.0.0.1", 29500, 1, ("10.0.0.1", "10.0.0.2"))
    for launcher in launchers.LAUNCHERS:
        ours |= set(launchers.launch(launcher, ["python", "x.py"], facts).env)
    for name in sorted(ours):
        nodus = name.startswith(validation_runnable.RESERVED_PREFIX) or name in validation_runnable.RESERVED_NAMES
        assert nodus or name in validation_runnable.LAUNCHER_NAMES, name
