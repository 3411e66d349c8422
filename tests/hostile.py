"""What a hostile job tries from inside its container, and what the host sees of it (tests/e2e/test_hostile_jobs.py).

The probe is a busybox ``sh`` script put in the job's codeDir with two MongoDB wire messages (an
unauthenticated ``find`` of every job's SSH keys, and an ``insert`` of a forged administrator token); it
prints one ``RESULT <name> <value>`` line per attempt, read back from the task's log.
"""

from __future__ import annotations

import base64
import re
import struct
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import bson

PROBE = r"""#!/bin/sh
# Every attempt prints RESULT <name> <value>; nothing here may stop the script.
here=$(dirname "$0")
reach() {  # name address port: open when a connection is made
  if nc -w 2 "$2" "$3" </dev/null >/dev/null 2>&1; then echo "RESULT $1 open"; else echo "RESULT $1 closed"; fi
}
wire() {  # name address port message-file: the server's answer, base64 (none: no answer)
  out=$( (cat "$4"; sleep 2) | nc -w 3 "$2" "$3" 2>/dev/null | base64 | tr -d '\n')
  echo "RESULT $1 ${out:-none}"
}
read_from() {  # name address port: the first line it sends
  out=$(nc -w 3 "$2" "$3" </dev/null 2>/dev/null | head -n 1)
  echo "RESULT $1 ${out:-none}"
}
for target in $TARGETS; do  # address:port
  reach "port-$target" "${target%:*}" "${target##*:}"
done
for target in $DATABASES; do
  wire "find-$target" "${target%:*}" "${target##*:}" "$here/find.bin"
  wire "insert-$target" "${target%:*}" "${target##*:}" "$here/insert.bin"
done
for path in /var/run/docker.sock /run/docker.sock "$DATA_DIR" "$DATA_DIR/db-login.json" "$DATA_DIR/secrets.key"; do
  if [ -e "$path" ]; then echo "RESULT path-$path visible"; else echo "RESULT path-$path absent"; fi
done
echo "RESULT processes $(ps -o args | grep -c '[a]lice-marker')"
echo "RESULT files $(find / -xdev -name 'alice-secret*' 2>/dev/null | wc -l)"
read_from neighbour-private "$NEIGHBOUR_IP" 7777
read_from neighbour-private-at-node "$NODE_IP" 7777
read_from neighbour-public "$NODE_IP" "$NEIGHBOUR_PORT"
echo "RESULT ssh-files $(ls /root/.ssh 2>/dev/null | tr '\n' ' ')"
echo "RESULT ssh-keys $(cat /root/.ssh/* 2>/dev/null | base64 | tr -d '\n')"
echo "RESULT done yes"
"""


def op_msg(doc: dict[str, Any], request_id: int = 1) -> bytes:
    """One MongoDB OP_MSG (section 0: the command's document), as a driver sends it."""
    body = struct.pack("<I", 0) + b"\x00" + bson.encode(doc)
    return struct.pack("<iiii", 16 + len(body), request_id, 0, 2013) + body


def answer(encoded: str) -> dict[str, Any] | None:
    """The document a server answered (``RESULT find-... <base64>``); None when it answered nothing."""
    if encoded == "none":
        return None
    raw = base64.b64decode(encoded)
    length = struct.unpack("<i", raw[16 + 4 + 1:16 + 4 + 1 + 4])[0]
    return dict(bson.decode(raw[16 + 4 + 1:16 + 4 + 1 + length]))


def write_probe(folder: Path, database: str) -> None:
    """The probe and its two wire messages, in ``folder`` (a job's codeDir)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.sh").write_text(PROBE)
    (folder / "find.bin").write_bytes(op_msg({"find": "job_keys", "filter": {}, "$db": database}))
    (folder / "insert.bin").write_bytes(op_msg({
        "insert": "tokens", "$db": database,
        "documents": [{"_id": "forged-by-a-job", "user": "root", "admin": True, "kind": "user"}]}, 2))


def results(log: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in log.splitlines():
        m = re.match(r"RESULT (\S+) ?(.*)$", line.strip())
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


def host_addresses() -> list[str]:
    """Every IPv4 address of this host (loopback, the bridges' gateways, its network's)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return sorted({m.group(1) for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/", out)})


def _children(pids: Iterable[int]) -> set[int]:
    """``pids`` and every process descended from them."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found = set(pids)
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def listening_ports(pids: Iterable[int]) -> set[int]:
    """The TCP ports the processes ``pids`` (and their children) listen on: every port the platform serves."""
    inodes: set[str] = set()
    for pid in _children(pids):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = fd.readlink().name
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
