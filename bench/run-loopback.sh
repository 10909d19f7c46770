#!/usr/bin/env bash
# Build ferry and run ferry-bench's default sweep: the README's first command.
#
#   bench/run-loopback.sh [ferry-bench options...]
#
# Installs the build tools if missing (apt-get; sudo only when not root),
# builds build-bench/ in Release mode and runs ferry-bench over lo: ferry
# against plain TCP with the same streams and threads, 4K..64M, 1 and 4
# connections, 3 interleaved repetitions, a table of medians (see
# bench/README.md). Options go to ferry-bench (e.g. --mode all --csv out.csv).
# NCCL_* variables in the environment (NCCL_FERRY_STREAMS, ...) pass through.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
build="$repo/build-bench"

# rdma-core headers: the ib backend compiles against them (the libraries are dlopened).
pkgs=(cmake make gcc libc6-dev libibverbs-dev librdmacm-dev)
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo=sudo
    fi
    echo "run-loopback: installing ${missing[*]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}"
fi

cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target nccl-net-ferry ferry-bench
exec "$build/bench/ferry-bench" --plugin "$build/libnccl-net-ferry.so" "$@"
