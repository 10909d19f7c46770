#!/usr/bin/env bash
# Check that a built plugin exports exactly the five ncclNetPlugin_vN, two
# ncclRmaPlugin_vN and three ncclTunerPlugin_vN structs and nothing else
# (style rule 3). The library is loaded RTLD_LOCAL by NCCL, but any extra
# global symbol can still interpose on or clash with the application's own,
# so the exported set is part of the ABI.
#
# usage: tools/check-exports.sh path/to/libnccl-net-ferry.so
set -euo pipefail
export LC_ALL=C

expected="ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12 ncclNetPlugin_v8 ncclNetPlugin_v9 ncclRmaPlugin_v13 ncclRmaPlugin_v14 ncclTunerPlugin_v3 ncclTunerPlugin_v4 ncclTunerPlugin_v5"

if [ $# -ne 1 ]; then
    echo "usage: $0 <plugin.so>" >&2
    exit 2
fi
lib=$1
if [ ! -f "$lib" ]; then
    echo "check-exports: no such file: $lib" >&2
    exit 2
fi
if ! command -v nm >/dev/null 2>&1; then
    echo "check-exports: nm (binutils) not found" >&2
    exit 2
fi

# nm -D --defined-only prints "value type name[@version]". Type A entries are
# version-node names from a version script, not symbols; drop them, and strip
# any @VERSION suffix.
if ! out=$(nm -D --defined-only "$lib"); then
    echo "check-exports: nm failed on $lib" >&2
    exit 2
fi
actual=$(printf '%s\n' "$out" | awk 'NF >= 3 && $2 != "A" { sub(/@.*/, "", $3); print $3 }' \
         | LC_ALL=C sort -u | tr '\n' ' ' | sed 's/ $//')

if [ "$actual" != "$expected" ]; then
    echo "check-exports: FAIL: $lib exports the wrong symbol set" >&2
    echo "  expected: $expected" >&2
    echo "  actual:   ${actual:-<none>}" >&2
    extra=$(comm -13 <(tr ' ' '\n' <<<"$expected") <(tr ' ' '\n' <<<"$actual") | tr '\n' ' ' | sed 's/ $//')
    missing=$(comm -23 <(tr ' ' '\n' <<<"$expected") <(tr ' ' '\n' <<<"$actual") | tr '\n' ' ' | sed 's/ $//')
    [ -n "$extra" ] && echo "  unexpected: $extra (hide them; see cmake/ferry.map)" >&2
    [ -n "$missing" ] && echo "  missing:    $missing" >&2
    exit 1
fi

# NCCL dlsym()s the structs as data; a function of that name would be called
# through as a struct and crash. Code is type T/t/W/w/i.
bad=$(printf '%s\n' "$out" | awk 'NF >= 3 && $3 ~ /^ncclNet|^ncclRma|^ncclTuner/ && $2 ~ /^[TtWwi]$/ { print $3 }')
if [ -n "$bad" ]; then
    echo "check-exports: FAIL: exported as code, not data: $bad" >&2
    exit 1
fi

echo "check-exports: OK: $lib exports exactly: $expected"
