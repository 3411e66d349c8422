"""Virtual clusters: who may use which share of the cluster. Pure: quotas, access and their reasons.

A virtual cluster (VC) has a quota, a percentage of the cluster's CPUs, memory and GPUs, and the users
or groups allowed in it (``*`` for everyone). ``default`` always exists, is open to everyone, and gets
what the other VCs leave (100% minus their quotas, per resource), as OpenPAI's default VC did.

A VC may also borrow: run beyond its quota, up to ``borrowing`` more (percent of the cluster, per
resource; none unless the operator sets it), on capacity the other VCs leave idle. The owner takes it
back by preemption when its own jobs need it (:mod:`shared.scheduling.borrowing`, :mod:`shared.scheduling.preemption`).

An administrator may stop a VC (not ``default``): it then refuses new jobs, while the jobs it holds run on and
its queue is scheduled as before, so it drains, as a stopped YARN queue did under OpenPAI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from shared.errors import SettingsError

DEFAULT_VC = "default"
VcName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,64}$")]
Percent = Annotated[float, Field(ge=0, le=100)]


class Quota(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    cpus: Percent = 0
    memory: Percent = 0
    gpus: Percent = 0


class VirtualCluster(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: VcName
    quota: Quota = Quota()
    borrowing: Quota = Quota()  # how far beyond its quota it may run on others' idle capacity
    users: tuple[str, ...] = ("*",)
    groups: tuple[str, ...] = ()
    # PUT /api/v2/virtual-clusters/{vc}/status: a stopped VC takes no new jobs; those it holds, queued or
    # running, go on (OpenPAI's YARN queue STOPPED). Set only by that route (a PUT of the VC keeps it).
    stopped: bool = False

    def admits(self, user: str, groups: tuple[str, ...] = ()) -> bool:
        return "*" in self.users or user in self.users or bool(set(groups) & set(self.groups))


class Resources(BaseModel):
    model_config = ConfigDict(frozen=True)
    cpus: float = 0
    memory_mb: float = 0
    gpus: float = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(cpus=self.cpus + other.cpus, memory_mb=self.memory_mb + other.memory_mb,
                         gpus=self.gpus + other.gpus)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(cpus=self.cpus - other.cpus, memory_mb=self.memory_mb - other.memory_mb,
                         gpus=self.gpus - other.gpus)

    def floor(self) -> Resources:
        """Negative amounts as 0."""
        return Resources(cpus=max(0.0, self.cpus), memory_mb=max(0.0, self.memory_mb), gpus=max(0.0, self.gpus))


def with_default(configured: list[VirtualCluster]) -> dict[str, VirtualCluster]:
    """The configured VCs plus ``default``, whose quota is what the others leave."""
    others = [vc for vc in configured if vc.name != DEFAULT_VC]
    left = Quota(cpus=max(0.0, 100 - sum(v.quota.cpus for v in others)),
                 memory=max(0.0, 100 - sum(v.quota.memory for v in others)),
                 gpus=max(0.0, 100 - sum(v.quota.gpus for v in others)))
    configured_default = next((v for v in configured if v.name == DEFAULT_VC), None)
    borrowing = configured_default.borrowing if configured_default else Quota()
    return {DEFAULT_VC: VirtualCluster(name=DEFAULT_VC, quota=left, borrowing=borrowing),
            **{v.name: v for v in others}}


def limit(vc: VirtualCluster, capacity: Resources) -> Resources:
    return share_of(vc.quota, capacity)


def share_of(percent: Quota, capacity: Resources) -> Resources:
    return Resources(cpus=capacity.cpus * percent.cpus / 100, memory_mb=capacity.memory_mb * percent.memory / 100,
                     gpus=capacity.gpus * percent.gpus / 100)


def quota_problem(vc: VirtualCluster, capacity: Resources, used: Resources, request: Resources) -> str | None:
    """Why ``request`` may not start in ``vc`` now (its running jobs would exceed the quota), or None."""
    cap = limit(vc, capacity)
    after = used + request
    for what, need, have, total in (("GPUs", request.gpus, cap.gpus - used.gpus, cap.gpus),
                                    ("CPUs", request.cpus, cap.cpus - used.cpus, cap.cpus),
                                    ("MB of memory", request.memory_mb, cap.memory_mb - used.memory_mb,
                                     cap.memory_mb)):
        if _pct(vc, what) >= 100:
            continue  # the whole cluster: placement itself says better why something does not fit
        if need and getattr(after, _FIELD[what]) > getattr(cap, _FIELD[what]) + 1e-9:
            if need > total + 1e-9:
                return (f"it needs {need:g} {what} but virtual cluster {vc.name}'s quota is {total:g} in all "
                        f"({_pct(vc, what):g}% of the cluster): it cannot start until the quota grows")
            return (f"virtual cluster {vc.name} would exceed its quota: the job needs {need:g} {what}, "
                    f"{max(0.0, have):g} of {total:g} are free in the quota")
    return None


_FIELD = {"GPUs": "gpus", "CPUs": "cpus", "MB of memory": "memory_mb"}


def _pct(vc: VirtualCluster, what: str) -> float:
    return {"GPUs": vc.quota.gpus, "CPUs": vc.quota.cpus, "MB of memory": vc.quota.memory}[what]


def load_config(path: Path) -> list[VirtualCluster]:
    """The operator's VC file: a YAML list of {name, quota: {cpus, memory, gpus}, users, groups}."""
    try:
        rows = yaml.safe_load(path.read_text()) or []
        if not isinstance(rows, list):
            raise SettingsError("PAIQ_VIRTUAL_CLUSTERS", f"{path} must be a YAML list of virtual clusters")
        vcs = [VirtualCluster.model_validate(row) for row in rows]
    except OSError as e:
        raise SettingsError("PAIQ_VIRTUAL_CLUSTERS", f"cannot read {path}: {e.strerror}") from e
    except (yaml.YAMLError, ValidationError) as e:
        raise SettingsError("PAIQ_VIRTUAL_CLUSTERS", f"{path} is not a valid virtual cluster list: {e}") from e
    problem = total_problem(vcs)
    if problem:
        raise SettingsError("PAIQ_VIRTUAL_CLUSTERS", f"{path}: {problem}")
    return vcs


def total_problem(vcs: list[VirtualCluster]) -> str | None:
    names = [v.name for v in vcs]
    if len(set(names)) != len(names):
        return "a virtual cluster is listed twice"
    for what in ("cpus", "memory", "gpus"):
        total = sum(getattr(v.quota, what) for v in vcs if v.name != DEFAULT_VC)
        if total > 100 + 1e-9:
            return f"the quotas of {what} add up to {total:g}%, more than 100%"
    return None
