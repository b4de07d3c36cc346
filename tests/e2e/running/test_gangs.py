"""Multi-node gangs for real: two or four ``nodus agent`` processes assemble, mesh and run one program.

The cluster runs gang assembly budgets 50 times faster (``--sim-assembly-time-scale 0.02``: a
``startupTimeout`` of 5m is 6 s) and checkpoint cadences 20 times faster (an interval of 1m is 3 s). The
offerings below are the gang tests' own (``tests/support/controllers.py``): one of the asia pair never
comes up, and the l40s one has six hosts.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_billing import charge, verify
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create, kubectl, patch_spec
from tests.e2e.running.test_recovery import PYTHON
from tests.support.controllers import GANG_FINE, GANG_HANGS, GANG_SIX
from tests.support.images import registry_python_image, registry_pytorch_image
from tests.support.objects import API

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)

TRAIN = Path(__file__).resolve().parents[2] / "support" / "programs" / "train_gang.py"
# Each rank of a Plain gang prints what the environment contract told it, then sleeps.
CONTRACT = r"""
import os, sys, time
keys = ["NODUS_NODE_RANK", "NODUS_GANG_SIZE", "NODUS_WORLD_SIZE", "NODUS_RENDEZVOUS_HOST", "NODUS_RENDEZVOUS_PORT",
        "NODUS_GANG_EPOCH", "MASTER_ADDR", "MASTER_PORT", "RANK"]
print(" ".join(f"{k}={os.environ.get(k)}" for k in keys), flush=True)
open("/nodus/outputs/who.txt", "w").write(os.environ["NODUS_NODE_RANK"])
time.sleep(float(sys.argv[1]))
"""


def gang(nodes: int, offerings: list[str], command: list[str], **distributed: Any) -> dict[str, Any]:
    """A gang of one-GPU hosts on ``offerings`` (ids such as ``l4-24g-x1-eu``)."""
    accelerators = sorted({o.rsplit("-x", 1)[0] for o in offerings})
    return {
        "command": command,
        "resources": {"gpu": {"count": 1, "type": accelerators}},
        "placement": {"offerings": offerings},
        "distributed": {"nodes": nodes, **distributed},
    }


def members(running: Running, project: str, job: str, epoch: int | None = None) -> list[dict[str, Any]]:
    attempts = running.attempts(project, job)
    if epoch is not None:
        attempts = [a for a in attempts if a["spec"]["number"] == epoch]
    return sorted(attempts, key=lambda a: (a["spec"]["number"], a["spec"]["rank"]))


def published(running: Running, *offerings: str) -> None:
    """Wait until the controllers have published the capacity of ``offerings`` (unknown capacity is unlimited)."""

    def check() -> bool:
        with running.client() as client:
            found = [client.get(f"{API}/offerings/{o}").json().get("status") or {} for o in offerings]
        return all(status.get("capacity") is not None for status in found)

    running.wait_for(f"the capacity of {offerings}", check, timeout=60)


def gang_status(running: Running, project: str, job: str) -> dict[str, Any]:
    return dict(running.job(project, job)["status"].get("gang") or {})


# Torch starts slowly in two sandboxes and the reference run trains again: more than the suite's 300 s on a busy
# machine, and the waits below are bounded anyway.
@pytest.mark.timeout(900)
@pytest.mark.slow  # about 50 s of real torch training: in the slow tier, which CI runs after `make test` (.ci/run)
def test_a_two_node_torchrun_gang_restarts_from_its_dcp_checkpoint_with_the_same_weights(running: Running) -> None:
    project = running.project()
    steps = 80
    # The program is this checkout's file: the init command writes it into the working directory of each rank's
    # container (the PyTorch image holds torch, not the tests).
    spec = gang(2, ["l4-24g-x1-eu"], ["python3", "/workspace/train_gang.py", str(steps), "0.25"], launcher="Torchrun")
    spec["image"] = registry_pytorch_image()
    spec["env"] = [{"name": "TRAIN_SOURCE", "value": TRAIN.read_text()}]
    spec["initCommand"] = {"command": ["sh", "-c", 'printf "%s" "$TRAIN_SOURCE" > /workspace/train_gang.py']}
    spec["distributed"]["startupTimeout"] = "30m"  # 36 s here: torch imports on a busy machine
    spec["recovery"] = {"checkpoint": {"interval": "2m"}}  # 6 s here
    spec["outputs"] = [{"name": "weights", "path": "/nodus/outputs/weights.json", "fromRanks": "All"}]
    create(running, project, "ddp", **spec)

    def gang_checkpoint() -> list[dict[str, Any]] | None:
        first = members(running, project, "ddp", 1)
        shards = [((a["status"].get("gang") or {}).get("shards") or []) for a in first]
        common = set.intersection(*({s["request"] for s in r} for r in shards)) if len(shards) == 2 else set()
        return first if common and all(a["status"]["phase"] == "Running" for a in first) else None

    first = running.wait_for("a gang checkpoint of every rank", gang_checkpoint, timeout=240)
    status = gang_status(running, project, "ddp")
    assert status["phase"] == "Running" and status["size"] == 2 and status["started"] == 2 and status["ready"] == 2
    assert status["rendezvous"].startswith("127.0.0.1:")
    assert status["probe"]["path"] == "Private" and float(status["probe"]["busGbps"]) > 0
    assert [m["rank"] for m in status["members"]] == [0, 1]
    topology = running.job(project, "ddp")["status"]["topology"]
    assert topology == {
        "nodes": 2,
        "gpusPerNode": 1,
        "totalGPUs": 2,
        "resolvedFrom": "Nodes",
        "network": "Colocated",
        "accelerator": "l4-24g",
    }
    nodus(running, "sim", "kill", first[1]["spec"]["node"])

    done = running.wait_phase(project, "ddp", "Succeeded", "Failed", timeout=420)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    epochs = sorted({a["spec"]["number"] for a in members(running, project, "ddp")})
    assert len(epochs) >= 2
    killed = members(running, project, "ddp", 1)[1]
    assert killed["status"]["phase"] == "Lost" and killed["status"]["reason"] == "NodeLost"
    second = members(running, project, "ddp", 2)
    assert all(a["spec"]["restore"]["manifest"] for a in second), "epoch 2 restores the gang checkpoint"
    assert [s["rank"] for s in second[1]["spec"]["gang"]["restoreShards"]] == [0, 1]
    assert done["status"]["gang"]["restarts"] >= 1 and done["status"]["gang"]["phase"] in ("Done", "Releasing")
    assert done["status"]["failed"] == 0

    reference = reference_weights(steps)
    for rank in (0, 1):
        with running.client() as client:
            response = client.get(f"{API}/namespaces/{project}/jobs/ddp/outputs/weights", params={"rank": rank})
        assert response.status_code == 200, response.text
        assert json.loads(response.content) == reference, f"rank {rank} ended with other weights"
    log = nodus(running, "logs", f"attempt/{second[0]['metadata']['name']}", "-n", project)
    assert "restored step" in log


def reference_weights(steps: int) -> list[str]:
    """The weights of the same program run uninterrupted: two processes under torchrun on this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"weights-{port}.json"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2"]
    argv += [f"--master-port={port}", str(TRAIN), str(steps), "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_")}
    env["WEIGHTS_OUT"] = str(out)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    weights = json.loads(out.read_text())
    out.unlink()
    return list(weights)


def test_a_gang_whose_member_never_comes_is_placed_again_then_fails_within_its_assembly_bound(
    running: Running,
) -> None:
    project = running.project()
    published(running, GANG_FINE, GANG_HANGS)
    command = [PYTHON, "-c", "print('never runs')"]
    spec = gang(2, [GANG_FINE, GANG_HANGS], command, startupTimeout="5m", maxAssemblyRetries=2)
    created = create(running, project, "stuck", **spec)
    estimate = created["status"]["estimate"]
    assert Decimal(estimate["assemblyBoundUSD"]) > 0 and Decimal(estimate["gangHoldUSD"]) > 0

    done = running.wait_phase(project, "stuck", "Failed", "Succeeded", timeout=240)
    assert done["status"]["reason"] == "GangAssemblyFailed", done["status"]
    message = done["status"]["message"]
    assert "3 times in a row (distributed.maxAssemblyRetries is 2)" in message
    assert f"on {GANG_HANGS}) its host never registered" in message
    attempts = members(running, project, "stuck")
    assert sorted({a["spec"]["number"] for a in attempts}) == [1, 2, 3]
    for number in (1, 2, 3):
        epoch = [a for a in attempts if a["spec"]["number"] == number]
        reasons = {(a["spec"].get("stop") or {}).get("reason") for a in epoch}
        assert "AssemblyTimeout" in reasons, epoch
        hung = next(a for a in epoch if a["status"]["placement"]["offering"] == GANG_HANGS)
        assert hung["status"]["phase"] == "Stopped" and not hung["status"].get("startTime")
    hung_hosts = {a["spec"]["node"] for a in attempts if a["status"]["placement"]["offering"] == GANG_HANGS}
    assert len(hung_hosts) == 3, "a host that never came is released, not offered to the next try"

    # The ledger: every member of every try together cost at most the bound for the budget in force here (6 s).
    def final() -> list[dict[str, Any]] | None:
        found = members(running, project, "stuck")
        return found if all((a["status"].get("cost") or {}).get("final") for a in found) else None

    charged = sum(Decimal(a["status"]["cost"]["totalUSD"]) for a in running.wait_for("final charges", final))
    rates = {
        a["status"]["placement"]["offering"]: Decimal(a["status"]["placement"]["rateUSDPerHour"]) for a in attempts
    }
    budget = 6 + 60  # the scaled startupTimeout and the stop allowance
    per_try = sum(charge(rate, Decimal(math.ceil(budget / 60) * 60)) for rate in rates.values())
    assert 0 < charged <= per_try * 3, (charged, per_try)
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_two_four_node_gangs_on_six_hosts_run_one_after_the_other(running: Running, kubectl_binary: Path) -> None:
    project = running.project()
    published(running, GANG_SIX)
    manifest = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": "first"},
        "spec": {"image": registry_python_image(), **gang(4, [GANG_SIX], [PYTHON, "-c", CONTRACT, "6"])},
    }
    kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))

    def first_running() -> bool:
        return gang_status(running, project, "first").get("phase") == "Running"

    running.wait_for("the first gang to run", first_running, timeout=120)
    second = gang(4, [GANG_SIX], [PYTHON, "-c", CONTRACT, "1"])
    create(
        running,
        project,
        "second",
        **second,
        outputs=[{"name": "who", "path": "/nodus/outputs/who.txt", "fromRanks": "All"}],
    )

    def second_waits() -> list[dict[str, Any]] | None:
        found = members(running, project, "second")
        waiting = [a for a in found if "It waits whole" in (a["status"].get("message") or "")]
        return found if len(found) == 4 and len(waiting) == 4 else None

    waiting = running.wait_for("the second gang to wait whole", second_waits, timeout=60)
    assert all(a["status"]["phase"] == "Pending" and not a["status"].get("placement") for a in waiting)
    assert running.job(project, "second")["status"]["gang"]["phase"] == "Queued"

    for name in ("first", "second"):
        done = running.wait_phase(project, name, "Succeeded", "Failed", timeout=180)
        assert done["status"]["phase"] == "Succeeded", done["status"]
    # Six hosts: the second gang needs two of the first's four, so it is placed once two of its members have
    # ended (the others may take a moment longer to end: each removes its container first).
    first_ends = sorted(a["status"]["finishTime"] for a in members(running, project, "first"))
    second_start = min(a["status"]["scheduledTime"] for a in members(running, project, "second"))
    assert second_start >= first_ends[1][:19], "the second gang was placed only once the first let its hosts go"
    phase = kubectl(kubectl_binary, running, project, "get", "job", "first", "-o", "jsonpath={.status.gang.phase}")
    assert phase == "Done"
    assert "4/4 Done e1" in kubectl(kubectl_binary, running, project, "get", "nj", "first", "-o", "wide")
    listed = kubectl(
        kubectl_binary, running, project, "get", "attempts", "-l", "nodus.dev/job=second,nodus.dev/gang-epoch=1"
    )
    assert all(f"second-0-1-r{rank}" in listed for rank in range(4))
    log = nodus(running, "logs", "attempt/second-0-1-r3", "-n", project)
    assert "NODUS_NODE_RANK=3 NODUS_GANG_SIZE=4 NODUS_WORLD_SIZE=4 NODUS_RENDEZVOUS_HOST=127.0.0.1" in log
    assert "RANK=3" in log
    # fromRanks: All: each rank's file, committed with its rank, downloaded under rank-<n>/ (ADR 0046 §7).
    nodus(running, "outputs", "get", "second", "who", "-n", project, "-o", str(running.directory / "who"))
    assert [(running.directory / "who" / f"rank-{r}" / "who.txt").read_text() for r in range(4)] == ["0", "1", "2", "3"]


# Each rank counts in its own file under the checkpoint directory and saves it when its agent asks.
GANG_COUNTER = r"""
import json, os, sys, time
directory, rank = os.environ["NODUS_CHECKPOINT_DIR"], os.environ["NODUS_NODE_RANK"]
state = os.path.join(directory, f"count-r{rank}")
n = int(open(state).read()) if os.path.exists(state) else 0
print("start", n, "files", ",".join(sorted(os.listdir(directory))), flush=True)
answered = 0
request = os.environ["NODUS_CHECKPOINT_REQUEST_FILE"]
while n < int(sys.argv[1]):
    n += 1
    time.sleep(0.05)
    if os.path.exists(request) and (seq := json.load(open(request))["seq"]) > answered:
        with open(state + ".tmp", "w") as out:
            out.write(str(n))
        os.replace(state + ".tmp", state)
        open(os.environ["NODUS_CHECKPOINT_ACK_FILE"], "w").write(str(seq))
        answered = seq
        while os.path.exists(request):
            time.sleep(0.01)
print("done", n, flush=True)
"""


def counter_gang(interval: str = "2h") -> dict[str, Any]:
    """Two CPU ranks counting in their own files (plain files, not a torch.distributed.checkpoint directory)."""
    return {
        "command": [PYTHON, "-c", GANG_COUNTER, "100000"],
        "resources": {"cpu": "1"},
        "placement": {"offerings": ["cpu-8c-eu"]},
        "distributed": {"nodes": 2},
        "recovery": {"checkpoint": {"format": "Snapshot", "interval": interval}},
    }


def test_a_suspended_gang_checkpoints_every_rank_together_and_resumes_from_all_shards(running: Running) -> None:
    project = running.project()
    # A long interval: only the suspend saves.
    create(running, project, "counting", **counter_gang())
    running.wait_for("the gang to run", lambda: gang_status(running, project, "counting").get("phase") == "Running")
    patch_spec(running, project, "counting", {"state": "Suspended"})
    suspended = running.wait_phase(project, "counting", "Suspended", timeout=120)
    assert suspended["status"]["gang"]["phase"] == "Done"
    first = members(running, project, "counting", 1)
    assert [a["status"]["phase"] for a in first] == ["Stopped", "Stopped"]
    tokens = [{s["request"] for s in a["status"]["gang"]["shards"]} for a in first]
    assert tokens[0] & tokens[1], "both ranks saved under the suspend's one request"

    patch_spec(running, project, "counting", {"state": "Running"})
    running.wait_for("the second epoch to run", lambda: len(members(running, project, "counting", 2)) == 2)
    second = members(running, project, "counting", 2)
    assert [s["rank"] for s in second[0]["spec"]["gang"]["restoreShards"]] == [0, 1]

    def started(name: str) -> re.Match[str] | None:
        return re.search(r"^start (\d+) files (\S+)$", nodus(running, "logs", f"attempt/{name}", "-n", project), re.M)

    for attempt in second:
        found = running.wait_for("the restored start line", lambda a=attempt: started(a["metadata"]["name"]))
        assert int(found.group(1)) > 0, "it resumed from its own count"
        assert found.group(2) == "count-r0,count-r1", "every rank's shard was restored"
    # A gang's Job log is one rank's (default 0) of one epoch (default the latest).
    by_rank = nodus(running, "logs", "job/counting", "-n", project, "--attempt", "2", "--rank", "1")
    own = nodus(running, "logs", f"attempt/{second[1]['metadata']['name']}", "-n", project)
    assert by_rank.splitlines()[0] == own.splitlines()[0]  # the start line (the counting goes on meanwhile)
    patch_spec(running, project, "counting", {"state": "Cancelled"})
    running.wait_phase(project, "counting", "Cancelled", timeout=120)


def test_a_notice_to_one_rank_checkpoints_the_whole_gang_before_it_restarts(running: Running) -> None:
    project = running.project()
    # No checkpoint but the notice's (a long interval): what epoch 2 restores can only come from it.
    create(running, project, "noticed", **counter_gang())
    running.wait_for("the gang to run", lambda: gang_status(running, project, "noticed").get("phase") == "Running")
    first = members(running, project, "noticed", 1)
    nodus(running, "sim", "preempt", first[1]["spec"]["node"], "--notice", "6s")

    running.wait_for(
        "epoch 2 to run",
        lambda: (
            (gang_status(running, project, "noticed").get("epoch") or 0) >= 2
            and gang_status(running, project, "noticed").get("phase") == "Running"
        ),
        timeout=120,
    )
    first = members(running, project, "noticed", 1)
    notice = first[1]["status"]["gang"]["notice"]
    assert first[1]["status"]["phase"] == "Lost" and first[1]["status"]["reason"] == "Preempted"
    shards = {
        a["spec"]["rank"]: next(s for s in a["status"]["gang"]["shards"] if s["request"] == notice) for a in first
    }
    second = members(running, project, "noticed", 2)
    restored = {s["rank"]: s["manifest"] for s in second[0]["spec"]["gang"]["restoreShards"]}
    assert restored == {rank: shard["manifest"] for rank, shard in shards.items()}, "the notice's gang checkpoint"
    for attempt in second:
        log = running.wait_for(
            "the restored start line",
            lambda a=attempt: re.search(
                r"^start (\d+) ", nodus(running, "logs", f"attempt/{a['metadata']['name']}", "-n", project), re.M
            ),
        )
        assert int(log.group(1)) > 0
    patch_spec(running, project, "noticed", {"state": "Cancelled"})
    running.wait_phase(project, "noticed", "Cancelled", timeout=120)
