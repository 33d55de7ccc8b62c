#!/usr/bin/env bash
# Installs cmestream's build, test and demo dependencies from Debian packages. Idempotent:
# skips apt entirely when everything is already installed.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config
  ccache       # compiler cache: CMakeLists.txt uses it when present (repeat and CI builds)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libeigen3-dev libabsl-dev prometheus-cpp-dev
  libspectra-dev   # header-only truncated eigensolvers (core/linalg/leading_eigen.cc)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-grpcio python3-protobuf python3-numpy python3-matplotlib
  python3-yaml   # deploy/validate/rendered_policy.py, promtool test checks (tests/integration)
  python3-venv python3-setuptools python3-wheel python3-pip   # pip-installable client/python (test in a venv)
  prometheus   # promtool: `promtool check rules` on deploy/prometheus/alerts.yaml in the tests
  curl
  # The Go client check (tests/integration/go_client_check.sh, GOPATH mode, offline): Go 1.19,
  # grpc-go 1.33, protobuf-go 1.28 and both code generators. Measured: ~70 s to install, ~65 s
  # for the first (cold-cache) build of the client on 2 busy cores, ~8 s after.
  golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev
  protoc-gen-go protoc-gen-go-grpc bc
  openssl clang libclang-rt-14-dev   # test certificates (openssl CLI); libFuzzer targets (scripts/fuzz.sh)
  llvm-14                           # llvm-symbolizer: readable TSan/UBSan stacks (scripts/sanitize.sh)
  clang-format clang-tidy           # scripts/dev/format.sh, scripts/dev/lint.sh
  linux-perf                        # perf: scripts/profile_duffing_daemon.sh (where the daemon's CPU goes)
  r-base-core python3-statsmodels   # public real series (R's and statsmodels' datasets): tests/integration/test_real_series.py
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q -o DPkg::Lock::Timeout=600 "${missing[@]}"
