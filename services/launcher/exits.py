"""What a container's end means for its task: OpenPAI's exit code and a reason a user understands.

Pure, so the whole mapping is one table test. Tasks run as ``/bin/sh -c <command>``, so the shell's
own codes say what went wrong before the command ran:

==========================================  ======  ===============================================
what happened                               code    reason
==========================================  ======  ===============================================
exited 0                                    0       (none)
stopped because its user stopped the job    -210    stopped by user
killed by the kernel for its memory limit   -1200   out of memory (limit N MB)
stopped for writing past PAIQ_TASK_DISK_MB  -1206   stopped: it wrote N MiB to its container's ...
``sh`` exited 127 (command not found)       -1203   command not found: <last stderr line>
``sh`` exited 126 (found, not executable)   -1202   command not executable: <last stderr line>
killed by signal S (code 128+S)             128+S   killed by SIGKILL / terminated by SIGTERM / ...
any other code                              code    command exited with code N
==========================================  ======  ===============================================

A command that itself ends with ``exit 127`` cannot be told apart from a missing command; OpenPAI's
runtime had the same ambiguity. Engine failures (125) and image pulls (254) are decided where they
happen, before a container runs.
"""

from __future__ import annotations

import signal

from pydantic import BaseModel, ConfigDict

from shared.lifecycle import exitcodes
from shared.profiling.usage import Usage

MIB = 1024 * 1024


class ExitVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)
    code: int
    reason: str


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def classify_exit(*, exit_code: int, oom_killed: bool, memory_mb: int, stopped_by_user: bool,
                  stderr_tail: str = "", stopped_for: str = "") -> ExitVerdict:
    """``stopped_for``: why the launcher stopped the task itself (a limit it passed), "" when it did not."""
    if exit_code == 0:
        return ExitVerdict(code=0, reason="")
    if stopped_by_user:
        return ExitVerdict(code=exitcodes.STOPPED_BY_USER, reason="stopped by user")
    if stopped_for:
        return ExitVerdict(code=exitcodes.DISK_LIMIT_EXCEEDED, reason=stopped_for)
    if oom_killed:
        return ExitVerdict(code=exitcodes.OUT_OF_MEMORY, reason=f"out of memory (limit {memory_mb} MB)")
    last = _last_line(stderr_tail)
    if exit_code == 127:
        return ExitVerdict(code=exitcodes.COMMAND_NOT_FOUND,
                           reason="command not found (the shell exited 127)" + (f": {last}" if last else ""))
    if exit_code == 126:
        return ExitVerdict(code=exitcodes.COMMAND_NOT_EXECUTABLE,
                           reason="command not executable (the shell exited 126)" + (f": {last}" if last else ""))
    if 128 < exit_code < 160:
        name = _signal_name(exit_code - 128)
        verb = "terminated by" if name in {"SIGTERM", "SIGINT", "SIGHUP"} else "killed by"
        return ExitVerdict(code=exit_code, reason=f"{verb} {name} (exit code {exit_code})")
    return ExitVerdict(code=exit_code, reason=f"command exited with code {exit_code}")


def over_disk_limit(written_bytes: int, limit_mb: int) -> str:
    """Why a task that wrote ``written_bytes`` to its container's file system is stopped ("" while it may go
    on; a limit of 0 is none)."""
    if limit_mb <= 0 or written_bytes <= limit_mb * MIB:
        return ""
    return (f"stopped: it wrote {written_bytes / MIB:,.0f} MiB to its container's own file system, over this node's "
            f"limit of {limit_mb:,} MiB a task (PAIQ_TASK_DISK_MB); write large outputs to a storage mount")


def memory_before_oom(points: list[Usage], memory_mb: int) -> str:
    """The memory curve an OOM kill's diagnostics start with (the task's last samples, oldest first)."""
    if not points:
        return ""
    every = round(sum(p.span_ms for p in points) / len(points) / 1000)
    curve = ", ".join(str(round(p.mem_peak / MIB)) for p in points)
    return (f"memory before the OOM kill (MB, a sample every {every} s, oldest first): {curve}; "
            f"limit {memory_mb} MB")
