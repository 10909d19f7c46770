#!/usr/bin/env bash
# package_check.sh BUILD_DIR
#
# The packages from a configured and built Release tree (as .ci/run's
# build-release: -DCMAKE_BUILD_TYPE=Release -DFERRY_INSTALL_NCCL_NET_LINK=ON):
#   deb: cpack -G DEB; lintian reports no error and no warning (overrides
#        only from the package's own file); copyright, changelog.Debian.gz,
#        the docs gzip-compressed, the manual page, stripped binaries; the
#        shipped README names only files the package holds; installed into a
#        scratch root (dpkg --root -i as root, dpkg -x otherwise), the
#        installed ferry-info with no LD_LIBRARY_PATH finds the installed
#        plugin, reports the socket device healthy and exits 0 (by its own
#        lookup, and through the libnccl-net.so link when the tree has it);
#   rpm: cpack -G RPM; License and Summary; the same files as the .deb;
#        installed with rpm --root --nodeps -i into a scratch root (a fresh
#        rpm database; rpm2cpio | cpio without root); ferry-info as above.
# Every check prints "ok - ..." or "FAIL - ..."; the last line is
# "package_check: N passed, N failed"; exit 1 if any failed, 2 on bad usage.
set -uo pipefail

if [ $# -ne 1 ] || [ ! -f "$1/CMakeCache.txt" ]; then
    echo "usage: package_check.sh BUILD_DIR (a configured and built Release tree)" >&2
    exit 2
fi
dir=$(cd "$1" && pwd)
passed=0
failed=0
scratch=$(mktemp -d /tmp/ferry-pkg-check.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
t_start=$SECONDS

ok() { echo "ok - $*"; passed=$((passed + 1)); }
bad() { echo "FAIL - $*"; failed=$((failed + 1)); }
# check WHAT COMMAND...: one check, its output shown only when it fails.
check() {
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then
        ok "$what"
    else
        [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/    /' | tail -n 40
        bad "$what"
    fi
}
finish() {
    echo "package_check: $passed passed, $failed failed ($((SECONDS - t_start)) s)"
    [ "$failed" -eq 0 ]
    exit $?
}

link=0
grep -q '^FERRY_INSTALL_NCCL_NET_LINK:BOOL=ON$' "$dir/CMakeCache.txt" && link=1

# ---- helpers --------------------------------------------------------------
# info_ok ROOT [ARGS...]: the installed ferry-info finds the installed plugin and is healthy.
info_ok() {
    local root=$1 out want
    shift
    out=$(env -u LD_LIBRARY_PATH NCCL_SOCKET_IFNAME=lo timeout 120 \
        "$root/usr/bin/ferry-info" --backend socket "$@" 2>&1) || {
        echo "$out"
        echo "installed ferry-info $* exited non-zero"
        return 1
    }
    for want in "plugin:      $root/usr/lib/libnccl-net-ferry.so" "device 0: lo" \
        "self-test: OK" "healthy"; do
        grep -qF -- "$want" <<<"$out" || {
            echo "$out"
            echo "no '$want' in installed ferry-info $*'s output"
            return 1
        }
    done
}

# layout_ok ROOT: the files every package must hold, compressed and stripped as they should be.
layout_ok() {
    local root=$1 doc=$1/usr/share/doc/ferry-nccl-net f n
    for f in usr/lib/libnccl-net-ferry.so usr/bin/ferry-info usr/share/man/man1/ferry-info.1.gz \
        usr/share/doc/ferry-nccl-net/README usr/share/doc/ferry-nccl-net/LICENSE \
        usr/share/doc/ferry-nccl-net/copyright usr/share/doc/ferry-nccl-net/changelog.Debian.gz \
        usr/share/doc/ferry-nccl-net/install.md.gz usr/share/doc/ferry-nccl-net/ferry-info.md.gz \
        usr/share/lintian/overrides/ferry-nccl-net; do
        [ -e "$root/$f" ] || { echo "missing /$f"; return 1; }
    done
    if [ "$link" -eq 1 ] && [ "$(readlink "$root/usr/lib/libnccl-net.so")" != libnccl-net-ferry.so ]; then
        echo "no /usr/lib/libnccl-net.so -> libnccl-net-ferry.so"
        return 1
    fi
    n=$(find "$doc" -name '*.md' | wc -l)
    [ "$n" -eq 0 ] || { echo "$n uncompressed .md in $doc"; return 1; }
    for f in "$doc"/*.gz "$root"/usr/share/man/man1/*.gz; do
        gzip -t "$f" || { echo "$f is not gzip"; return 1; }
    done
    for f in "$root/usr/lib/libnccl-net-ferry.so" "$root/usr/bin/ferry-info"; do
        if readelf -S "$f" | grep -qE '\.(debug_info|symtab)( |$)'; then
            echo "$f is not stripped (it has .symtab or .debug_info)"
            return 1
        fi
    done
}

# readme_ok ROOT: every document and /usr path the shipped README names is in the package.
readme_ok() {
    local root=$1 doc=$1/usr/share/doc/ferry-nccl-net readme name path n=0
    readme=$doc/README
    for name in $(grep -oE '[A-Za-z0-9_.-]+\.md(\.gz)?' "$readme" | sort -u); do
        [ -e "$doc/${name%.gz}.gz" ] || [ -e "$doc/$name" ] ||
            { echo "README names $name; the package has no such file"; return 1; }
        n=$((n + 1))
    done
    for path in $(grep -oE '/usr/[A-Za-z0-9_./-]+' "$readme" | sort -u); do
        [ "$path" = /usr/lib/libnccl-net.so ] && [ "$link" -eq 0 ] && continue
        [ -e "$root$path" ] || [ -L "$root$path" ] ||
            { echo "README names $path; the package has no such file"; return 1; }
        n=$((n + 1))
    done
    [ "$n" -ge 5 ] || { echo "README names only $n files: not the package README?"; return 1; }
    if grep -qE '\]\(' "$readme"; then
        echo "README has markdown links"
        return 1
    fi
}

# files_of ROOT: the package's files and links, one path a line, sorted.
files_of() {
    (cd "$1" && find . \( -type f -o -type l \) | sed 's|^\./|/|' | sort)
}

# ---- deb -------------------------------------------------------------------
rm -f "$dir"/ferry-nccl-net_*.deb "$dir"/ferry-nccl-net-*.rpm
if (cd "$dir" && cpack -G DEB >"$scratch/cpack-deb.log" 2>&1); then
    ok "cpack -G DEB"
else
    tail -n 20 "$scratch/cpack-deb.log"
    bad "cpack -G DEB"
    finish
fi
deb=$(ls "$dir"/ferry-nccl-net_*.deb 2>/dev/null | head -n 1)
check "the .deb is ferry-nccl-net" test "$(dpkg-deb -f "$deb" Package)" = ferry-nccl-net
if command -v lintian >/dev/null; then
    lintian_clean() {
        local out rc=0
        out=$(lintian --tag-display-limit 0 "$deb" 2>&1) || rc=$?
        if [ "$rc" -ne 0 ] || grep -qE '^[EW]: ' <<<"$out"; then
            echo "$out"
            return 1
        fi
    }
    check "lintian: no error, no warning" lintian_clean
else
    bad "lintian is not installed (apt-get install lintian)"
fi
deb_root=$scratch/deb-root
mkdir -p "$deb_root"
deb_install() {
    if [ "$(id -u)" -eq 0 ]; then
        # A dpkg database of its own: the host's /usr stays untouched.
        mkdir -p "$deb_root/var/lib/dpkg/updates" "$deb_root/var/lib/dpkg/info"
        touch "$deb_root/var/lib/dpkg/status"
        dpkg --root="$deb_root" --force-depends -i "$deb"
    else
        dpkg -x "$deb" "$deb_root"
    fi
}
check "deb: installed into a scratch root" deb_install
check "deb: layout (copyright, changelog, compressed docs, man page, stripped)" layout_ok "$deb_root"
check "deb: the shipped README names only files the package holds" readme_ok "$deb_root"
check "deb: installed ferry-info finds the installed plugin, healthy" info_ok "$deb_root"
if [ "$link" -eq 1 ]; then
    check "deb: installed ferry-info through the libnccl-net.so link, healthy" \
        info_ok "$deb_root" --plugin "$deb_root/usr/lib/libnccl-net.so"
fi

# ---- rpm -------------------------------------------------------------------
if ! command -v rpmbuild >/dev/null; then
    bad "rpmbuild is not installed (apt-get install rpm)"
    finish
fi
if (cd "$dir" && cpack -G RPM >"$scratch/cpack-rpm.log" 2>&1); then
    ok "cpack -G RPM"
else
    tail -n 20 "$scratch/cpack-rpm.log"
    bad "cpack -G RPM"
    finish
fi
rpm=$(ls "$dir"/ferry-nccl-net-*.rpm 2>/dev/null | head -n 1)
rpm_header() {
    local info
    info=$(rpm -qip "$rpm" 2>/dev/null)
    grep -qx 'Name        : ferry-nccl-net' <<<"$info" &&
        grep -qx 'License     : Apache-2.0' <<<"$info" &&
        grep -qx 'Summary     : NCCL network plugin with TCP and InfiniBand/RoCE backends' \
            <<<"$info" || { echo "$info"; return 1; }
}
check "rpm: Name, License, Summary" rpm_header
rpm_root=$scratch/rpm-root
mkdir -p "$rpm_root"
rpm_install() {
    if [ "$(id -u)" -eq 0 ]; then
        rpm --root "$rpm_root" --initdb && rpm --root "$rpm_root" --nodeps -i "$rpm" &&
            rpm --root "$rpm_root" -q ferry-nccl-net
    else
        (cd "$rpm_root" && rpm2cpio "$rpm" | cpio -idm --quiet)
    fi
}
check "rpm: installed into a scratch root" rpm_install
check "rpm: layout (compressed docs, man page, stripped)" layout_ok "$rpm_root"
same_files() {
    diff <(files_of "$deb_root" | grep '^/usr/') <(files_of "$rpm_root" | grep '^/usr/')
}
check "rpm: the same files as the .deb" same_files
check "rpm: installed ferry-info finds the installed plugin, healthy" info_ok "$rpm_root"
if [ "$link" -eq 1 ]; then
    check "rpm: installed ferry-info through the libnccl-net.so link, healthy" \
        info_ok "$rpm_root" --plugin "$rpm_root/usr/lib/libnccl-net.so"
fi
echo "packages: $(basename "$deb") $(basename "$rpm")"
finish
