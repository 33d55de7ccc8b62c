#!/usr/bin/env bash
# Builds (and smoke-tests) the cmestreamd container image with Debian's podman on a machine
# without a Docker engine or a reachable image registry:
#   1. podman + runc from Debian, a containers.conf that selects runc and sane ulimits;
#   2. a local debian:bookworm-slim base image made with debootstrap (once);
#   3. podman build of ./Dockerfile, then a run that checks the daemon starts and answers.
# With Docker available, `docker build -t cmestream:0.1.0 .` does the same as step 3.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-cmestream:0.1.0}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
WORK="${WORK:-/var/tmp/cmestream-podman}"
mkdir -p "$WORK"

for p in podman runc debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc debootstrap; break; }
done

export CONTAINERS_CONF="$WORK/containers.conf"
cat >"$CONTAINERS_CONF" <<'CONF'
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF

if ! podman image exists localhost/debian:bookworm-slim; then
  echo "podman-build: making the base image with debootstrap ($MIRROR)"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log"
  tar -C "$WORK/rootfs" -c . | podman import - localhost/debian:bookworm-slim
  rm -rf "$WORK/rootfs"
fi

# Build from the committed tree (git archive HEAD), not from whatever the work tree holds.
CONTEXT="$WORK/context"
rm -rf "$CONTEXT" && mkdir -p "$CONTEXT"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git archive HEAD | tar -x -C "$CONTEXT"
else
  tar --exclude='./build*' -c . | tar -x -C "$CONTEXT"
fi
COMMIT="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
podman build --format docker --build-arg GIT_COMMIT="$COMMIT" -t "$IMAGE" "$CONTEXT"

# Smoke test as an arbitrary UID in group 0 (OpenShift style; RUN_USER= to use the image's).
RUN_USER="${RUN_USER-123456:0}"
echo "podman-build: smoke test${RUN_USER:+ as --user $RUN_USER}"
cid=$(podman run -d --rm ${RUN_USER:+--user "$RUN_USER"} "$IMAGE")
trap 'podman stop -t 5 "$cid" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do
  podman logs "$cid" 2>/dev/null | grep -q "cmestreamd listening" && break
  sleep 0.2
done
podman logs "$cid" | grep "cmestreamd listening"
podman exec "$cid" cmestream --version
podman exec "$cid" cmestream --server 127.0.0.1:50051 model create smoke --dim 2 --sigma 0.5
podman exec "$cid" cmestream --server 127.0.0.1 model list   # default port 50051
podman exec "$cid" cmestream --server 127.0.0.1:50051 health
podman exec "$cid" ls -ln /var/lib/cmestream
podman exec "$cid" id
# The image's HEALTHCHECK (podman's timers need systemd; run it once by hand). Its
# "unable to get systemd connection" messages are harmless here.
podman healthcheck run "$cid" && echo "podman-build: HEALTHCHECK healthy"
echo "podman-build: OK ($IMAGE)"
