#!/usr/bin/env bash
# Make this machine a paiq node: a running Docker engine and the demo image local/busybox:latest.
# Idempotent; for Debian 12 as root. Nothing is pulled from the internet: the demo image is built
# from Debian's busybox-static (no container registry is reachable on these machines).
set -euo pipefail

log() { printf '[setup-engine] %s\n' "$*" >&2; }

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  if [ ! -f /var/lib/apt/periodic/paiq-updated ]; then
    apt-get update -qq && mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/paiq-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

apt_install docker.io busybox-static

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/paiq-dockerd.log)"
  nohup dockerd >/var/log/paiq-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /var/log/paiq-dockerd.log"; exit 1; }
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
