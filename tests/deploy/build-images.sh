#!/usr/bin/env bash
# Build, without any container registry, the images the compose end-to-end test runs:
#   paiq/debian-base:bookworm  Debian 12 (minbase) made with debootstrap and `docker import`
#   paiq/paiq:test             the service image (services/Dockerfile) on that base
#   paiq/rabbitmq:test         RabbitMQ from Debian's package, in place of the official image
#   paiq/secantusdb:test       SecantusDB (from the service image's venv), in place of mongod
# With the argument `sshd`, only the base and
#   paiq/sshd:test             the base with openssh-server: a task image like OpenPAI's, to ssh into
# Idempotent: each image carries the label paiq.inputs, a hash of everything it is built from, and
# is rebuilt only when that hash changes; rebuilds reuse the engine's layer cache. For Debian 12 as
# root (debootstrap); one build at a time on the machine (flock).
set -euo pipefail
cd "$(dirname "$0")/../.."

BASE_IMAGE=paiq/debian-base:bookworm
SERVICE_IMAGE=paiq/paiq:test
RABBITMQ_IMAGE=paiq/rabbitmq:test
SECANTUS_IMAGE=paiq/secantusdb:test
SSHD_IMAGE=paiq/sshd:test
SUITE=bookworm

log() { printf '[build-images] %s\n' "$*" >&2; }

# The mirror this machine's apt uses (deb822 or one-line sources), unless DEBIAN_MIRROR is set.
apt_uri() {  # $1: a regex the URI must match
  cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | sed -n -E 's#^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)(https?://[^[:space:]]+).*#\3#p' \
    | grep -E "$1" | head -n 1 || true
}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(apt_uri '/debian/?$')}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY=${DEBIAN_SECURITY:-$(apt_uri '/debian-security/?$')}
DEBIAN_SECURITY=${DEBIAN_SECURITY:-http://deb.debian.org/debian-security}

label_of() { docker image inspect --format '{{ index .Config.Labels "paiq.inputs" }}' "$1" 2>/dev/null || true; }
hash_of() { sha256sum | cut -c1-32; }
image_id() { docker image inspect --format '{{ .Id }}' "$1"; }

# The base: what debian:bookworm-slim is, made here. Everything it depends on is in this function,
# the suite and the mirrors, so they are its hash.
build_base() (
  rootfs=$(mktemp -d /var/tmp/paiq-debian-base.XXXXXX)
  trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 \
    || { tail -n 30 "$rootfs.log" >&2; exit 1; }
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $DEBIAN_MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $DEBIAN_SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  # As in Debian's official images: no services started by package scripts, no docs, man pages
  # or translations, apt caches cleaned after every install.
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
  chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
    >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim"
  printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' \
    'APT::Install-Recommends "false";' 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-clean"
  find "$rootfs/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
  rm -rf "$rootfs"/usr/share/{man,info,locale}/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/etc/hostname "$rootfs"/etc/hosts
  : >"$rootfs/etc/resolv.conf"
  : >"$rootfs/etc/machine-id"
  tar --numeric-owner -C "$rootfs" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'ENV LANG=C.UTF-8' \
    -c 'CMD ["bash"]' -c "LABEL paiq.inputs=$1" -m "debootstrap --variant=minbase $SUITE" - "$BASE_IMAGE" >/dev/null
)

# build IMAGE HASH DOCKERFILE CONTEXT [docker build args...]
build() {
  local image=$1 hash=$2 dockerfile=$3 context=$4
  shift 4
  docker build -q --label "paiq.inputs=$hash" -f "$dockerfile" -t "$image" "$@" "$context" >/dev/null
}

ensure() {  # ensure IMAGE HASH BUILDER [args...]
  local image=$1 hash=$2 started
  shift 2
  if [ "$(label_of "$image")" = "$hash" ]; then
    log "$image is up to date"
    return 0
  fi
  log "building $image"
  started=$(date +%s)
  "$@"
  log "built $image in $(($(date +%s) - started)) s"
}

exec 9>/var/lock/paiq-build-images.lock
flock 9

base_hash=$( { declare -f build_base; echo "$SUITE $DEBIAN_MIRROR $DEBIAN_SECURITY"; } | hash_of)
ensure "$BASE_IMAGE" "$base_hash" build_base "$base_hash"

if [ "${1:-}" = sshd ]; then
  sshd_hash=$( { image_id "$BASE_IMAGE"; cat tests/deploy/sshd.Dockerfile; } | hash_of)
  ensure "$SSHD_IMAGE" "$sshd_hash" \
    build "$SSHD_IMAGE" "$sshd_hash" tests/deploy/sshd.Dockerfile tests/deploy --build-arg "BASE_IMAGE=$BASE_IMAGE"
  log "image ready: $SSHD_IMAGE"
  exit 0
fi

# This machine's own extra CAs (e.g. of an egress proxy in front of PyPI), for pip in the build.
EXTRA_CA_CERTS=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true)

# What the service image is built from: exactly the build context .dockerignore lets through.
service_hash=$( {
  image_id "$BASE_IMAGE"
  printf '%s\n' "$EXTRA_CA_CERTS"
  find pyproject.toml README.md services shared -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum
} | hash_of)
ensure "$SERVICE_IMAGE" "$service_hash" \
  build "$SERVICE_IMAGE" "$service_hash" services/Dockerfile . --build-arg "BASE_IMAGE=$BASE_IMAGE" \
  --build-arg "EXTRA_CA_CERTS=$EXTRA_CA_CERTS"

rabbitmq_hash=$( { image_id "$BASE_IMAGE"; cat tests/deploy/rabbitmq.Dockerfile; } | hash_of)
ensure "$RABBITMQ_IMAGE" "$rabbitmq_hash" \
  build "$RABBITMQ_IMAGE" "$rabbitmq_hash" tests/deploy/rabbitmq.Dockerfile tests/deploy \
  --build-arg "BASE_IMAGE=$BASE_IMAGE"

secantus_hash=$( { image_id "$SERVICE_IMAGE"; cat tests/deploy/secantusdb.Dockerfile tests/deploy/secantusdb-entrypoint.sh; } | hash_of)
ensure "$SECANTUS_IMAGE" "$secantus_hash" \
  build "$SECANTUS_IMAGE" "$secantus_hash" tests/deploy/secantusdb.Dockerfile tests/deploy \
  --build-arg "SERVICE_IMAGE=$SERVICE_IMAGE"

log "images ready: $BASE_IMAGE $SERVICE_IMAGE $RABBITMQ_IMAGE $SECANTUS_IMAGE"
