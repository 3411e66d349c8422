"""python -m services.launcher: the agent of one node (needs PAIQ_MONGODB_URI and PAIQ_AMQP_URL).

The node is described by PAIQ_NODE_ID, PAIQ_NODE_IP, PAIQ_NODE_CPUS, PAIQ_NODE_MEMORY_MB,
PAIQ_NODE_GPUS (e.g. ``0:V100,1:V100``) and PAIQ_NODE_PORT_RANGE (e.g. ``20000-29999``).
"""

from __future__ import annotations

import os

from services.launcher import start
from shared.runtime.service import run_service

if __name__ == "__main__":
    run_service("launcher", start, os.environ)
