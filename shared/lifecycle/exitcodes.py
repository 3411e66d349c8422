"""Exit codes paiq gives a task or a job when the command's own code is not the answer (OpenPAI's)."""

from __future__ import annotations

STOPPED_BY_USER = -210
OUT_OF_MEMORY = -1200
NODE_LOST = -1001
PREEMPTED = -1004  # stopped by the scheduler for a job of higher priority or that reclaims its VC's quota
CONFIG_ERROR = -1100
IMAGE_PULL_FAILED = 254
ENGINE_FAILURE = 125
COMMAND_NOT_EXECUTABLE = -1202  # /bin/sh -c exited 126
COMMAND_NOT_FOUND = -1203  # /bin/sh -c exited 127
DISK_LIMIT_EXCEEDED = -1206  # stopped by its launcher: it wrote more than PAIQ_TASK_DISK_MB to its container
