"""What one member of a gang runs: the Job's command under its ``spec.distributed.launcher``.

A distributed Job runs on N nodes (node ranks 0..N-1) with G GPUs each (``gpusPerNode``; 0 on CPU-only
capacity, where every node runs one process). By the time the command starts the agents have assembled the
gang and know the :class:`GangFacts`. :func:`launch` turns (launcher, the Job's argv, those facts) into a
:class:`Launch`: the argv the agent starts, the variables it adds to the attempt's environment, and the files it
writes under :data:`GANG_DIR` (read-only in the sandbox) before the start. It is pure (no disk, network or
clock), so every retry of an epoch runs the same command, and a test can hand the result to the launchers' own
argument parsers.

The environment contract, the same under every launcher (``docs/distributed-launchers.md``)::

    NODUS_GANG_SIZE        N                    NNODES        N
    NODUS_NODE_RANK        this node's rank     NODE_RANK     this node's rank
    NODUS_GPUS_PER_NODE    G                    WORLD_SIZE    N x max(G, 1) processes
    NODUS_WORLD_SIZE       N x max(G, 1)        MASTER_ADDR   rank 0's rendezvous host
    NODUS_RENDEZVOUS_HOST  rank 0's host        MASTER_PORT   the rendezvous port
    NODUS_RENDEZVOUS_PORT  a free port of rank 0, chosen for the program
    NODUS_GANG_EPOCH       the restart generation, from 1
    NODUS_GANG_HOSTS       every rank's host address, comma-separated, by rank

``Plain`` with one process per node (G <= 1) also gets ``RANK`` (= the node rank) and ``LOCAL_RANK=0``, so
``torch.distributed.init_process_group(init_method="env://")`` works without a launcher. A launcher that
starts the processes itself (torchrun, Accelerate, DeepSpeed) gives each its own ``RANK``/``LOCAL_RANK``.

A Python command. Torchrun, Accelerate and DeepSpeed take a script, not a command. When argv[0] is a Python
interpreter (its name starts with ``python``) the launcher runs as that interpreter's module
(``python -m torch.distributed.run``, ``accelerate.commands.launch``, ``deepspeed.launcher.runner``), so the
launcher and its workers use the Job's interpreter and its packages whatever ``PATH`` says: ``python train.py
...`` hands the launcher ``train.py ...``, ``python -m pkg ...`` its module flag and ``pkg ...``, and any other
form (``python -u train.py``) the whole command with its "no python" flag. A command that is not Python runs
under the launcher's executable on ``PATH`` (``torchrun``, ``accelerate launch``, ``deepspeed``), with the
"no python" flag.

Nodus restarts a gang itself (a new epoch), so no launcher is told to restart workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

GANG_DIR = "/nodus/gang"
"""Where the agent writes :attr:`Launch.files` before the start; read-only in the sandbox."""

LAUNCHERS = ("Plain", "Torchrun", "Ray", "Verl", "Accelerate", "Deepspeed")
"""The values of ``spec.distributed.launcher``."""

HOSTFILE = "hostfile"
RAY_WRAPPER = "ray_gang.py"
# The interpreter for the Ray wrapper when the Job's command is not Python itself.
DEFAULT_PYTHON = "python3"


@dataclass(frozen=True)
class GangFacts:
    """What the assembled gang knows when one member's command starts."""

    rank: int
    """This node's rank, 0..size-1."""
    size: int
    """How many nodes."""
    gpus_per_node: int
    """G; 0 on CPU-only capacity (one process per node)."""
    rendezvous_host: str
    """Rank 0's address, as the other members reach it."""
    rendezvous_port: int
    """A free port rank 0 chose for the program."""
    epoch: int
    """The restart generation, from 1."""
    hosts: tuple[str, ...]
    """Every rank's host address, by rank."""

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not in a gang of {self.size}")
        if len(self.hosts) != self.size:
            raise ValueError(f"{len(self.hosts)} host addresses for a gang of {self.size}")
        if self.gpus_per_node < 0 or not 0 < self.rendezvous_port < 65536:
            raise ValueError(f"bad gpusPerNode {self.gpus_per_node} or port {self.rendezvous_port}")

    @property
    def processes_per_node(self) -> int:
        """max(G, 1): a CPU-only node runs one process."""
        return max(self.gpus_per_node, 1)

    @property
    def world_size(self) -> int:
        return self.size * self.processes_per_node


@dataclass(frozen=True)
class Launch:
    """What the agent runs for one member: argv, added environment, and files for :data:`GANG_DIR`."""

    argv: list[str]
    env: dict[str, str]
    files: dict[str, str]
    """File name -> content, written under :data:`GANG_DIR` before the start."""


def launch(launcher: str, argv: list[str], facts: GangFacts) -> Launch:
    """The command, environment and files of this member. Raises ValueError for an unknown launcher or an empty
    command. Does not mutate ``argv``."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; allowed: {', '.join(LAUNCHERS)}")
    if not argv:
        raise ValueError("the Job's command is empty")
    env = environment(facts)
    if launcher == "Plain":
        if facts.gpus_per_node <= 1:
            env.update(RANK=str(facts.rank), LOCAL_RANK="0")
        return Launch(argv=list(argv), env=env, files={})
    if launcher == "Torchrun":
        return Launch(argv=_under(_TORCHRUN, _torchrun_options(facts), argv), env=env, files={})
    if launcher == "Accelerate":
        if facts.gpus_per_node == 0:
            # accelerate --cpu runs one process and takes its rank from RANK (its MULTI_CPU mode).
            env.update(RANK=str(facts.rank), LOCAL_RANK="0")
        return Launch(argv=_under(_ACCELERATE, _accelerate_options(facts), argv), env=env, files={})
    if launcher == "Deepspeed":
        files = {HOSTFILE: hostfile(facts)}
        return Launch(argv=_under(_DEEPSPEED, _deepspeed_options(facts), argv), env=env, files=files)
    command = verl_command(argv, facts) if launcher == "Verl" else list(argv)
    python = argv[0] if _is_python(argv[0]) else DEFAULT_PYTHON
    wrapper = [python, "-I", f"{GANG_DIR}/{RAY_WRAPPER}", "--", *command]
    return Launch(argv=wrapper, env=env, files={RAY_WRAPPER: ray_wrapper_source()})


def environment(facts: GangFacts) -> dict[str, str]:
    """The variables every launcher's command gets (the module docstring's table)."""
    return {
        "NODUS_GANG_SIZE": str(facts.size),
        "NODUS_NODE_RANK": str(facts.rank),
        "NODUS_GPUS_PER_NODE": str(facts.gpus_per_node),
        "NODUS_WORLD_SIZE": str(facts.world_size),
        "NODUS_RENDEZVOUS_HOST": facts.rendezvous_host,
        "NODUS_RENDEZVOUS_PORT": str(facts.rendezvous_port),
        "NODUS_GANG_EPOCH": str(facts.epoch),
        "NODUS_GANG_HOSTS": ",".join(facts.hosts),
        "MASTER_ADDR": facts.rendezvous_host,
        "MASTER_PORT": str(facts.rendezvous_port),
        "NODE_RANK": str(facts.rank),
        "NNODES": str(facts.size),
        "WORLD_SIZE": str(facts.world_size),
    }


def hostfile(facts: GangFacts) -> str:
    """DeepSpeed's hostfile: one ``<name> slots=<max(G,1)>`` line per rank, in rank order.

    With ``--no_ssh`` DeepSpeed never contacts these names: it orders nodes by them and finds its own by
    ``--node_rank``. It refuses a name listed twice, so when ranks share an address (several ranks on one
    machine) each line is named ``<host>-rank<r>`` instead.
    """
    names = list(facts.hosts)
    if len(set(names)) < len(names):
        names = [f"{host}-rank{rank}" for rank, host in enumerate(names)]
    return "".join(f"{name} slots={facts.processes_per_node}\n" for name in names)


VERL_NODES, VERL_GPUS = "trainer.nnodes", "trainer.n_gpus_per_node"


def verl_command(argv: list[str], facts: GangFacts) -> list[str]:
    """The Job's command with ``trainer.nnodes`` and ``trainer.n_gpus_per_node`` appended as Hydra overrides,
    each unless the command sets it already (as ``key=``, ``+key=`` or ``++key=``)."""
    present = {arg.lstrip("+").split("=", 1)[0] for arg in argv if "=" in arg}
    extra = [
        f"{key}={value}"
        for key, value in ((VERL_NODES, facts.size), (VERL_GPUS, facts.processes_per_node))
        if key not in present
    ]
    return [*argv, *extra]


def ray_wrapper_source() -> str:
    """The text of ``nodus/agent/gangwrappers/ray_gang.py``, shipped into the sandbox as a file so that the
    member needs nothing of the agent's installation."""
    return resources.files("nodus.agent.gangwrappers").joinpath(RAY_WRAPPER).read_text(encoding="utf-8")


@dataclass(frozen=True)
class _Runner:
    """How a launcher is invoked: as a module of the Job's interpreter, or as an executable on PATH."""

    module: str
    executable: tuple[str, ...]
    module_flag: str
    no_python_flag: str


_TORCHRUN = _Runner("torch.distributed.run", ("torchrun",), "-m", "--no-python")
_ACCELERATE = _Runner("accelerate.commands.launch", ("accelerate", "launch"), "-m", "--no_python")
_DEEPSPEED = _Runner("deepspeed.launcher.runner", ("deepspeed",), "--module", "--no_python")


def _is_python(program: str) -> bool:
    return PurePosixPath(program).name.startswith("python")


def _under(runner: _Runner, options: list[str], argv: list[str]) -> list[str]:
    """``argv`` run by ``runner`` with ``options`` (the module docstring's "A Python command")."""
    python, rest = argv[0], argv[1:]
    if not _is_python(python):
        return [*runner.executable, *options, runner.no_python_flag, *argv]
    launcher = [python, "-m", runner.module, *options]
    if len(rest) >= 2 and rest[0] == "-m":
        return [*launcher, runner.module_flag, *rest[1:]]
    if rest and not rest[0].startswith("-"):
        return [*launcher, *rest]
    return [*launcher, runner.no_python_flag, *argv]


def _torchrun_options(facts: GangFacts) -> list[str]:
    # torchrun's default rendezvous is static: --node-rank and --master-addr/--master-port fix the gang.
    return [
        f"--nnodes={facts.size}",
        f"--nproc-per-node={facts.processes_per_node}",
        f"--node-rank={facts.rank}",
        f"--master-addr={facts.rendezvous_host}",
        f"--master-port={facts.rendezvous_port}",
        "--max-restarts=0",
    ]


def _accelerate_options(facts: GangFacts) -> list[str]:
    options = [
        "--num_machines",
        str(facts.size),
        "--num_processes",
        str(facts.world_size),
        "--machine_rank",
        str(facts.rank),
        "--main_process_ip",
        facts.rendezvous_host,
        "--main_process_port",
        str(facts.rendezvous_port),
    ]
    if facts.gpus_per_node == 0:
        options.append("--cpu")
    elif facts.size * facts.gpus_per_node > 1:
        options.append("--multi_gpu")
    return options


def _deepspeed_options(facts: GangFacts) -> list[str]:
    return [
        "--hostfile",
        f"{GANG_DIR}/{HOSTFILE}",
        "--num_nodes",
        str(facts.size),
        "--num_gpus",
        str(facts.processes_per_node),
        "--node_rank",
        str(facts.rank),
        "--master_addr",
        facts.rendezvous_host,
        "--master_port",
        str(facts.rendezvous_port),
        "--no_ssh",
    ]


_DESCRIPTIONS = {
    "Plain": (
        "Plain runs the command as written on every node, with the gang's environment (NODUS_NODE_RANK, "
        "NODUS_GANG_SIZE, MASTER_ADDR, MASTER_PORT, WORLD_SIZE and the rest); the program starts its own "
        "processes. With one process per node (gpusPerNode 0 or 1) it also gets RANK and LOCAL_RANK=0, so "
        'torch.distributed.init_process_group(init_method="env://") works as is.'
    ),
    "Torchrun": (
        "Torchrun runs the command under torch's elastic launcher on every node, with a static rendezvous at "
        "rank 0's host and port: --nnodes=N --nproc-per-node=max(G,1) --node-rank=R --master-addr --master-port "
        "--max-restarts=0 (Nodus restarts the gang itself). A Python command runs as `python -m "
        "torch.distributed.run ... script args` with the Job's interpreter; any other command as `torchrun ... "
        "--no-python command`. Each process gets RANK, LOCAL_RANK and WORLD_SIZE from torchrun."
    ),
    "Accelerate": (
        "Accelerate runs the script under `accelerate launch` on every node: --num_machines N --num_processes "
        "N*max(G,1) --machine_rank R --main_process_ip --main_process_port, plus --multi_gpu with GPUs or --cpu "
        "without (then RANK and LOCAL_RANK=0 are set too). A Python command runs as `python -m "
        "accelerate.commands.launch ... script args` with the Job's interpreter; any other command as "
        "`accelerate launch ... --no_python command`."
    ),
    "Deepspeed": (
        "Deepspeed runs the script under DeepSpeed's runner on every node without ssh: --hostfile "
        "/nodus/gang/hostfile (one line per rank, slots=max(G,1)) --num_nodes N --num_gpus max(G,1) --node_rank "
        "R --master_addr --master_port --no_ssh. A Python command runs as `python -m deepspeed.launcher.runner "
        "... script args`; any other as `deepspeed ... --no_python command`. DeepSpeed passes --local_rank to "
        "the script and sets CUDA_VISIBLE_DEVICES to 0..G-1 itself."
    ),
    "Ray": (
        "Ray starts a Ray cluster across the gang, then runs the command once, on rank 0. Rank 0 runs `ray start "
        "--head` on the rendezvous port, waits until all N nodes have joined, runs the command with "
        "RAY_ADDRESS=host:port, stops Ray and exits with the command's exit code. The other ranks run `ray start "
        "--address=host:port --block` and exit 0 when the head goes away. The wrapper doing this is written to "
        "/nodus/gang/ray_gang.py; `ray` must be installed next to the command's interpreter or on PATH."
    ),
    "Verl": (
        "Verl runs on Ray exactly as the Ray launcher does, and rank 0's command gets the Hydra overrides "
        "trainer.nnodes=N and trainer.n_gpus_per_node=max(G,1) appended unless it sets them itself."
    ),
}


def describe(launcher: str) -> str:
    """A one-paragraph contract of ``launcher``, for documentation. Raises ValueError for an unknown one."""
    if launcher not in _DESCRIPTIONS:
        raise ValueError(f"unknown launcher {launcher!r}; allowed: {', '.join(LAUNCHERS)}")
    return _DESCRIPTIONS[launcher]
