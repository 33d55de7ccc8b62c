#!/usr/bin/env bash
# The Go client check (issue 13): generates Go stubs from proto/ with Debian's protoc-gen-go and
# protoc-gen-go-grpc, builds tests/integration/go_client in GOPATH mode against Debian's Go
# packages (/usr/share/gocode: google.golang.org/grpc 1.33, google.golang.org/protobuf), offline,
# then runs it against a real cmestreamd: create a model, stream pairs, refresh, predict, Koopman.
#
#   tests/integration/go_client_check.sh CMESTREAMD
#
# Exit 77 (ctest: skipped) with the reason when Go or the packages are missing
# (scripts/install-deps.sh installs them). GOCACHE defaults to a directory under /var/tmp
# so that repeated runs reuse the compiled grpc packages.
set -euo pipefail
DAEMON="${1:?usage: go_client_check.sh CMESTREAMD}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
GOCODE=/usr/share/gocode/src
missing=()
command -v go >/dev/null || missing+=("go (golang-go)")
command -v protoc >/dev/null || missing+=("protoc (protobuf-compiler)")
command -v protoc-gen-go >/dev/null || missing+=("protoc-gen-go")
command -v protoc-gen-go-grpc >/dev/null || missing+=("protoc-gen-go-grpc")
[ -d "$GOCODE/google.golang.org/grpc" ] || missing+=("golang-google-grpc-dev")
[ -d "$GOCODE/google.golang.org/protobuf" ] || missing+=("golang-google-protobuf-dev")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "go client check skipped: missing ${missing[*]} (scripts/install-deps.sh installs them)"
  exit 77
fi
WORK="$(mktemp -d /tmp/cmestream-go-XXXXXX)"
DAEMON_PID=""
cleanup() {
  if [ -n "$DAEMON_PID" ]; then kill -TERM "$DAEMON_PID" 2>/dev/null || true; wait "$DAEMON_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# Stubs land at GOPATH/src/<go_package path> (cmestream.dev/api/cmestream/v1).
mkdir -p "$WORK/gopath/src/goclient"
protoc -I "$ROOT/proto" --go_out="$WORK/gopath/src" --go-grpc_out="$WORK/gopath/src" \
  "$ROOT/proto/cmestream/v1/cmestream.proto"
cp "$ROOT/tests/integration/go_client/main.go" "$WORK/gopath/src/goclient/"
start=$(date +%s.%N)
(cd "$WORK/gopath/src/goclient" &&
  GOPATH="$WORK/gopath:/usr/share/gocode" GO111MODULE=off GOFLAGS= GOPROXY=off \
  GOCACHE="${GOCACHE:-/var/tmp/cmestream-gocache}" go build -o "$WORK/goclient" .)
end=$(date +%s.%N)
echo "go client built in $(echo "$end - $start" | bc) s"

mkdir -p "$WORK/data"
"$DAEMON" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$WORK/data" \
  --refresh-interval 3600 >"$WORK/daemon.out" 2>"$WORK/daemon.err" &
DAEMON_PID=$!
target=""
for _ in $(seq 100); do
  target="$(sed -n 's/^cmestreamd listening grpc=\([^ ]*\) .*/\1/p' "$WORK/daemon.out")"
  [ -n "$target" ] && break
  sleep 0.1
done
if [ -z "$target" ]; then
  echo "cmestreamd did not start:"; cat "$WORK/daemon.err"; exit 1
fi
"$WORK/goclient" "$target"
