"""Exit codes paiq gives a task or a job when the command's own code is not the answer (OpenPAI's)."""

from __future__ import annotations

STOPPED_BY_USER = -210
OUT_OF_MEMORY = -1200
NODE_LOST = -1001
CONFIG_ERROR = -1100
IMAGE_PULL_FAILED = 254
ENGINE_FAILURE = 125
