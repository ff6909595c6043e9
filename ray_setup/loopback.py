"""Ray on this machine's loopback, and how a cluster's address is read.

Ray gives a node the machine's network address, and a node's servers listen on every interface
unless that address is 127.0.0.1. `ray.init` turns a loopback `_node_ip_address` back into the
network address unless Ray was imported with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, Ray's switch
for a single-machine Ray: so it is set before the first `import ray` wherever a Ray of ours (a
private one, tools/local_cluster.py's nodes, a driver joining a loopback cluster) must stay there.
"""

from __future__ import annotations

import ipaddress
import os
import re

LOOPBACK = "127.0.0.1"
LOCAL_ONLY_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # read once, when `ray` is first imported


def gcs_target(address: str) -> tuple[str, int] | None:
    """(host, port) of a GCS address (`auto` through RAY_ADDRESS, as Ray reads it); None for a Ray
    Client address (`ray://`) or an `auto` Ray finds by itself."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
    match = re.fullmatch(r"([^\s:/]+):(\d{1,5})", address)
    return (match[1], int(match[2])) if match else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
