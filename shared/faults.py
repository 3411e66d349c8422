"""Fault points a test can arm: ``PAIQ_FAULT_POINTS=name:N[,name:N]`` kills this process (SIGKILL, as ``kill
-9`` does: nothing flushed, nothing closed) the N-th time it passes the point ``name``. Unset, a point costs a
dictionary lookup. The points are where a crash is most telling:

- ``journal-committed``: a writer's transaction with journal entries has just committed, before anything
  of it is published (the window the journal exists for);
- ``journal-published``: the relay has published a numbered batch and not yet recorded that it did (it is
  published again by the next leader, with the same ids).
"""

from __future__ import annotations

import os
import signal

_ARMED: dict[str, int] = {}
for _item in filter(None, os.environ.get("PAIQ_FAULT_POINTS", "").split(",")):
    _name, _, _count = _item.partition(":")
    _ARMED[_name.strip()] = int(_count or "1")


def fault_point(name: str) -> None:
    """Die here (SIGKILL) if the point is armed and this is its N-th pass."""
    left = _ARMED.get(name)
    if left is None:
        return
    if left > 1:
        _ARMED[name] = left - 1
        return
    os.kill(os.getpid(), signal.SIGKILL)
