"""SSH into a task, as OpenPAI's container scripts set it up (pure: the files and the command).

Before the task's command starts, the launcher puts into its container the job's key pair and
``authorized_keys`` under ``/root/.ssh`` and a small script, which the command runs first:

- ``/root/.ssh/config`` gets a ``Host <role>-<index>`` for every task of the job, from the PAI_*
  variables every task sees (``PAI_HOST_IP_<r>_<i>``, ``PAI_PORT_LIST_<r>_<i>_ssh``), so ``ssh
  worker-0`` reaches a peer (seed 000);
- if the image has ``sshd`` (OpenPAI's images did), it is started on the task's ``ssh`` port
  (``PAI_CONTAINER_SSH_PORT``), keys only; if not, the task's stderr says so on a line
  :func:`parse_ssh_marker` recognises, and the launcher makes it the task's message;
- login shells get the task's environment (``/etc/profile.d/paiq-task-env.sh``).

The script never stops the task's command: whatever fails is only said.
"""

from __future__ import annotations

import re
import shlex

from pydantic import SecretBytes

from services.launcher.driver import ContainerFile
from shared.jobkeys import JobKey

KEY_DIR = "/root/.ssh"
SCRIPT = "/pai/bootstrap/paiq-ssh.sh"
# Run first by the task's shell; its own failures never reach the task's command.
COMMAND_PREFIX = f"/bin/sh {SCRIPT} </dev/null || true\n"
_MARKER = re.compile(r"^\[paiq\] ssh: unavailable: (.+)$")

_SCRIPT = r"""# paiq: SSH into this task (see services/launcher/sshsetup.py). Never stops the task's command.
say() { echo "[paiq] ssh: $*" >&2; }
key_name=__KEY_NAME__
{
  for role in $(printf '%s' "${PAI_TASK_ROLE_LIST:-}" | tr ',' ' '); do
    r=$(printf '%s' "$role" | tr -c 'A-Za-z0-9_' '_')
    eval "count=\${PAI_TASK_ROLE_TASK_COUNT_$r:-0}"
    i=0
    while [ "$i" -lt "$count" ]; do
      eval "ip=\${PAI_HOST_IP_${r}_$i:-}"
      eval "port=\${PAI_PORT_LIST_${r}_${i}_ssh:-}"
      port=${port%%,*}
      if [ -n "$ip" ] && [ -n "$port" ]; then
        printf 'Host %s-%s\n  HostName %s\n  Port %s\n  User root\n' "$role" "$i" "$ip" "$port"
        printf '  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n'
        printf '  IdentityFile /root/.ssh/%s\n' "$key_name"
      fi
      i=$((i + 1))
    done
  done
} > /root/.ssh/config 2>/dev/null && chmod 600 /root/.ssh/config
sshd=$(command -v sshd 2>/dev/null || true)
if [ -z "$sshd" ] && [ -x /usr/sbin/sshd ]; then sshd=/usr/sbin/sshd; fi
if [ -z "$sshd" ]; then
  say "unavailable: the image has no sshd (install openssh-server in the image to ssh into its tasks)"
  exit 0
fi
if [ -z "${PAI_CONTAINER_SSH_PORT:-}" ]; then say "unavailable: the task has no ssh port"; exit 0; fi
if [ "$(id -u)" != 0 ]; then say "unavailable: sshd needs the task to run as root"; exit 0; fi
mkdir -p /run/sshd && chmod 755 /run/sshd
ssh-keygen -A >/dev/null 2>&1 || true
export -p | grep -v -E '^export (HOME|PWD|OLDPWD|SHLVL|HOSTNAME|TERM|_)=' > /etc/profile.d/paiq-task-env.sh 2>/dev/null
if "$sshd" -p "$PAI_CONTAINER_SSH_PORT" -o PermitRootLogin=without-password -o PasswordAuthentication=no \
    -o ChallengeResponseAuthentication=no -o PubkeyAuthentication=yes \
    -o AuthorizedKeysFile=/root/.ssh/authorized_keys -o StrictModes=no -o PidFile=/run/paiq-sshd.pid -o UsePAM=no \
    2>/tmp/paiq-sshd.err; then
  say "sshd listening on port $PAI_CONTAINER_SSH_PORT"
else
  say "unavailable: sshd did not start: $(tail -c 300 /tmp/paiq-sshd.err | tr '\n' ' ')"
fi
"""


def ssh_script(key: JobKey) -> str:
    return _SCRIPT.replace("__KEY_NAME__", shlex.quote(key.name))


def ssh_files(key: JobKey) -> tuple[ContainerFile, ...]:
    """What goes into every container of the job before it starts (the private key readable by root only)."""
    def file(path: str, mode: int, text: str) -> ContainerFile:
        return ContainerFile(path=path, mode=mode, content=SecretBytes(text.encode()))

    return (
        file(f"{KEY_DIR}/{key.name}", 0o600, key.private_key.get_secret_value()),
        file(f"{KEY_DIR}/{key.name}.pub", 0o644, f"{key.public_key}\n"),
        file(f"{KEY_DIR}/authorized_keys", 0o600, key.authorized_keys),
        file(SCRIPT, 0o755, ssh_script(key)),
    )


def parse_ssh_marker(line: str) -> str | None:
    """Why SSH is unavailable in the task, when ``line`` is the script's announcement of it."""
    m = _MARKER.match(line.rstrip("\n"))
    return f"ssh unavailable: {m.group(1)}" if m else None
