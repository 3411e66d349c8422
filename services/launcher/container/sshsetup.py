"""SSH into a task, as OpenPAI's container scripts set it up (pure: the files and the command).

Before the task's command starts, the launcher puts into its container the job's key pair and
``authorized_keys`` under ``/root/.ssh`` and a small script, which the command runs first:

- ``/root/.ssh/config`` gets a ``Host <role>-<index>`` for every task of the job, from the PAI_*
  variables every task sees (``PAI_HOST_IP_<r>_<i>``, ``PAI_PORT_LIST_<r>_<i>_ssh``), so ``ssh
  worker-0`` reaches a peer (seed 000);
- if the image has ``sshd`` at one of :data:`SSHD_PATHS` (OpenPAI's images did), it is started on the
  task's ``ssh`` port (``PAI_CONTAINER_SSH_PORT``), keys only, and login shells get the task's
  environment (``/etc/profile.d/paiq-task-env.sh``); if not, the script is silent (the task's log is
  the user's) and the launcher, which looks for the same paths, makes :data:`NO_SSHD` the task's message.

The script never stops the task's command: an sshd that fails to start says why on the task's stderr.
"""

from __future__ import annotations

import shlex

from pydantic import SecretBytes

from services.launcher.engine.driver import ContainerFile
from shared.tasks.jobkeys import JobKey

KEY_DIR = "/root/.ssh"
SCRIPT = "/pai/bootstrap/paiq-ssh.sh"
# Run first by the task's shell; its own failures never reach the task's command.
COMMAND_PREFIX = f"/bin/sh {SCRIPT} </dev/null || true\n"
# Where images keep sshd (Debian/Ubuntu, Alpine, RHEL: /usr/sbin; images that build their own: /usr/local)
SSHD_PATHS = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd", "/usr/bin/sshd")
NO_SSHD = "ssh unavailable: the image has no sshd (install openssh-server in the image to ssh into its tasks)"

_SCRIPT = r"""# paiq: SSH into this task (see services/launcher/container/sshsetup.py). Never stops the task's command.
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
sshd=""
for candidate in __SSHD_PATHS__; do
  if [ -x "$candidate" ]; then sshd=$candidate; break; fi
done
[ -n "$sshd" ] || exit 0  # the launcher says so in the task's message
if [ -z "${PAI_CONTAINER_SSH_PORT:-}" ]; then say "not started: the task has no ssh port"; exit 0; fi
if [ "$(id -u)" != 0 ]; then say "not started: sshd needs the task to run as root"; exit 0; fi
mkdir -p /run/sshd && chmod 755 /run/sshd
ssh-keygen -A >/dev/null 2>&1 || true
export -p | grep -v -E '^export (HOME|PWD|OLDPWD|SHLVL|HOSTNAME|TERM|_)=' > /etc/profile.d/paiq-task-env.sh 2>/dev/null
"$sshd" -p "$PAI_CONTAINER_SSH_PORT" -o PermitRootLogin=without-password -o PasswordAuthentication=no \
    -o ChallengeResponseAuthentication=no -o PubkeyAuthentication=yes \
    -o AuthorizedKeysFile=/root/.ssh/authorized_keys -o StrictModes=no -o PidFile=/run/paiq-sshd.pid -o UsePAM=no \
    2>/tmp/paiq-sshd.err || say "sshd did not start: $(tail -c 300 /tmp/paiq-sshd.err | tr '\n' ' ')"
"""


def ssh_script(key: JobKey) -> str:
    return _SCRIPT.replace("__KEY_NAME__", shlex.quote(key.name)).replace("__SSHD_PATHS__", " ".join(SSHD_PATHS))


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
