#!/usr/bin/env bash
# Make this machine a paiq node: a running Docker engine and the demo image local/busybox:latest.
# Idempotent; for Debian 12 as root. Nothing is pulled from the internet: the demo image is built
# from Debian's busybox-static (no container registry is reachable on these machines).
#
# The engine: one already installed is used as it is, Debian's docker.io or Docker CE (docker-ce from
# Docker's own apt repository); with none, Debian's docker.io is installed. A stopped engine is started
# by systemd where systemd runs (docker.service), else as `nohup dockerd` (log: /var/log/paiq-dockerd.log).
# PAIQ_ENGINE_PID_FILE: where to write the process id of a dockerd this script started by nohup (nothing
# is written otherwise), so that its caller may stop it again (tests/run.sh does).
set -euo pipefail

log() { printf '[setup-engine] %s\n' "$*" >&2; }

apt_install() {  # the packages missing of $@, after refreshing the package lists (only when some are)
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

engine_up() { docker info >/dev/null 2>&1; }

wait_engine() {  # up to 30 s
  for _ in $(seq 1 60); do engine_up && return 0; sleep 0.5; done
  return 1
}

apt_install busybox-static
if ! command -v dockerd >/dev/null 2>&1; then
  if dpkg -s docker-ce-cli >/dev/null 2>&1; then
    apt_install docker-ce containerd.io  # Docker CE's CLI without its engine: the engine from the same repository
  else
    apt_install docker.io
  fi
elif ! command -v docker >/dev/null 2>&1; then
  if dpkg -s docker-ce >/dev/null 2>&1; then apt_install docker-ce-cli; else apt_install docker.io; fi
fi

if ! engine_up; then
  if [ -d /run/systemd/system ] && systemctl start docker >/dev/null 2>&1 && wait_engine; then
    log "started docker.service"
  else
    log "starting dockerd (log: /var/log/paiq-dockerd.log)"
    nohup dockerd >/var/log/paiq-dockerd.log 2>&1 &
    dockerd_pid=$!
    [ -n "${PAIQ_ENGINE_PID_FILE:-}" ] && echo "$dockerd_pid" >"$PAIQ_ENGINE_PID_FILE"
    wait_engine || { log "dockerd did not come up; see /var/log/paiq-dockerd.log"; exit 1; }
  fi
fi

if ! docker image inspect local/busybox:latest >/dev/null 2>&1; then
  log "building local/busybox:latest from busybox-static"
  rootfs=$(mktemp -d)
  mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/pai"
  cp /bin/busybox "$rootfs/bin/busybox"
  for applet in $("$rootfs/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
  done
  tar -C "$rootfs" -c . | docker import -c 'ENV PATH=/bin' - local/busybox:latest >/dev/null
  rm -rf "$rootfs"
fi
log "engine ready: $(docker info --format '{{.ServerVersion}}'), image local/busybox:latest present"
