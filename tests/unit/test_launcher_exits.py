"""How a container's end becomes a task's exit code and reason (services.launcher.exits), as a table."""

from __future__ import annotations

import pytest

from services.launcher.exits import classify_exit, over_disk_limit

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


STOPPED_FOR = "stopped: it wrote 70 MiB to its container's own file system, ..."


@pytest.mark.parametrize(("exit_code", "by_user", "code", "reason"), [
    (143, False, -1206, STOPPED_FOR),  # the launcher's stop: SIGTERM taken
    (137, False, -1206, STOPPED_FOR),  # ignored, killed after the grace
    (143, True, -210, "stopped by user"),  # its user's stop came first
    (0, False, 0, ""),  # it ended well before the stop reached it
])
def test_a_task_its_launcher_stopped_says_why(exit_code: int, by_user: bool, code: int, reason: str) -> None:
    verdict = classify_exit(exit_code=exit_code, oom_killed=False, memory_mb=256, stopped_by_user=by_user,
                            stopped_for=STOPPED_FOR)
    assert (verdict.code, verdict.reason) == (code, reason)


@pytest.mark.parametrize(("written", "limit_mb", "stopped"), [
    (64 * 1024 * 1024, 64, False),
    (64 * 1024 * 1024 + 1, 64, True),
    (10**12, 0, False),  # no limit
    (0, 1, False),
])
def test_the_disk_limit_is_passed_only_past_it(written: int, limit_mb: int, stopped: bool) -> None:
    reason = over_disk_limit(written, limit_mb)
    assert bool(reason) is stopped
    if stopped:
        assert f"limit of {limit_mb:,} MiB a task (PAIQ_TASK_DISK_MB)" in reason and "storage mount" in reason
