#!/usr/bin/env bash
# Configure, build and test ferry as on a host without rdma-core's
# development headers (no libibverbs-dev, no librdmacm-dev): both backends
# and fakeibv must build from ferry's own declarations (include/ferry/
# verbs_abi.h, rdma_cm_abi.h), and the ib tests pass on the result.
#
# The headers are hidden, not removed: the build runs in a mount namespace
# of its own, where an empty tmpfs covers /usr/include/infiniband and
# /usr/include/rdma; nothing outside the namespace sees a change, so other
# builds on the machine go on undisturbed. Needs root, or a kernel that lets
# an unprivileged user make a user + mount namespace (unshare -r).
#
# usage: tests/build_no_rdma_headers.sh [build-dir]   (default build-nordma)
# Extra CMake arguments: FERRY_NORDMA_CMAKE_ARGS; parallel jobs for build and
# ctest: FERRY_NORDMA_JOBS (default 2); ccache is used when installed.
# Prints "N passed, N failed"; exits non-zero on any failure.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-nordma}
case $build in /*) ;; *) build=$src/$build ;; esac
tests='unit_test_ib_|^integ_ib_inproc$|^integ_ib_inproc_rdmacm$|^fakeibv_unit_verbs$|^fakeibv_unit_cm$'

if [ "$(id -u)" = 0 ]; then
    unshare_args=(-m)
else
    unshare_args=(-r -m)
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)

export FERRY_SRC=$src FERRY_BUILD=$build FERRY_TESTS=$tests FERRY_JOBS=${FERRY_NORDMA_JOBS:-2}
export FERRY_CMAKE_ARGS="${launcher[*]} ${FERRY_NORDMA_CMAKE_ARGS:-}"
export NCCL_SOCKET_IFNAME=lo
mkdir -p "$build"
rm -f "$build/nordma-ctest.log"
start=$(date +%s)
set +e
# shellcheck disable=SC2016 # The inner shell expands these.
unshare "${unshare_args[@]}" bash -euo pipefail -c '
    for d in /usr/include/infiniband /usr/include/rdma; do
        if [ -d "$d" ]; then mount -t tmpfs none "$d"; fi
    done
    # The proof that the headers are out of sight: the compiler cannot find them.
    for h in infiniband/verbs.h rdma/rdma_cma.h; do
        if echo "#include <$h>" | cc -E -x c - >/dev/null 2>&1; then
            echo "FAIL: <$h> is still visible inside the namespace"
            exit 1
        fi
    done
    echo "rdma-core headers hidden: <infiniband/verbs.h> and <rdma/rdma_cma.h> not found"
    # A fresh cache, so the configure checks run again in this namespace.
    rm -f "$FERRY_BUILD/CMakeCache.txt"
    # shellcheck disable=SC2086 # FERRY_CMAKE_ARGS is a word list.
    cmake -S "$FERRY_SRC" -B "$FERRY_BUILD" -DFERRY_ENABLE_WERROR=ON \
          -DCMAKE_BUILD_TYPE=RelWithDebInfo $FERRY_CMAKE_ARGS >"$FERRY_BUILD/nordma-configure.log" 2>&1 ||
        { cat "$FERRY_BUILD/nordma-configure.log"; echo "FAIL: configure"; exit 1; }
    grep -E "rdma-core.s headers not found" "$FERRY_BUILD/nordma-configure.log" || true
    if ctest --test-dir "$FERRY_BUILD" -N -R "^unit_test_verbs_abi$" | grep -q "Test *#"; then
        echo "FAIL: unit_test_verbs_abi registered although the headers are hidden"
        exit 1
    fi
    cmake --build "$FERRY_BUILD" -j"$FERRY_JOBS" >"$FERRY_BUILD/nordma-build.log" 2>&1 ||
        { tail -50 "$FERRY_BUILD/nordma-build.log"; echo "FAIL: build"; exit 1; }
    echo "configure + build: ok"
    ctest --test-dir "$FERRY_BUILD" -j"$FERRY_JOBS" -R "$FERRY_TESTS" --output-on-failure \
        >"$FERRY_BUILD/nordma-ctest.log" 2>&1
'
rc=$?
set -e
end=$(date +%s)
log=$build/nordma-ctest.log
if [ -f "$log" ]; then
    grep -E "^ *[0-9]+/[0-9]+ Test" "$log" || true
    passed=$(grep -cE "^ *[0-9]+/[0-9]+ Test .* Passed" "$log" || true)
    failed=$(grep -cE "^ *[0-9]+/[0-9]+ Test .*(Failed|\*\*\*|Not Run)" "$log" || true)
    [ "$rc" = 0 ] || grep -A40 "Output from these tests\|The following tests FAILED" "$log" || true
else
    passed=0 failed=1
fi
[ "$passed" -gt 0 ] || failed=$((failed > 0 ? failed : 1))
echo "no-rdma-headers build: $passed passed, $failed failed ($((end - start)) s)"
[ "$rc" = 0 ] && [ "$failed" = 0 ]
