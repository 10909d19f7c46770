#!/usr/bin/env bash
# Smoke run of ferry-scale (bench/scale/README.md): N pairs on the backend the
# environment names; checks the output's form, that the data was right and,
# on ib, that comms share control-block registrations; never the timings. Usage: scale_check.sh FERRY_SCALE PAIRS
set -u
bin=$1
pairs=$2
out=$("$bin" --pairs "$pairs")
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
    echo "scale_check: ferry-scale exited $rc" >&2
    exit 1
fi
printf '%s\n' "$out" | awk -F, -v pairs="$pairs" '
    NR == 1 {
        if ($0 != "backend,role,pairs,connect_accept_s,threads_before,threads_after,ferry_threads,fakeibv_threads,rss_kib_per_pair,fds_per_pair,qps_per_pair,cqs_per_pair,mrs_per_pair,cq_entries_per_pair,rounds,data_s,user_ms_per_round,sys_ms_per_round,data") {
            print "scale_check: unexpected header: " $0 > "/dev/stderr"; bad = 1
        }
        next
    }
    {
        rows++
        if (NF != 19) { print "scale_check: row " NR " has " NF " fields: " $0 > "/dev/stderr"; bad = 1 }
        if ($2 != "A" && $2 != "B") { print "scale_check: row " NR ": role " $2 > "/dev/stderr"; bad = 1 }
        if ($3 != pairs) { print "scale_check: row " NR ": " $3 " pairs, " pairs " asked" > "/dev/stderr"; bad = 1 }
        for (i = 4; i <= 10; i++)
            if ($i !~ /^-?[0-9]+(\.[0-9]+)?$/) { print "scale_check: row " NR " field " i " is not a number: " $i > "/dev/stderr"; bad = 1 }
        for (i = 11; i <= 14; i++)
            if ($i != "na" && $i !~ /^-?[0-9]+(\.[0-9]+)?$/) { print "scale_check: row " NR " field " i ": " $i > "/dev/stderr"; bad = 1 }
        if ($1 == "ib" && $11 == "na") { print "scale_check: ib on fakeibv without object counts" > "/dev/stderr"; bad = 1 }
        # Comms share the registrations of their control blocks (src/ib/ib_ctrl_pool.c): far fewer
        # MRs than comms, each pair being two comms.
        if ($1 == "ib" && $13 != "na" && $13 + 0 >= 1) { print "scale_check: " $13 " MRs per pair: the control blocks are registered one by one" > "/dev/stderr"; bad = 1 }
        # A CQ holds what its comm can owe (src/ib/ib_qp.c), not every QP queue twice over:
        # a pair (a send and a recv comm, one QP each) stays under 1,024 entries.
        if ($1 == "ib" && $14 != "na" && $14 + 0 >= 1024) { print "scale_check: " $14 " CQ entries per pair: CQs are sized past what a comm can have outstanding" > "/dev/stderr"; bad = 1 }
        for (i = 15; i <= 18; i++)
            if ($i !~ /^[0-9]+(\.[0-9]+)?$/) { print "scale_check: row " NR " field " i " is not a number: " $i > "/dev/stderr"; bad = 1 }
        if ($15 != 1) { print "scale_check: row " NR ": " $15 " rounds, 1 asked" > "/dev/stderr"; bad = 1 }
        if ($19 != "ok") { print "scale_check: row " NR ": data " $19 > "/dev/stderr"; bad = 1 }
    }
    END {
        if (rows != 2) { print "scale_check: " rows " rows, 2 expected" > "/dev/stderr"; bad = 1 }
        exit bad
    }'
