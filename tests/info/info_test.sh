#!/bin/bash
# info_test.sh CASE FERRY_INFO [PLUGIN]
#
# Runs the built ferry-info the way an operator would and checks its exit
# status and the words it prints (every check names what it wanted and
# shows the output on failure). The environment (NCCL_SOCKET_IFNAME,
# LD_LIBRARY_PATH to fakeibv, NCCL_FERRY_*) comes from the ctest entry.
#
#   socket   --backend socket on loopback: exit 0, device lo, self-test OK
#   ib       auto with fakeibv: the ib backend chosen (and why), its
#            emulated device listed with link layer and a passing self-test
#   ib-rail  NCCL_IB_HCA=fakeib0:1:3:5 on 2 fakeibv devices: rail 3, plane 5
#            on fakeib0:1's property line and in the INFO line; fakeib1:1
#            (given neither, first port) shows neither
#   json     --json --backend all: parses as JSON and holds the fields
#            scripts read (python3; skipped with 77 without it)
#   broken   NCCL_FERRY_BACKEND=ib without a verbs library: exit 1, the
#            reason from the plugin's WARN, NOT healthy
#   noplugin --plugin naming nothing: exit 1, every name tried
#   hang     every completion held back 1 s (NCCL_FERRY_INJECT_DELAY_US) and
#            --timeout 3: the run is killed and reported, exit 1
#   usage    a bad --backend: exit 2 with the accepted values
#   degraded auto with fakeibv's ports and NCCL_IB_HCA=nosuch: the socket
#            device passes, but exit 3, the plugin's WARN, a DEGRADED
#            verdict and a last line "degraded: <the WARN>"
#   degraded-json  the same as JSON: status "degraded", healthy false, the
#            reason at the top and in the run
#   auto-quiet auto with no RDMA device (fakeibv with none) and no ib
#            variable: socket, no WARN, exit 0, healthy
set -u
case_name=$1
info=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() {
    echo "FAIL ($case_name): $*"
    echo "---- ferry-info output ----"
    cat "$out"
    exit 1
}

# run EXPECTED_RC ARGS...: ferry-info with a time limit, output in $out.
run() {
    local want=$1 rc=0
    shift
    timeout 120 "$info" "$@" >"$out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || fail "exit status $rc, wanted $want (ferry-info $*)"
}

# has TEXT: the output holds TEXT (a fixed string).
has() {
    grep -qF -- "$1" "$out" || fail "no '$1' in the output"
}

case "$case_name" in
socket)
    run 0 --backend socket
    has "backend socket (asked for: socket)"
    has "using the socket backend (NCCL_FERRY_BACKEND=socket)"
    has "ABI:         ncclNetPlugin_v12 ncclNetPlugin_v11 ncclNetPlugin_v10 ncclNetPlugin_v9 ncclNetPlugin_v8"
    has "device 0: lo"
    has "ptrSupport HOST,"
    has "self-test: OK (2097152 bytes checked"
    # The effective configuration with each value's source.
    grep -qE '^    ifname +lo +env$' "$out" || fail "no 'ifname lo env' config row"
    grep -qE '^    backend +socket +env$' "$out" || fail "no 'backend socket env' config row"
    grep -qE '^  cpus: +[0-9]' "$out" || fail "no CPU mask"
    grep -qE '^  cpu quota: +(none \(no cgroup CPU limit|[0-9]+ us per [0-9]+ us, [0-9]+ whole CPU)' \
        "$out" || fail "no cgroup CPU quota line"
    grep -qE '^  verdict: +OK$' "$out" || fail "no OK verdict"
    grep -qx "healthy" "$out" || fail "not reported healthy"
    ;;
ib)
    run 0
    has "backend ib (asked for: auto)"
    has "using the ib backend (NCCL_FERRY_BACKEND=auto: fakeib0:1 is ACTIVE"
    has "ib backend using [0]fakeib0:1/IB"
    has "device 0: fakeib0:1"
    has "port 1, link layer IB, pciPath /"
    has "maxRecvs 8"
    has "self-test: OK (2097152 bytes checked"
    has "ferry-ibasync0[cpus "
    grep -qE '^    NCCL_IB_HCA +<all> +default$' "$out" || fail "no NCCL_IB_HCA config row"
    grep -qx "healthy" "$out" || fail "not reported healthy"
    ;;
ib-rail)
    run 0 --backend ib
    grep -qE 'ib backend using \[0\]fakeib0:1/IB\(rail 3 plane 5\) \[1\]fakeib1:1/IB( \[RO\])?;' \
        "$out" || fail "no 'ib backend using [0]fakeib0:1/IB(rail 3 plane 5) [1]fakeib1:1/IB;' line"
    has "device 0: fakeib0:1"
    has "port 1, link layer IB, rail 3, plane 5, pciPath /"
    has "device 1: fakeib1:1"
    grep -qE '^    speed [0-9]+ Mbps, port 1, link layer IB, pciPath /' "$out" ||
        fail "device 1 shows a rail or plane it was not given"
    grep -qx "healthy" "$out" || fail "not reported healthy"
    ;;
json)
    command -v python3 >/dev/null || { echo "SKIP: no python3 to parse the JSON"; exit 77; }
    run 0 --json --backend all
    python3 -m json.tool "$out" >/dev/null || fail "python3 -m json.tool cannot parse it"
    python3 - "$out" <<'PY' || fail "the JSON lacks a field (above)"
import json, sys
d = json.load(open(sys.argv[1]))
def want(cond, what):
    if not cond:
        print("missing or wrong: " + what)
        sys.exit(1)
want(d["healthy"] is True, "healthy == true")
want(d["plugin"]["abi_versions"] == [12, 11, 10, 9, 8], "plugin.abi_versions")
want(d["plugin"]["abi_used"] == 12, "plugin.abi_used")
want(d["plugin"]["path"].endswith("libnccl-net-ferry.so"), "plugin.path")
runs = {r["backend"]: r for r in d["runs"]}
want(set(runs) == {"ib", "socket"}, "one run per backend: %s" % sorted(runs))
want(d["runs"][0]["backend_asked"] == "auto" and d["runs"][0]["backend"] == "ib",
     "runs[0] is auto and chose ib")
want("fakeib0:1 is ACTIVE" in d["runs"][0]["choice"], "runs[0].choice says why")
want(runs["socket"]["optional"] is True, "the socket run is marked optional")
for name, r in runs.items():
    want(r["init_ok"] is True and r["healthy"] is True, name + ": init_ok and healthy")
    want(r["version"] == d["ferry_info_version"], name + ": version")
    want(r["ncpus"] >= 1 and r["cpus"], name + ": cpus")
    q = r["cpu_quota"]
    want(q is None or (q["cpus"] >= 1 and q["quota_us"] > 0 and q["period_us"] > 0 and q["file"]),
         name + ": cpu_quota null or {quota_us, period_us, cpus, file}")
    want(r["ndev"] == len(r["devices"]) >= 1, name + ": ndev")
    cfg = {c["name"]: c for c in r["config"]}
    want(cfg["ifname"]["value"] == "=lo" and cfg["ifname"]["source"] == "env",
         name + ": config ifname =lo from env")
    for dev in r["devices"]:
        st = dev["selftest"]
        want(st["ok"] is True and st["verdict"] == "OK", name + ": selftest ok")
        want(st["bytes_checked"] == 2 * 1048576, name + ": bytes_checked")
        want(st["rtt_iters"] > 0 and st["rtt_us"] > 0, name + ": rtt")
        want(dev["ptr_support"] == "HOST" and dev["speed_mbps"] > 0, name + ": props")
        for k in ("pci_path", "numa_node", "link_layer", "max_comms", "max_recvs", "latency_us"):
            want(k in dev, name + ": device field " + k)
        # No NCCL_IB_HCA rails here: undefined, null.
        want(dev["rail_id"] is None and dev["plane_id"] is None, name + ": rail_id/plane_id null")
want(runs["ib"]["devices"][0]["link_layer"] == "IB", "ib link_layer IB")
want(runs["socket"]["devices"][0]["name"] == "lo", "socket device lo")
want(len(runs["socket"]["threads"]) >= 1, "socket threads listed")
print("json: all fields present")
PY
    ;;
broken)
    run 1
    has "backend ib (asked for: ib)"
    has "verdict:   FAIL: init returned ncclInternalError: ib backend: cannot load libibverbs: tried /nonexistent/libibverbs.so.1"
    has "install rdma-core's libibverbs"
    grep -qx "NOT healthy" "$out" || fail "not reported NOT healthy"
    ;;
noplugin)
    run 1 --plugin ferry-nothere
    has "FAIL: cannot load the plugin 'ferry-nothere' (ferry-nothere: cannot open shared object file"
    has "libnccl-net-ferry-nothere.so: cannot open shared object file"
    has "pass --plugin /path/to/libnccl-net-ferry.so"
    ;;
hang)
    start=$SECONDS
    run 1 --backend socket --timeout 3
    has "verdict:   FAIL: the socket backend's run did not finish in 3 s (killed)"
    grep -qx "NOT healthy" "$out" || fail "not reported NOT healthy"
    [ $((SECONDS - start)) -lt 30 ] || fail "took $((SECONDS - start)) s to give up"
    ;;
usage)
    run 2 --backend bogus
    has "ferry-info: --backend bogus: expected auto, socket, ib or all"
    has "usage: ferry-info"
    ;;
degraded)
    run 3
    has "backend socket (asked for: auto)"
    has "using the socket backend (NCCL_FERRY_BACKEND=auto; ib not usable: NCCL_IB_HCA=nosuch"
    want_warn="NCCL_FERRY_BACKEND=auto: using the socket backend, not ib: NCCL_IB_HCA=nosuch"
    want_warn+=" matches none of the RDMA ports fakeib0:1; fix NCCL_IB_HCA, or set"
    want_warn+=" NCCL_FERRY_BACKEND=socket to silence this"
    has "  WARN:      $want_warn"
    has "device 0: lo"
    has "self-test: OK (2097152 bytes checked"
    has "verdict:   DEGRADED: the devices pass, but not on the backend meant to run here"
    [ "$(tail -n 1 "$out")" = "degraded: $want_warn" ] ||
        fail "the last line is not 'degraded: $want_warn'"
    ! grep -qx "healthy" "$out" || fail "reported healthy as well"
    ;;
degraded-json)
    command -v python3 >/dev/null || { echo "SKIP: no python3 to parse the JSON"; exit 77; }
    run 3 --json
    python3 - "$out" <<'PY' || fail "the JSON is wrong (above)"
import json, sys
d = json.load(open(sys.argv[1]))
want = ("NCCL_FERRY_BACKEND=auto: using the socket backend, not ib: NCCL_IB_HCA=nosuch matches"
        " none of the RDMA ports fakeib0:1; fix NCCL_IB_HCA, or set NCCL_FERRY_BACKEND=socket"
        " to silence this")
def check(cond, what):
    if not cond:
        print("missing or wrong: " + what)
        sys.exit(1)
check(d["healthy"] is False, "healthy == false")
check(d["status"] == "degraded", "status == degraded, not %r" % d.get("status"))
check(d["degraded_reason"] == want, "degraded_reason: %r" % d.get("degraded_reason"))
r = d["runs"][0]
check(r["backend"] == "socket" and r["backend_asked"] == "auto", "runs[0]: auto chose socket")
check(r["healthy"] is True, "runs[0].healthy (its device passed)")
check(r["degraded"] is True and r["degraded_reason"] == want, "runs[0].degraded and its reason")
check(want in r["warnings"], "runs[0].warnings holds the WARN")
print("degraded-json: status, reason and run fields as wanted")
PY
    ;;
auto-quiet)
    run 0
    has "backend socket (asked for: auto)"
    has "ib not usable: no RDMA device (ibv_get_device_list found none in "
    ! grep -q "WARN:" "$out" || fail "a WARN with no RDMA device and no ib variable"
    ! grep -qi "degraded" "$out" || fail "degraded with no RDMA device and no ib variable"
    grep -qx "healthy" "$out" || fail "not reported healthy"
    ;;
*)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "ok - ferry-info $case_name"
