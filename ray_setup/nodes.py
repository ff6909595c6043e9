"""Ray's nodes as a person reads them. A node's name is its label `name` where the cluster gave one
(tools/local_cluster.py names its nodes so; on a real cluster, `ray start --labels name=gpu-box-1`),
and otherwise its host and the first 8 digits of Ray's id (nodes of one machine share a host). Files
a program reads (a sweep's CSV, summary.json) keep Ray's full id beside the name."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

from ray_setup.installed import ray_node_id

NAME_LABEL = "name"


def node_name(node: Mapping[str, Any]) -> str:
    """The name of one entry of `ray.nodes()`."""
    labels = node.get("Labels") or {}
    if isinstance(labels, Mapping) and isinstance(labels.get(NAME_LABEL), str) and labels[NAME_LABEL]:
        return str(labels[NAME_LABEL])
    return f"{node.get('NodeManagerHostname') or node.get('NodeManagerAddress') or '?'}/{str(node.get('NodeID', ''))[:8]}"


def node_names(ray: Any) -> dict[str, str]:
    """{Ray's node id: its name} of every node the cluster knows, lost ones included; empty when
    the cluster cannot be asked (its head gone)."""
    try:
        return {str(node["NodeID"]): node_name(node) for node in ray.nodes()}
    except Exception:  # Ray's errors for a GCS that no longer answers, whatever its class
        return {}


def name_of(names: Mapping[str, str], node_id: str | None) -> str:
    """`node_id`'s name in `names`, or the first 8 digits of the id where the cluster did not say."""
    if node_id is None:
        return "-"
    return names.get(node_id) or node_id[:8]


@functools.cache
def this_node_name() -> str | None:
    """The name of the node this process runs on (a sweep trial's, a member's), or None when it is
    connected to no Ray. Asked once: a process does not move."""
    node = ray_node_id()
    return name_of(node_names(sys.modules["ray"]), node) if node is not None else None
