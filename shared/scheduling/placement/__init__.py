"""Gang placement as a pure function: (cluster snapshot, job config, seed) -> Plan | Unplaceable.

Every task of the job gets a node, distinct GPU indices of the asked type and ports that no other task
on that node holds, or the job gets nothing and the reasons with counts ("3 nodes lack 4 free GPUs of
type V100; 2 nodes lack 1 free port in 20000-20099"). No I/O happens here.

Modules: ``values`` (Plan, Unplaceable), ``snapshot`` (the cluster and its indexes), ``buckets`` (the
index structure), ``checks`` (feasibility checkers), ``order`` (scoring: pack / spread), ``assign``
(GPUs and ports of a chosen node), ``reasons`` (counts of why not), ``place`` (the wiring).
"""

from shared.scheduling.placement.order import Strategy
from shared.scheduling.placement.place import default_strategy, place
from shared.scheduling.placement.snapshot import ClusterSnapshot, NodeUsage
from shared.scheduling.placement.values import Plan, TaskPlacement, Unplaceable

__all__ = ["ClusterSnapshot", "NodeUsage", "Plan", "Strategy", "TaskPlacement", "Unplaceable",
           "default_strategy", "place"]
