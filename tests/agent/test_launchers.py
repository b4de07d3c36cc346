"""The launchers of multi-node gangs: the command, environment and files of one member.

Three kinds of evidence. The commands are parsed by the launchers' own argument parsers where those are installed
(torch's ``torch.distributed.run``, accelerate's ``accelerate launch``; DeepSpeed's when present), so a flag that
does not exist fails here. Plain, Torchrun and Accelerate (CPU) are run for real as a two-node gang on loopback:
both members' commands, as :func:`launchers.launch` builds them, started side by side as the agents would (without
the agent or its sandbox), all-reduce over gloo. Ray is not installed here, so
the Ray wrapper is tested through its pure parts (its commands, the parsing of ``ray status`` text in the format
Ray prints) and its standalone start-up; Ray itself is not exercised.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from nodus.agent import launchers
from nodus.agent.gangwrappers import ray_gang
from nodus.agent.launchers import GangFacts
from nodus.apis.v1.jobcapacity import Distributed

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

PYTHON_SCRIPT = ["python", "train.py", "--lr", "0.1"]


@dataclass(frozen=True)
class FactsBuilder:
    """``make_facts().rank(1).gpus(8).build()``: a gang of N nodes on 10.0.0.1.. with port 29511, epoch 1."""

    facts: GangFacts

    def rank(self, rank: int) -> FactsBuilder:
        return FactsBuilder(replace(self.facts, rank=rank))

    def gpus(self, gpus: int) -> FactsBuilder:
        return FactsBuilder(replace(self.facts, gpus_per_node=gpus))

    def nodes(self, size: int) -> FactsBuilder:
        hosts = tuple(f"10.0.0.{n + 1}" for n in range(size))
        return FactsBuilder(replace(self.facts, size=size, hosts=hosts, rendezvous_host=hosts[0]))

    def hosts(self, *hosts: str) -> FactsBuilder:
        return FactsBuilder(replace(self.facts, size=len(hosts), hosts=hosts, rendezvous_host=hosts[0]))

    def port(self, port: int) -> FactsBuilder:
        return FactsBuilder(replace(self.facts, rendezvous_port=port))

    def build(self) -> GangFacts:
        return self.facts


def make_facts() -> FactsBuilder:
    hosts = ("10.0.0.1", "10.0.0.2")
    return FactsBuilder(GangFacts(0, 2, 0, "10.0.0.1", 29511, 1, hosts))


# -- the environment contract ------------------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", launchers.LAUNCHERS)
def test_every_launcher_gets_the_environment_contract(launcher: str) -> None:
    facts = replace(make_facts().nodes(4).rank(2).gpus(8).build(), epoch=3)
    env = launchers.launch(launcher, PYTHON_SCRIPT, facts).env
    assert (
        env.items()
        >= {
            "NODUS_GANG_SIZE": "4",
            "NODUS_NODE_RANK": "2",
            "NODUS_GPUS_PER_NODE": "8",
            "NODUS_WORLD_SIZE": "32",
            "NODUS_RENDEZVOUS_HOST": "10.0.0.1",
            "NODUS_RENDEZVOUS_PORT": "29511",
            "NODUS_GANG_EPOCH": "3",
            "NODUS_GANG_HOSTS": "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29511",
            "NODE_RANK": "2",
            "NNODES": "4",
            "WORLD_SIZE": "32",
        }.items()
    )


@pytest.mark.parametrize(
    ("gpus", "world_size"),
    [
        pytest.param(0, "2", id="cpu-one-process-per-node"),
        pytest.param(1, "2", id="gpu-1"),
        pytest.param(4, "8", id="gpu-4"),
    ],
)
def test_world_size_counts_one_process_per_gpu_and_one_per_cpu_node(gpus: int, world_size: str) -> None:
    env = launchers.launch("Plain", PYTHON_SCRIPT, make_facts().gpus(gpus).build()).env
    assert env["WORLD_SIZE"] == env["NODUS_WORLD_SIZE"] == world_size


@pytest.mark.parametrize(
    ("gpus", "ranks"),
    [
        pytest.param(0, {"RANK": "1", "LOCAL_RANK": "0"}, id="cpu"),
        pytest.param(1, {"RANK": "1", "LOCAL_RANK": "0"}, id="gpu-1"),
        pytest.param(8, {}, id="gpu-8-the-program-starts-its-processes"),
    ],
)
def test_plain_runs_the_command_as_written_with_rank_for_one_process_per_node(gpus: int, ranks: dict[str, str]) -> None:
    argv = ["./train", "--steps", "10"]
    launch = launchers.launch("Plain", argv, make_facts().rank(1).gpus(gpus).build())
    assert launch.argv == argv
    assert launch.files == {}
    assert {key: launch.env[key] for key in ("RANK", "LOCAL_RANK") if key in launch.env} == ranks


# -- Torchrun ----------------------------------------------------------------------------------------------------

TORCHRUN_OPTIONS = [
    "--nnodes=2",
    "--nproc-per-node=4",
    "--node-rank=1",
    "--master-addr=10.0.0.1",
    "--master-port=29511",
    "--max-restarts=0",
]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            PYTHON_SCRIPT,
            ["python", "-m", "torch.distributed.run", *TORCHRUN_OPTIONS, "train.py", "--lr", "0.1"],
            id="python-script",
        ),
        pytest.param(
            ["/opt/venv/bin/python3.11", "-m", "pkg.train", "--lr", "0.1"],
            [
                "/opt/venv/bin/python3.11",
                "-m",
                "torch.distributed.run",
                *TORCHRUN_OPTIONS,
                "-m",
                "pkg.train",
                "--lr",
                "0.1",
            ],
            id="python-module",
        ),
        pytest.param(
            ["python3", "-u", "train.py"],
            ["python3", "-m", "torch.distributed.run", *TORCHRUN_OPTIONS, "--no-python", "python3", "-u", "train.py"],
            id="python-with-interpreter-options",
        ),
        pytest.param(
            ["./train", "--steps", "10"],
            ["torchrun", *TORCHRUN_OPTIONS, "--no-python", "./train", "--steps", "10"],
            id="not-python",
        ),
    ],
)
def test_torchrun_commands(argv: list[str], expected: list[str]) -> None:
    assert launchers.launch("Torchrun", argv, make_facts().rank(1).gpus(4).build()).argv == expected


# The forms a command takes (a script, a module, an interpreter with options, not Python), with what each launcher
# must be given: its script, the script's arguments, whether it is a module, whether it is no Python script.
COMMAND_FORMS = [
    pytest.param(PYTHON_SCRIPT, "train.py", ["--lr", "0.1"], False, False, id="python-script"),
    pytest.param(["python", "-m", "pkg.train", "-v"], "pkg.train", ["-v"], True, False, id="python-module"),
    pytest.param(["python", "-u", "t.py"], "python", ["-u", "t.py"], False, True, id="python-with-options"),
    pytest.param(["./train", "-v"], "./train", ["-v"], False, True, id="not-python"),
]


@pytest.mark.parametrize(("argv", "script", "script_args", "module", "no_python"), COMMAND_FORMS)
@pytest.mark.parametrize("gpus", [0, 8])
def test_torch_parses_the_torchrun_command_as_a_static_rendezvous_without_restarts(
    argv: list[str], script: str, script_args: list[str], module: bool, no_python: bool, gpus: int
) -> None:
    from torch.distributed.run import get_args_parser

    command = launchers.launch("Torchrun", argv, make_facts().nodes(3).rank(2).gpus(gpus).build()).argv
    options = command[3:] if command[1:3] == ["-m", "torch.distributed.run"] else command[1:]
    args = get_args_parser().parse_args(options)
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("3", str(max(gpus, 1)), 2)
    assert (args.master_addr, args.master_port, args.rdzv_backend, args.max_restarts) == (
        "10.0.0.1",
        29511,
        "static",
        0,
    )
    assert (args.training_script, args.training_script_args) == (script, script_args)
    assert (args.module, args.no_python) == (module, no_python)


# -- Accelerate --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "prefix", "tail"),
    [
        pytest.param(
            PYTHON_SCRIPT, ["python", "-m", "accelerate.commands.launch"], ["train.py", "--lr", "0.1"], id="py"
        ),
        pytest.param(
            ["python3", "-m", "pkg.train"],
            ["python3", "-m", "accelerate.commands.launch"],
            ["-m", "pkg.train"],
            id="mod",
        ),
        pytest.param(["./train"], ["accelerate", "launch"], ["--no_python", "./train"], id="not-python"),
    ],
)
def test_accelerate_commands(argv: list[str], prefix: list[str], tail: list[str]) -> None:
    command = launchers.launch("Accelerate", argv, make_facts().rank(1).gpus(4).build()).argv
    options = [
        "--num_machines",
        "2",
        "--num_processes",
        "8",
        "--machine_rank",
        "1",
        "--main_process_ip",
        "10.0.0.1",
        "--main_process_port",
        "29511",
        "--multi_gpu",
    ]
    assert command == [*prefix, *options, *tail]


@pytest.mark.parametrize(
    ("gpus", "processes", "multi_gpu", "cpu"),
    [
        pytest.param(0, 2, False, True, id="cpu"),
        pytest.param(1, 2, True, False, id="gpu-1"),
        pytest.param(8, 16, True, False, id="gpu-8"),
    ],
)
@pytest.mark.parametrize(("argv", "script", "script_args", "module", "no_python"), COMMAND_FORMS)
def test_accelerate_parses_the_accelerate_command(
    gpus: int,
    processes: int,
    multi_gpu: bool,
    cpu: bool,
    argv: list[str],
    script: str,
    script_args: list[str],
    module: bool,
    no_python: bool,
) -> None:
    from accelerate.commands.launch import launch_command_parser

    launch = launchers.launch("Accelerate", argv, make_facts().rank(1).gpus(gpus).build())
    command = launch.argv
    options = command[3:] if command[1:3] == ["-m", "accelerate.commands.launch"] else command[2:]
    args = launch_command_parser().parse_args(options)
    assert (args.num_machines, args.num_processes, args.machine_rank) == (2, processes, 1)
    assert (args.main_process_ip, args.main_process_port) == ("10.0.0.1", 29511)
    assert (args.multi_gpu, args.cpu) == (multi_gpu, cpu)
    assert (args.training_script, args.training_script_args) == (script, script_args)
    assert (bool(args.module), bool(args.no_python)) == (module, no_python)
    # accelerate --cpu takes each process's rank from RANK (its MULTI_CPU mode); with GPUs its torchrun does.
    assert ("RANK" in launch.env) == cpu


# -- Deepspeed ---------------------------------------------------------------------------------------------------


def test_deepspeed_runs_each_node_without_ssh_from_a_hostfile() -> None:
    launch = launchers.launch("Deepspeed", PYTHON_SCRIPT, make_facts().nodes(3).rank(2).gpus(8).build())
    assert launch.argv == [
        "python",
        "-m",
        "deepspeed.launcher.runner",
        "--hostfile",
        "/nodus/gang/hostfile",
        "--num_nodes",
        "3",
        "--num_gpus",
        "8",
        "--node_rank",
        "2",
        "--master_addr",
        "10.0.0.1",
        "--master_port",
        "29511",
        "--no_ssh",
        "train.py",
        "--lr",
        "0.1",
    ]
    assert launch.files == {"hostfile": "10.0.0.1 slots=8\n10.0.0.2 slots=8\n10.0.0.3 slots=8\n"}


@pytest.mark.parametrize(
    ("argv", "tail"),
    [
        pytest.param(["python", "-m", "pkg.train"], ["--module", "pkg.train"], id="python-module"),
        pytest.param(["python", "-u", "t.py"], ["--no_python", "python", "-u", "t.py"], id="python-with-options"),
    ],
)
def test_deepspeed_module_and_no_python_forms(argv: list[str], tail: list[str]) -> None:
    assert launchers.launch("Deepspeed", argv, make_facts().build()).argv[-len(tail) :] == tail


def test_a_command_that_is_not_python_runs_under_the_deepspeed_executable() -> None:
    command = launchers.launch("Deepspeed", ["./train"], make_facts().build()).argv
    assert command[0] == "deepspeed"
    assert command[-2:] == ["--no_python", "./train"]


@pytest.mark.parametrize(
    ("hosts", "gpus", "expected"),
    [
        pytest.param(("a", "b"), 0, "a slots=1\nb slots=1\n", id="cpu-one-slot"),
        pytest.param(("a", "b"), 4, "a slots=4\nb slots=4\n", id="gpu-4"),
        pytest.param(
            ("127.0.0.1", "127.0.0.1"), 1, "127.0.0.1-rank0 slots=1\n127.0.0.1-rank1 slots=1\n", id="shared-address"
        ),
    ],
)
def test_the_hostfile_has_one_distinct_name_per_rank(hosts: tuple[str, ...], gpus: int, expected: str) -> None:
    assert launchers.hostfile(make_facts().hosts(*hosts).gpus(gpus).build()) == expected


def test_deepspeed_parses_the_deepspeed_command() -> None:
    runner = pytest.importorskip("deepspeed.launcher.runner", reason="deepspeed is not installed here")
    command = launchers.launch("Deepspeed", PYTHON_SCRIPT, make_facts().rank(1).gpus(2).build()).argv
    args = runner.parse_args(command[3:])
    assert (args.no_ssh, args.node_rank, args.num_nodes, args.num_gpus) == (True, 1, 2, 2)
    assert (args.user_script, args.user_args) == ("train.py", ["--lr", "0.1"])


# -- Ray and Verl ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", ["Ray", "Verl"])
@pytest.mark.parametrize(
    ("argv", "python"),
    [pytest.param(PYTHON_SCRIPT, "python", id="the-command's-python"), pytest.param(["./serve"], "python3", id="path")],
)
def test_ray_runs_the_shipped_wrapper_on_every_rank(launcher: str, argv: list[str], python: str) -> None:
    launch = launchers.launch(launcher, argv, make_facts().rank(1).build())
    assert launch.argv[:5] == [python, "-I", "/nodus/gang/ray_gang.py", "--", *argv[:1]]
    assert launch.argv[4 : 4 + len(argv)] == argv
    assert launch.files == {"ray_gang.py": Path(ray_gang.__file__).read_text(encoding="utf-8")}


@pytest.mark.parametrize(
    ("argv", "appended"),
    [
        pytest.param(
            ["python3", "-m", "verl.trainer.main_ppo"], ["trainer.nnodes=2", "trainer.n_gpus_per_node=8"], id="both"
        ),
        pytest.param(["python3", "-m", "v", "trainer.nnodes=2"], ["trainer.n_gpus_per_node=8"], id="nnodes-set"),
        pytest.param(["python3", "-m", "v", "++trainer.n_gpus_per_node=4"], ["trainer.nnodes=2"], id="gpus-forced"),
        pytest.param(["v", "trainer.nnodes=2", "+trainer.n_gpus_per_node=1"], [], id="both-set"),
    ],
)
def test_verl_gets_the_gang_shape_as_hydra_overrides_unless_set(argv: list[str], appended: list[str]) -> None:
    launch = launchers.launch("Verl", argv, make_facts().gpus(8).build())
    assert launch.argv[4:] == [*argv, *appended]


def test_verl_on_cpu_counts_one_gpu_per_node() -> None:
    command = launchers.verl_command(["v"], make_facts().nodes(3).gpus(0).build())
    assert command == ["v", "trainer.nnodes=3", "trainer.n_gpus_per_node=1"]


# -- the Ray wrapper's parts -------------------------------------------------------------------------------------

GANG = ray_gang.Gang(rank=1, size=2, gpus=8, head_host="10.0.0.1", head_port=6380, own_host="10.0.0.2")


def test_the_wrapper_reads_the_gang_from_the_environment_contract() -> None:
    facts = make_facts().rank(1).gpus(8).port(6380).build()
    assert ray_gang.Gang.from_env(launchers.launch("Ray", ["x"], facts).env) == GANG


def test_the_ray_commands() -> None:
    assert ray_gang.head_start("ray", GANG) == [
        "ray",
        "start",
        "--head",
        "--port=6380",
        "--node-ip-address=10.0.0.1",
        "--num-gpus=8",
    ]
    assert ray_gang.worker_start("ray", GANG) == [
        "ray",
        "start",
        "--address=10.0.0.1:6380",
        "--node-ip-address=10.0.0.2",
        "--num-gpus=8",
        "--block",
    ]
    assert ray_gang.status("ray", GANG) == ["ray", "status", "--address=10.0.0.1:6380"]


HEADER = "======== Autoscaler status: 2025-01-01 10:00:00.000000 ========\nNode status\n" + "-" * 62 + "\n"
RESOURCES = "\nResources\n" + "-" * 62 + "\nUsage:\n 0.0/16.0 CPU\n 0.0/2.0 GPU\n\nDemands:\n (no resource demands)"


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        pytest.param(
            HEADER + "Active:\n 1 node_5f0c\n 1 node_9a41\nIdle:\n (no idle nodes)\nPending:\n (no pending nodes)\n"
            "Recent failures:\n (no failures)\n" + RESOURCES,
            2,
            id="active",
        ),
        pytest.param(
            HEADER + "Active:\n 1 node_5f0c\nIdle:\n 1 node_9a41\n 1 node_77e2\nPending:\n (no pending nodes)\n"
            "Recent failures:\n (no failures)\n" + RESOURCES,
            3,
            id="active-and-idle",
        ),
        pytest.param(
            HEADER + "Active:\n (no active nodes)\nIdle:\n 1 node_5f0c\nPending:\n ray.worker.default, 1 launching\n"
            "Recent failures:\n (no failures)\n" + RESOURCES,
            1,
            id="pending-is-not-joined",
        ),
        pytest.param(
            HEADER + "Healthy:\n 1 ray.head.default\n 2 ray.worker.default\nPending:\n (no pending nodes)\n"
            "Recent failures:\n (no failures)\n" + RESOURCES,
            3,
            id="older-release-with-node-types",
        ),
        pytest.param(
            "No cluster status. It may take a few seconds for the Ray internal services to start up.\n",
            0,
            id="starting",
        ),
        pytest.param("", 0, id="nothing"),
    ],
)
def test_joined_nodes_sums_the_node_sections_of_ray_status(text: str, nodes: int) -> None:
    assert ray_gang.joined_nodes(text) == nodes


@pytest.mark.parametrize(
    ("returncode", "code"),
    [pytest.param(0, 0, id="ok"), pytest.param(3, 3, id="error"), pytest.param(-15, 143, id="sigterm")],
)
def test_the_wrapper_exits_as_a_shell_would(returncode: int, code: int) -> None:
    assert ray_gang.exit_code(returncode) == code


def test_ray_beside_the_interpreter_comes_before_path(tmp_path: Path) -> None:
    venv, elsewhere = tmp_path / "venv" / "bin", tmp_path / "bin"
    for directory in (venv, elsewhere):
        directory.mkdir(parents=True)
        (directory / "ray").write_text("#!/bin/sh\n")
        (directory / "ray").chmod(0o755)
    assert ray_gang.find_ray(str(venv / "python"), str(elsewhere)) == str(venv / "ray")
    assert ray_gang.find_ray(str(tmp_path / "python"), str(elsewhere)) == str(elsewhere / "ray")
    assert ray_gang.find_ray(str(tmp_path / "python"), str(tmp_path)) is None


def test_waiting_for_the_head_ends_when_its_port_accepts_or_after_the_timeout() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        host, port = listening.getsockname()
        assert ray_gang.wait_for_port(host, port, timeout=5)
    assert not ray_gang.wait_for_port(host, port, timeout=0)


def test_the_shipped_wrapper_runs_standalone_and_says_when_ray_is_missing(tmp_path: Path) -> None:
    if ray_gang.find_ray(sys.executable, "/nonexistent") is not None:
        pytest.skip("ray is installed beside this interpreter")
    launch = launchers.launch("Ray", ["python", "job.py"], make_facts().build())
    for name, text in launch.files.items():
        (tmp_path / name).write_text(text)
    env = {**launch.env, "PATH": "/nonexistent"}
    done = subprocess.run(
        [sys.executable, "-I", str(tmp_path / "ray_gang.py"), "--", "python", "job.py"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 127
    assert "ray is not installed" in done.stderr


def test_the_wrapper_wants_a_command() -> None:
    assert ray_gang.main([]) == 2
    assert ray_gang.main(["python", "job.py"]) == 2


# -- contract checks ---------------------------------------------------------------------------------------------


def test_the_launchers_are_the_api_s() -> None:
    assert typing.get_args(Distributed.model_fields["launcher"].annotation) == launchers.LAUNCHERS


def test_an_unknown_launcher_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="Plain, Torchrun, Ray, Verl, Accelerate, Deepspeed"):
        launchers.launch("Horovod", PYTHON_SCRIPT, make_facts().build())
    with pytest.raises(ValueError, match="Plain, Torchrun"):
        launchers.describe("torchrun")


def test_an_empty_command_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        launchers.launch("Torchrun", [], make_facts().build())


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"rank": 2}, id="rank-outside-the-gang"),
        pytest.param({"hosts": ("a",)}, id="hosts-not-one-per-rank"),
        pytest.param({"rendezvous_port": 0}, id="no-port"),
        pytest.param({"gpus_per_node": -1}, id="negative-gpus"),
    ],
)
def test_inconsistent_facts_are_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        replace(make_facts().build(), **change)


def test_the_command_given_is_not_changed() -> None:
    argv = ["v", "x=1"]
    launchers.launch("Verl", argv, make_facts().build())
    assert argv == ["v", "x=1"]


@pytest.mark.parametrize("launcher", launchers.LAUNCHERS)
def test_every_launcher_is_described(launcher: str) -> None:
    assert launcher in launchers.describe(launcher)


# -- real two-node gangs on loopback -----------------------------------------------------------------------------

ALL_REDUCE = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {int(total.item())}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""

ACCELERATE_ALL_REDUCE = """
import torch
from accelerate import Accelerator

accelerator = Accelerator()
total = accelerator.reduce(torch.tensor([accelerator.process_index + 1.0]), reduction="sum")
print(f"rank {accelerator.process_index} of {accelerator.num_processes}: sum {int(total.item())}", flush=True)
# A process group left to the interpreter's exit can abort in gloo's threads ("terminate called ...").
accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_gang(launcher: str, script: str, gpus: int, tmp_path: Path) -> list[str]:
    """Start both members of a two-node gang on this machine, as the agents would, and return their output."""
    (tmp_path / "job.py").write_text(script)
    port, hosts = _free_port(), ("127.0.0.1", "127.0.0.1")
    members = []
    for rank in (0, 1):
        facts = GangFacts(rank, 2, gpus, "127.0.0.1", port, 1, hosts)
        launch = launchers.launch(launcher, [sys.executable, "job.py"], facts)
        env = {**os.environ, **launch.env, "GLOO_SOCKET_IFNAME": "lo"}
        members.append(
            subprocess.Popen(
                launch.argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs = []
    for member in members:
        try:
            output, _ = member.communicate(timeout=180)
        finally:
            member.kill()
        assert member.returncode == 0, output
        outputs.append(output)
    return outputs


@pytest.mark.skipif(not Path("/sys/class/net/lo").exists(), reason="needs Linux loopback for gloo")
@pytest.mark.parametrize(
    ("launcher", "script", "gpus"),
    [
        pytest.param("Plain", ALL_REDUCE, 0, id="plain"),
        pytest.param("Plain", ALL_REDUCE, 1, id="plain-gpu-1"),
        pytest.param("Torchrun", ALL_REDUCE, 0, id="torchrun"),
        # torchrun's processes use gloo on CPU: two per node stand in for two GPUs each.
        pytest.param("Torchrun", ALL_REDUCE, 2, id="torchrun-two-per-node"),
        pytest.param("Accelerate", ACCELERATE_ALL_REDUCE, 0, id="accelerate-cpu"),
    ],
)
def test_a_two_node_gang_forms_one_process_group(launcher: str, script: str, gpus: int, tmp_path: Path) -> None:
    outputs = run_gang(launcher, script, gpus, tmp_path)
    per_node = max(gpus, 1)
    world = 2 * per_node
    total = world * (world + 1) // 2
    for node, output in enumerate(outputs):
        for rank in range(node * per_node, (node + 1) * per_node):
            assert f"rank {rank} of {world}: sum {total}" in output
