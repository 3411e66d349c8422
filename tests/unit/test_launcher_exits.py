"""How a container's end becomes a task's exit code and reason (services.launcher.exits), as a table."""

from __future__ import annotations

import pytest

from services.launcher.exits import classify_exit

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("exit_code", "oom", "by_user", "stderr", "code", "reason"), [
    (0, False, False, "", 0, ""),
    (0, True, False, "", 0, ""),  # a child was OOM-killed but the command succeeded
    (0, False, True, "", 0, ""),  # it finished before the stop reached it
    (137, True, False, "", -1200, "out of memory (limit 256 MB)"),
    (1, True, False, "", -1200, "out of memory (limit 256 MB)"),
    (143, False, True, "", -210, "stopped by user"),
    (137, True, True, "", -210, "stopped by user"),
    (127, False, False, "/bin/sh: trainn: not found\n", -1203,
     "command not found (the shell exited 127): /bin/sh: trainn: not found"),
    (126, False, False, "sh: ./run.sh: Permission denied\n", -1202,
     "command not executable (the shell exited 126): sh: ./run.sh: Permission denied"),
    (127, False, False, "", -1203, "command not found (the shell exited 127)"),
    (137, False, False, "", 137, "killed by SIGKILL (exit code 137)"),
    (143, False, False, "", 143, "terminated by SIGTERM (exit code 143)"),
    (139, False, False, "", 139, "killed by SIGSEGV (exit code 139)"),
    (3, False, False, "boom\n", 3, "command exited with code 3"),
    (255, False, False, "", 255, "command exited with code 255"),
    (-1, False, False, "", -1, "command exited with code -1"),
])
def test_exit_table(exit_code: int, oom: bool, by_user: bool, stderr: str, code: int, reason: str) -> None:
    verdict = classify_exit(exit_code=exit_code, oom_killed=oom, memory_mb=256, stopped_by_user=by_user,
                            stderr_tail=stderr)
    assert (verdict.code, verdict.reason) == (code, reason)
