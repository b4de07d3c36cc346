"""A gang rank's way from its prepared sandbox to its command: assemble with the peers, then launch.

``running`` calls :func:`join` for an attempt with ``spec.gang`` after the inputs are in place and the
gang checkpoint is restored, and before the command starts: the rank meshes with its peers
(``meshing.Mesh``: register, probe, wait until every rank has probed), and the launcher
(``launchers.launch``) turns the Job's command into what this node runs, with the environment
contract and files under ``/nodus/gang``. The mesh endpoint keeps answering peers' probes until
:meth:`Joined.close` (when the attempt ends).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from nodus.agent import hostfiles, launchers, meshing
from nodus.agent.layout import SANDBOX_NODUS_DIR, AttemptLayout
from nodus.apis.v1 import objects
from nodus.client import Client


@dataclass
class Joined:
    """A rank that met its gang: what to run, the extra environment, and the mesh to close at the end."""

    argv: list[str]
    env: dict[str, str]
    mesh: meshing.Mesh
    assembled: meshing.Assembled

    async def close(self) -> None:
        await self.mesh.close()


async def join(client: Client, attempt: objects.Attempt, layout: AttemptLayout, argv: list[str], host: str) -> Joined:
    """Mesh with the peers and launch: raises ``meshing.MeshFailed`` when a peer cannot be reached or ended.

    Cancellation-safe: a stop while the peers are awaited closes the endpoint."""
    spec, gang = attempt.spec, attempt.spec.gang
    if gang is None:
        raise meshing.MeshFailed(f"attempt {attempt.metadata.name} is not a rank of a gang")
    mesh = meshing.Mesh(client, attempt, host=host)
    try:
        assembled = await mesh.assemble()
    except BaseException:
        await mesh.close()
        raise
    facts = launchers.GangFacts(
        rank=spec.rank or 0,
        size=gang.size,
        gpus_per_node=gang.gpus_per_node,
        rendezvous_host=assembled.rendezvous_host,
        rendezvous_port=assembled.rendezvous_port,
        epoch=gang.epoch,
        hosts=assembled.hosts,
    )
    launch = launchers.launch(gang.launcher, argv, facts)
    await asyncio.to_thread(_write_files, layout, launch.files)
    return Joined(argv=launch.argv, env=launch.env, mesh=mesh, assembled=assembled)


def _write_files(layout: AttemptLayout, files: dict[str, str]) -> None:
    """Write the launcher's files into ``/nodus/gang``, each replacing whatever is at its name (never written
    through a link an earlier run of the program may have left there: ``nodus.agent.hostfiles``)."""
    gang = hostfiles.Location(layout.gang, (), f"{SANDBOX_NODUS_DIR}/gang")
    for name, content in files.items():
        mode = 0o755 if name.endswith((".py", ".sh")) else 0o644
        hostfiles.write_file(gang.child(name), content.encode(), mode)
