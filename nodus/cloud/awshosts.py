"""What an EC2 instance that becomes a Nodus host is told: its user data, and the tags it carries.

The user data is a shell script that cloud-init runs once, as root, at the instance's first boot. It writes the
API server's CA certificate (inlined) and the host's bootstrap token (a file only root reads) under
``/etc/nodus``, runs the operator's install command (by default: a virtualenv in ``/opt/nodus`` with ``pip
install nodus``), and starts ``nodus agent`` as the systemd unit ``nodus-agent.service``, so that the agent gets
the instance's shutdown grace (SIGTERM on ``terminate``) and comes back after a crash. The agent joins with the
token (ADR 0035), which is bound to its node name and revoked once it registered; nothing else in the user data
is secret.

The instance's tags let a later controller find it without any state of its own (ADR 0049): the cluster it belongs
to, the node name and the uid of the Node it was started for (a Node deleted and created again under the same name
is another host), and ``Name`` for the EC2 console.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

CLUSTER_TAG = "nodus.dev/cluster"
NODE_TAG = "nodus.dev/node"
NODE_UID_TAG = "nodus.dev/node-uid"
OFFERING_TAG = "nodus.dev/offering"

CA_PATH = "/etc/nodus/ca.crt"
TOKEN_PATH = "/etc/nodus/join-token"
UNIT = "nodus-agent.service"
DEFAULT_INSTALL = "python3 -m venv /opt/nodus && /opt/nodus/bin/pip install --quiet nodus"
DEFAULT_AGENT = "/opt/nodus/bin/nodus"
METADATA_URL = "http://169.254.169.254"


@dataclass(frozen=True)
class Bootstrap:
    """What every host of one cluster gets: where the API server is, how to install the agent, and its flags."""

    server: str
    ca_pem: str
    install_command: str = DEFAULT_INSTALL
    agent_path: str = DEFAULT_AGENT
    metadata_url: str = METADATA_URL
    # Extra agent flags for every host, such as ("--runtime", "podman").
    agent_flags: tuple[str, ...] = ()

    def agent_command(self, node_name: str, offering: str) -> list[str]:
        """The agent's command line on the host (the unit's ``ExecStart``)."""
        return [
            self.agent_path,
            "agent",
            "--server",
            self.server,
            "--certificate-authority",
            CA_PATH,
            "--join-token-file",
            TOKEN_PATH,
            "--node-name",
            node_name,
            "--offering",
            offering,
            "--metadata-url",
            self.metadata_url,
            *self.agent_flags,
        ]

    def user_data(self, node_name: str, offering: str, join_token: str) -> str:
        """The cloud-init shell script for the host of ``node_name``."""
        pem = self.ca_pem.strip()
        if "NODUS_CA" in pem or not pem.startswith("-----BEGIN CERTIFICATE-----"):
            raise ValueError("the CA file must hold PEM certificates")
        command = shlex.join(self.agent_command(node_name, offering))
        return "\n".join(
            [
                "#!/bin/sh",
                f"# A Nodus host: node {node_name}, offering {offering} (written by the aws provider).",
                "set -eu",
                "install -d -m 0755 /etc/nodus",
                f"cat > {CA_PATH} <<'NODUS_CA'",
                pem,
                "NODUS_CA",
                "umask 077",
                f"printf '%s\\n' {shlex.quote(join_token)} > {TOKEN_PATH}",
                "umask 022",
                self.install_command,
                f"cat > /etc/systemd/system/{UNIT} <<'NODUS_UNIT'",
                "[Unit]",
                "Description=Nodus node agent",
                "After=network-online.target",
                "Wants=network-online.target",
                "[Service]",
                f"ExecStart={command}",
                # A crash restarts it (it rejoins its Node); an agent that exits on purpose (its Node is over) stays
                # down, and the controllers terminate the instance.
                "Restart=on-abnormal",
                "KillSignal=SIGTERM",
                "TimeoutStopSec=120",
                "[Install]",
                "WantedBy=multi-user.target",
                "NODUS_UNIT",
                f"systemctl daemon-reload && systemctl enable --now {UNIT}",
                "",
            ]
        )


def tags(cluster: str, node_name: str, node_uid: str, offering: str) -> dict[str, str]:
    """The tags of the instance for ``node_name``."""
    return {
        CLUSTER_TAG: cluster,
        NODE_TAG: node_name,
        NODE_UID_TAG: node_uid,
        OFFERING_TAG: offering,
        "Name": f"nodus-{cluster}-{node_name}",
    }


def client_token(node_uid: str) -> str:
    """EC2's idempotency token for the boot of one Node (at most 64 ASCII characters): a retried ``RunInstances``
    for the same Node returns the instance the first one started."""
    return f"nodus-{node_uid}"[:64]
