"""Which silent nodes are lost, told apart from an outage of the database everyone writes heartbeats to.

Pure. A launcher proves its node alive by writing a heartbeat to MongoDB; a node silent for the node
timeout is lost and its tasks end with -1001. But a heartbeat that cannot be written is silence too: a
database outage (a restart, a replica-set election, a network blip) longer than the timeout would make
every node look dead at once and restart every running job on the cluster. Two rules keep the
scheduler from taking its own blindness for lost nodes:

- **A full timeout of database first.** The scheduler judges only while the database has answered it
  without a break for at least the node timeout (:class:`DatabaseWatch`): after an outage, or after the
  scheduler starts or takes over, every launcher gets a whole timeout to be heard from again. A break is
  a failed round or a gap between two rounds much longer than their period (a frozen process).
- **Disruption** (as Kubernetes' node lifecycle controller does for a zone): when at least
  ``MIN_DISRUPTED`` of the nodes still counted live, and at least ``DISRUPTED_FRACTION`` of them, are
  silent at once, the control plane (the database, the network to it) is the likelier culprit than
  that many machines dying together: nothing is evicted until fewer are silent, and the operator is
  told why.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

# Kubernetes' unhealthyZoneThreshold: a zone with this fraction of its nodes not ready is "fully
# disrupted" and its evictions stop.
DISRUPTED_FRACTION = 0.55
# One silent node is always judged on its own: a single dead machine must be found on any cluster.
MIN_DISRUPTED = 2
# A gap between two database rounds longer than this many periods is a break in what the scheduler saw.
GAP_PERIODS = 3


class DatabaseWatch(BaseModel):
    """The scheduler's own view of the database: since when it has answered every round."""

    model_config = ConfigDict(frozen=True)

    reachable_since_ms: int | None = None
    last_ok_ms: int | None = None

    def observed(self, *, ok: bool, now_ms: int, period_ms: int) -> DatabaseWatch:
        """The view after a round that reached the database (``ok``) or failed to."""
        if not ok:
            return DatabaseWatch(reachable_since_ms=None, last_ok_ms=self.last_ok_ms)
        broken = (self.reachable_since_ms is None or self.last_ok_ms is None
                  or now_ms - self.last_ok_ms > GAP_PERIODS * period_ms)
        return DatabaseWatch(reachable_since_ms=now_ms if broken else self.reachable_since_ms, last_ok_ms=now_ms)

    def reachable_for_ms(self, now_ms: int) -> int:
        return 0 if self.reachable_since_ms is None else max(0, now_ms - self.reachable_since_ms)


class Heartbeat(BaseModel):
    """A node as its liveness is judged: when its launcher was last heard from, and whether it is lost."""

    model_config = ConfigDict(frozen=True)

    node_id: str
    heartbeat_ms: int
    lost: bool = False


class LivenessVerdict(BaseModel):
    """``lost``: the nodes to mark lost now. ``silent``: every live node past the timeout (lost or not).
    ``held_back``: why silent nodes are not judged lost (None when nothing is held back)."""

    model_config = ConfigDict(frozen=True)

    lost: tuple[str, ...] = ()
    silent: tuple[str, ...] = ()
    held_back: str | None = None


def judge_nodes(nodes: Sequence[Heartbeat], *, now_ms: int, timeout_ms: int, watch: DatabaseWatch) -> LivenessVerdict:
    """The nodes to mark lost now, and why any silent node is spared."""
    live = [n for n in nodes if not n.lost]
    silent = tuple(n.node_id for n in live if n.heartbeat_ms < now_ms - timeout_ms)
    if not silent:
        return LivenessVerdict()
    reachable = watch.reachable_for_ms(now_ms)
    if reachable < timeout_ms:
        return LivenessVerdict(silent=silent, held_back=(
            f"the database has answered this scheduler for only {reachable // 1000} s of the {timeout_ms // 1000} s "
            "node timeout: a launcher that could not write its heartbeat meanwhile is given the whole timeout"))
    if len(silent) >= MIN_DISRUPTED and len(silent) >= DISRUPTED_FRACTION * len(live):
        return LivenessVerdict(silent=silent, held_back=(
            f"{len(silent)} of {len(live)} nodes went silent together: more likely the database or the network "
            "to it than that many machines; no node is declared lost until fewer are silent"))
    return LivenessVerdict(lost=silent, silent=silent)
