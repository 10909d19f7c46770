#!/usr/bin/env bash
# build_nccl.sh: build one NCCL release from its source tree, for one GPU
# architecture only, into a folder of its own (for the version matrix and the
# NCCL 2.30 runs; the folder should be an ignored one, e.g. bench/nccl/build).
#
#   bench/nccl/build_nccl.sh --src DIR --out DIR [--arch 90] [-j N] [--only-funcs SPEC]
#
# DIR is an NCCL source tree (its top folder, holding src/Makefile), e.g. a
# release exported from a clone:
#   git -C nccl archive v2.30.7-1 | tar -x -C /tmp/nccl-2.30.7
# The result is OUT/lib/libnccl.so* and OUT/include/nccl.h; OUT/version.txt
# says which release it is (from the tree's makefiles/version.mk) and
# OUT/build.log holds the compiler's output. Exit 0 only when the library
# and header are there and report the version the sources say.
# --only-funcs SPEC builds only the collective kernels SPEC names (NCCL's own
# ONLY_FUNCS syntax, e.g. "AllReduce Sum f32 * *|SendRecv"): a few minutes
# instead of most of an hour, for runs that need no other kernel. The
# library then fails, at launch, any collective it was built without.
set -uo pipefail

SRC=
OUT=
ARCH=90
JOBS=$(nproc)
ONLY_FUNCS_SPEC=

usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --src) SRC=${2:-}; shift ;;
    --out) OUT=${2:-}; shift ;;
    --arch) ARCH=${2:-}; shift ;;
    -j) JOBS=${2:-}; shift ;;
    --only-funcs) ONLY_FUNCS_SPEC=${2:-}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build_nccl.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

die_usage() { echo "build_nccl.sh: $*" >&2; usage >&2; exit 2; }
[ -n "$SRC" ] || die_usage "--src DIR is required (an NCCL source tree)"
{ [ -f "$SRC/src/Makefile" ] && [ -f "$SRC/makefiles/version.mk" ]; } ||
  die_usage "--src: '$SRC' holds no src/Makefile and makefiles/version.mk (not an NCCL tree)"
[ -n "$OUT" ] || die_usage "--out DIR is required"
case $ARCH in ''|*[!0-9]*) die_usage "--arch is a compute capability without the dot (90 for H100/H200)" ;; esac
case $JOBS in ''|*[!0-9]*|0) die_usage "-j needs a whole number >= 1" ;; esac
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || die_usage "no nvcc in $CUDA_HOME/bin (set CUDA_HOME)"

mk_var() { sed -n "s/^$1[[:space:]]*:*=[[:space:]]*\([0-9]*\).*/\1/p" "$SRC/makefiles/version.mk" | head -1; }
VERSION="$(mk_var NCCL_MAJOR).$(mk_var NCCL_MINOR).$(mk_var NCCL_PATCH)"
case $VERSION in *..*|.*|*.) die_usage "cannot read the release from $SRC/makefiles/version.mk" ;; esac

mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
echo "build_nccl.sh: NCCL $VERSION from $SRC for sm_$ARCH with $JOBS jobs into $OUT${ONLY_FUNCS_SPEC:+ (only: $ONLY_FUNCS_SPEC)}" >&2
start=$(date +%s)
# Only the library (src.build): no packages, no nccl4py.
if ! make -C "$SRC" -j "$JOBS" src.build BUILDDIR="$OUT" CUDA_HOME="$CUDA_HOME" \
     NVCC_GENCODE="-gencode=arch=compute_$ARCH,code=sm_$ARCH" ${ONLY_FUNCS_SPEC:+"ONLY_FUNCS=$ONLY_FUNCS_SPEC"} \
     >"$OUT/build.log" 2>&1; then
  tail -n 40 "$OUT/build.log" >&2
  echo "build_nccl.sh: NCCL $VERSION failed to build (log: $OUT/build.log)" >&2
  exit 1
fi
{ [ -e "$OUT/lib/libnccl.so" ] && [ -f "$OUT/include/nccl.h" ]; } || {
  echo "build_nccl.sh: the build ended without lib/libnccl.so and include/nccl.h in $OUT" >&2
  exit 1
}
code=$(sed -n 's/^#define NCCL_VERSION_CODE[[:space:]]*\([0-9]*\).*/\1/p' "$OUT/include/nccl.h")
want=$(( $(mk_var NCCL_MAJOR) * 10000 + $(mk_var NCCL_MINOR) * 100 + $(mk_var NCCL_PATCH) ))
[ "$code" = "$want" ] || {
  echo "build_nccl.sh: nccl.h says version code '$code', the sources $want" >&2
  exit 1
}
{
  echo "nccl $VERSION"
  echo "arch sm_$ARCH"
  echo "only-funcs ${ONLY_FUNCS_SPEC:-all}"
  echo "cuda $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "seconds $(( $(date +%s) - start ))"
} >"$OUT/version.txt"
cat "$OUT/version.txt" >&2
