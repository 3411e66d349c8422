"""Where a node's tasks live on the network, settled once when the launcher starts.

- ``bridge`` (the default): every task joins the task network (``PAIQ_TASK_NETWORK``, made by the engine
  driver when missing), a bridge on which containers reach one another only through published ports. Each
  task's declared ports are published 1:1 on the node's address, which is what its ``PAI_*_IP`` variables
  and its peers' host lists name: ``PAIQ_NODE_IP`` when the operator gives one (a multi-node cluster: an
  address other nodes reach), else the task network's gateway, an address of this host that its tasks
  reach too. Nothing the host serves on loopback (the embedded database, the API, the ops ports, a Docker
  engine on TCP) is reachable from a task.
- ``host``: tasks share the host's network, as OpenPAI ran them; they reach everything the host listens
  on. ``PAIQ_NODE_IP`` defaults to loopback there.
"""

from __future__ import annotations

import dataclasses
import ipaddress

from services.launcher.deps import LauncherDeps
from shared.errors import SettingsError


async def with_address(deps: LauncherDeps) -> LauncherDeps:
    """``deps`` with the node's address resolved (and, on the bridge, the task network made)."""
    options, node = deps.options, deps.node
    if options.network == "host":
        return deps
    if node.ip and _loopback(node.ip):
        raise SettingsError("PAIQ_NODE_IP", f"must not be a loopback address with bridge networking, got {node.ip!r}: "
                            "tasks on the task network cannot reach one another there; unset it (the task "
                            "network's gateway is used) or give an address other nodes reach")
    gateway = await deps.driver.ensure_network(options.task_network)
    if node.ip:
        return deps
    node = node.model_copy(update={"ip": gateway})
    return dataclasses.replace(deps, settings=deps.settings.model_copy(update={"node": node}))


def _loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:  # a host name: the operator's to resolve
        return ip == "localhost"
