"""The flags of ``nodus controllers --provider aws``: where EC2 is, what the instances run, and how they join.

AWS credentials come from boto3's usual chain (the environment, ``~/.aws``, an instance role); nothing here takes
them. The API server address and CA the hosts use default to the controllers' kubeconfig's: set them when the
hosts reach the API server at another address than the controllers do (docs/providers.md).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from nodus.apimachinery.units import parse_duration

if TYPE_CHECKING:
    from nodus.cloud.provider import Provider


def add_aws_flags(parser: argparse.ArgumentParser) -> None:
    def pairs(flag: str, meta: str, text: str) -> None:
        parser.add_argument(flag, action="append", default=[], metavar=meta, help=text)

    parser.add_argument("--aws-cluster", help="--provider aws: this cluster's id, tagged on every instance (required)")
    pairs(
        "--aws-image",
        "REGION=AMI",
        "--provider aws: the AMI for hosts in REGION (repeatable; required: it boots only in regions with an AMI)",
    )
    parser.add_argument("--aws-endpoint-url", help="--provider aws: another EC2 endpoint (moto's server in tests)")
    pairs("--aws-subnet", "REGION=SUBNET", "--provider aws: the subnet of hosts in REGION (repeatable)")
    pairs("--aws-security-group", "REGION=GROUP", "--provider aws: a security group of hosts in REGION (repeatable)")
    parser.add_argument("--aws-key-name", help="--provider aws: the EC2 key pair of the hosts (for ssh)")
    parser.add_argument("--aws-instance-profile", help="--provider aws: the IAM instance profile of the hosts")
    parser.add_argument(
        "--aws-server", help="--provider aws: the API server URL hosts dial (default: the kubeconfig's server)"
    )
    parser.add_argument(
        "--aws-certificate-authority",
        type=Path,
        help="--provider aws: the CA file of the API server, inlined in the hosts' user data (default: the "
        "kubeconfig's)",
    )
    parser.add_argument(
        "--aws-install-command",
        help="--provider aws: the shell line that installs the agent on a host (default: a virtualenv in /opt/nodus "
        "with pip install nodus; add --index-url for your own index)",
    )
    parser.add_argument("--aws-agent-path", help="--provider aws: the nodus command on a host (/opt/nodus/bin/nodus)")
    parser.add_argument(
        "--aws-agent-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="--provider aws: an extra flag of every host's agent (repeatable; write it as --aws-agent-flag=--runtime "
        "--aws-agent-flag=podman)",
    )
    parser.add_argument("--aws-capacity", type=int, help="--provider aws: hosts per offering (default: unknown)")
    pairs("--aws-capacity-for", "OFFERING=HOSTS", "--provider aws: the hosts of one offering (repeatable)")
    parser.add_argument(
        "--aws-sweep-interval",
        type=parse_duration,
        default=timedelta(minutes=1),
        help="--provider aws: how often instances no Node accounts for are looked for and terminated (default 1m)",
    )


def aws_provider(args: argparse.Namespace, kubeconfig: Path) -> Callable[[], Provider]:
    """The aws provider the flags describe (exits with a message naming the flag that is wrong)."""
    from nodus.client import ClientConfig
    from nodus.cloud import awshosts
    from nodus.cloud.aws import AwsConfig, AwsProvider

    if not args.aws_cluster:
        raise SystemExit("--provider aws needs --aws-cluster ID: the tag that tells this cluster's instances apart")
    images = _pairs("--aws-image", args.aws_image)
    if not images:
        raise SystemExit("--provider aws needs --aws-image REGION=AMI for each region hosts may run in")
    server = ClientConfig.from_kubeconfig(kubeconfig)
    ca_file = args.aws_certificate_authority or (Path(server.ca_file) if server.ca_file else None)
    if ca_file is None:
        raise SystemExit("--provider aws needs --aws-certificate-authority FILE (the kubeconfig names no CA)")
    try:
        ca_pem = ca_file.read_text()
    except OSError as exc:
        raise SystemExit(f"--aws-certificate-authority: {exc}") from None
    bootstrap = awshosts.Bootstrap(
        server=(args.aws_server or server.server).rstrip("/"),
        ca_pem=ca_pem,
        install_command=args.aws_install_command or awshosts.DEFAULT_INSTALL,
        agent_path=args.aws_agent_path or awshosts.DEFAULT_AGENT,
        agent_flags=tuple(args.aws_agent_flag),
    )
    try:
        bootstrap.user_data("check", "check", "check.check")
    except ValueError as exc:
        raise SystemExit(f"--aws-certificate-authority: {exc}") from None
    groups: dict[str, tuple[str, ...]] = {}
    for region, group in _pair_list("--aws-security-group", args.aws_security_group):
        groups[region] = (*groups.get(region, ()), group)
    capacity = {
        name: _count("--aws-capacity-for", name, value)
        for name, value in _pair_list("--aws-capacity-for", args.aws_capacity_for)
    }
    config = AwsConfig(
        cluster=args.aws_cluster,
        bootstrap=bootstrap,
        images=images,
        endpoint_url=args.aws_endpoint_url,
        subnets=_pairs("--aws-subnet", args.aws_subnet),
        security_groups=groups,
        key_name=args.aws_key_name,
        instance_profile=args.aws_instance_profile,
        capacity=args.aws_capacity,
        capacity_overrides=capacity,
    )
    return functools.partial(AwsProvider, config)


def _pair_list(flag: str, texts: list[str]) -> list[tuple[str, str]]:
    out = []
    for text in texts:
        key, _, value = text.partition("=")
        if not key or not value:
            raise SystemExit(f"{flag} wants KEY=VALUE, not {text!r}")
        out.append((key, value))
    return out


def _pairs(flag: str, texts: list[str]) -> dict[str, str]:
    return dict(_pair_list(flag, texts))


def _count(flag: str, key: str, value: str) -> int:
    if not value.isdigit():
        raise SystemExit(f"{flag} wants {key}=HOSTS (a whole number), not {key}={value}")
    return int(value)
