#!/usr/bin/env bash
# Installs the Debian packages this project needs. Idempotent: runs apt-get
# (and apt-get update) only when something is missing. Needs root (or sudo)
# only in that case.
#
#   tools/setup.sh          what the build and the demo need (tools/demo.sh)
#   tools/setup.sh --test   also the test-only packages: the PyTorch peer and
#                           charts, Slurm + munge for the real-Slurm test,
#                           Prometheus for the metrics test
#                           (tools/test.sh and .ci/run pass it)
#   tools/setup.sh --torch  also PyTorch, for the Python examples
#                           (tools/demo.sh SCRIPT.py)
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java          # Bazel 4.2 and its Java rules
  g++ pkg-config zlib1g-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev
  libdnnl-dev                               # oneDNN: the CPU backend's conv kernels
  openssl iperf3 procps psmisc
  clang libclang-rt-14-dev                  # libFuzzer targets (fuzz/)
  clang-format-14                           # tools/format.sh
  dataset-fashion-mnist                     # /usr/share/datasets/fashion-mnist
  libsqlite3-dev                            # the coordinator's job store
  python3-dev pybind11-dev python3-numpy    # python/psclient (the module)
  prometheus-cpp-dev                        # /metrics of psd and workerd
)
TORCH_PACKAGES=(
  python3-torch                             # PyTorch: peers, examples/
  python3-onnx                              # psclient.export_model's .onnx check
)
TEST_PACKAGES=(
  "${TORCH_PACKAGES[@]}"
  python3-matplotlib                        # tools/lab/plot_scaling.py charts
  python3-grpcio                            # python:grpc_conventions_test
  slurmctld slurmd slurm-client munge       # tests/slurm_test.sh (tools/slurm/)
  chromium                                  # tests/observability_test (headless)
  prometheus                                # tests/prometheus_test
)

case "${1:-}" in
  "") ;;
  --test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  --torch) PACKAGES+=("${TORCH_PACKAGES[@]}") ;;
  *)
    echo "setup: unknown argument '$1' (usage: tools/setup.sh [--test|--torch])" >&2
    exit 2
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
