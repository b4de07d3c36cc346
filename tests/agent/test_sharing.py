"""The agent runs several attempts at once on a shared host, each with only its own GPUs (ADR 0048)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from nodus.agent import gpus, sharing
from nodus.agent.contract import HostFacts, environment
from nodus.agent.gpus import CdiDevices
from nodus.agent.sharing import Holding, Refuse, Start, Wait
from nodus.apis.v1 import objects

HOST = (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("attempt", "active", "expected"),
    [
        pytest.param(Holding((0,)), [], Start((0,)), id="first-share"),
        pytest.param(Holding((2, 3)), [Holding((0,)), Holding((1,))], Start((2, 3)), id="disjoint-beside-two"),
        pytest.param(Holding((1, 2)), [Holding((2,))], Wait(), id="overlap-waits"),
        pytest.param(Holding((1,)), [Holding(None)], Wait(), id="beside-a-whole-host-run"),
        pytest.param(Holding((1,)), [Holding((0,), dedicated=True)], Wait(), id="beside-a-dedicated-run"),
        pytest.param(Holding(None), [], Start(HOST), id="whole-host-on-idle-gets-all"),
        pytest.param(Holding(None), [Holding((0,))], Wait(), id="whole-host-waits-for-idle"),
        pytest.param(Holding(HOST, dedicated=True), [Holding((3,))], Wait(), id="dedicated-waits-for-idle"),
        pytest.param(Holding(HOST, dedicated=True), [], Start(HOST), id="dedicated-on-idle"),
    ],
)
def test_an_attempt_starts_beside_runs_on_other_gpus_only(
    attempt: Holding, active: list[Holding], expected: Start | Wait
) -> None:
    assert sharing.decide(attempt, HOST, active) == expected


def test_gpus_the_host_lacks_are_refused_naming_them() -> None:
    decided = sharing.decide(Holding((3, 4, 7)), HOST, [])
    assert isinstance(decided, Refuse)
    assert "GPUs 4,7, which this host does not have (its GPUs: 0,1,2,3)" in decided.message


def _attempt(name: str, gpu_indexes: list[int]) -> objects.Attempt:
    obj = {
        "metadata": {"name": name, "namespace": "demo", "uid": name},
        "spec": {"job": "j", "jobUID": "u", "index": 0, "number": 1, "node": "pool-a"},
        "status": {"phase": "Provisioning", "placement": {"pool": "lab", "node": "pool-a", "gpuIndexes": gpu_indexes}},
    }
    return objects.read(objects.Attempt, obj)


def test_two_runs_on_one_host_see_disjoint_devices(tmp_path: Path) -> None:
    # The host's CDI spec declares four GPUs (as nvidia-ctk writes it); each run is given its placement's only.
    spec = tmp_path / "nvidia.json"
    devices = [{"name": str(i), "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{i}"}]}} for i in HOST]
    spec.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices}))
    host = HostFacts("pool-a", "", list(HOST), tmp_path, cdi=CdiDevices.from_spec_file(spec))
    one, two = _attempt("one", [0]), _attempt("two", [1, 2])
    seats: list[tuple[int, ...]] = []
    for attempt in (one, two):
        decided = sharing.decide(
            Holding(tuple(attempt.status.placement.gpu_indexes or ())),  # type: ignore[union-attr]
            host.gpu_indexes,
            [Holding(seat) for seat in seats],
        )
        assert isinstance(decided, Start)
        seats.append(decided.gpus)
    runs = [dataclasses.replace(host, gpu_indexes=list(seat)) for seat in seats]
    assert [run.cdi.names_for(run.gpu_indexes) for run in runs if run.cdi is not None] == [
        ["nvidia.com/gpu=0"],
        ["nvidia.com/gpu=1", "nvidia.com/gpu=2"],
    ]
    first, second = environment(one, runs[0]), environment(two, runs[1])
    assert (first["NVIDIA_VISIBLE_DEVICES"], second["NVIDIA_VISIBLE_DEVICES"]) == ("0", "1,2")
    assert gpus.visible_devices_env(runs[1].gpu_indexes)["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert host.gpu_indexes == list(HOST)  # the host's own facts are untouched
