#!/bin/bash
# with_sysfs.sh CMD [ARGS...]
#
# Runs CMD where /sys/class/infiniband (and /sys/class/infiniband_verbs)
# show fakeibv's sysfs tree, for clients that build those paths by hand
# instead of from ibdev_path / ibv_get_sysfs_path() (NCCL does: its GID
# auto-selection reads /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>,
# its topology /sys/class/infiniband/<dev>/device).
#
# As root: a private mount namespace (unshare -m), FAKEIBV_SYSFS_ROOT set to
# a fresh directory (or the one given) whose class/infiniband is bind-mounted
# over /sys/class/infiniband. sysfs cannot create that directory, so when the
# host has none a tmpfs goes over /sys/class first, holding bind mounts of
# every real class next to the two fake ones. fakeibv fills the directory in
# place when CMD first lists devices. The host's own mounts are untouched.
#
# Not root (or no unshare): prints a note and just runs CMD; fakeibv's tree
# is then only reachable through ibdev_path / ibv_get_sysfs_path().
#
# Every fakeibv process under one with_sysfs.sh shares the root: the first
# one writes it, and the lid, gids and node_guid files are that process's
# (the GID types, netdevs, device links and rates are the same for all
# processes of one configuration). Wrap each process separately to give
# each its own.
set -u
[ "$#" -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
    echo "with_sysfs.sh: not root (or no unshare): running without /sys/class/infiniband" >&2
    exec "$@"
fi

made=
if [ -z "${FAKEIBV_SYSFS_ROOT:-}" ]; then
    FAKEIBV_SYSFS_ROOT=$(mktemp -d /tmp/fakeibv-sysfs-ns.XXXXXX) || exit 1
    made=$FAKEIBV_SYSFS_ROOT
fi
export FAKEIBV_SYSFS_ROOT
mkdir -p "$FAKEIBV_SYSFS_ROOT/class/infiniband" "$FAKEIBV_SYSFS_ROOT/class/infiniband_verbs" || exit 1

# shellcheck disable=SC2016 # expanded by the inner shell.
unshare --mount --propagation private -- bash -c '
    set -e
    root=$FAKEIBV_SYSFS_ROOT
    if [ ! -d /sys/class/infiniband ] || [ ! -d /sys/class/infiniband_verbs ]; then
        keep=$(mktemp -d /tmp/fakeibv-sysclass.XXXXXX)
        mount --bind /sys/class "$keep"
        mount -t tmpfs -o mode=0755 fakeibv-sysclass /sys/class
        for c in "$keep"/*; do
            n=${c##*/}
            mkdir "/sys/class/$n"
            mount --bind "$c" "/sys/class/$n"
        done
        mkdir -p /sys/class/infiniband /sys/class/infiniband_verbs
        umount -l "$keep"
        rmdir "$keep"
    fi
    mount --bind "$root/class/infiniband" /sys/class/infiniband
    mount --bind "$root/class/infiniband_verbs" /sys/class/infiniband_verbs
    set +e
    exec "$@"
' with_sysfs.sh "$@"
rc=$?
[ -n "$made" ] && rm -rf "$made"
exit "$rc"
