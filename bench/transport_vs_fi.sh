#!/bin/sh
# sfb's transport against libfabric's own fi_pingpong (package libfabric-bin),
# same provider, same sizes, 2 processes each, ping-pong bandwidth =
# size / half round trip (fi_pingpong's MB/sec column, 1e6 B/s), and the
# half round trip in µs (sfb_us, fi_pingpong_us).
#
#   transport_vs_fi.sh BENCH_TRANSPORT [--smoke] [--repeat R] [--sizes a,b]
#                      [--before OLD_BENCH_TRANSPORT] [--no-bind] [provider ...]
#
# Both sides run pinned, one process to a CPU (the first two this shell may
# use; taskset for fi_pingpong, --bind for bench_transport), as latency
# benchmarks are: left to the scheduler, a freshly forked process may share
# its parent's CPU for tens of milliseconds, longer than a small size's
# whole run. --no-bind (or a single CPU) leaves placement to the scheduler.
#
# Default providers shm tcp; sizes 4k,64k,1m,16m; R = 5 runs of each side,
# alternated, the median of each kept (on a shared machine single runs of
# either stack spread by 30 % or more, fi_pingpong's over tcp the most; the
# median of alternated runs compares what is typical, where best-of would
# reward whichever side is noisier). One line per (provider,
# size), then a verdict. Exit 1 when sfb reaches < 80 % of fi_pingpong's
# bandwidth at a size >= 1 MiB on any provider (not with --smoke, which runs
# tiny sizes once and only checks that both sides run). Exit 77 (skipped)
# when fi_pingpong is not installed. --before runs a second bench_transport
# (e.g. built from an older commit) in the same alternation and adds its
# GB/s and ratio as two more columns, for before/after tables measured under
# the same load; the gate looks at BENCH_TRANSPORT only.
set -u
BENCH=${1:?usage: transport_vs_fi.sh BENCH_TRANSPORT [--smoke] [--repeat R] [--sizes a,b] [provider ...]}
shift
SMOKE=0
REPEAT=5
SIZES=4k,64k,1m,16m
PROVS=
BEFORE=
BIND=1
while [ $# -gt 0 ]; do
    case $1 in
    --smoke) SMOKE=1; REPEAT=1; SIZES=4k,64k ;;
    --repeat) REPEAT=$2; shift ;;
    --sizes) SIZES=$2; shift ;;
    --before) BEFORE=$2; shift ;;
    --no-bind) BIND=0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) PROVS="$PROVS $1" ;;
    esac
    shift
done
[ -n "$PROVS" ] || PROVS="shm tcp"
GATE=0.80
FI=$(command -v fi_pingpong) || { echo "fi_pingpong not installed (libfabric-bin): skipped"; exit 77; }
# The first two CPUs of this shell's affinity list ("0-3,8" -> 0 1).
CPUS=$(awk '/^Cpus_allowed_list/ { n = split($2, r, ",");
    for (i = 1; i <= n && c < 2; i++) { split(r[i], ab, "-"); hi = (ab[2] == "") ? ab[1] : ab[2];
        for (x = ab[1]; x <= hi && c < 2; x++) { printf "%s%d", (c ? " " : ""), x; c++ } } }' /proc/self/status)
set -- $CPUS
if [ "$BIND" = 1 ] && [ $# = 2 ] && command -v taskset >/dev/null; then
    CPU0=$1 CPU1=$2
    PIN0="taskset -c $CPU0" PIN1="taskset -c $CPU1" SFB_BIND="--bind $CPU0,$CPU1"
else
    PIN0= PIN1= SFB_BIND=
fi
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT

bytes() { # 4k -> 4096
    echo "$1" | awk '{ n = $0 + 0; u = tolower(substr($0, length($0)));
        if (u == "k") n *= 1024; else if (u == "m") n *= 1048576; print n }'
}
iters() { # the same count bench_transport picks: 256 MiB each way, 200..2000
    if [ "$SMOKE" = 1 ]; then echo 5; return; fi
    awk -v s="$1" 'BEGIN { n = int(268435456 / s); if (n > 2000) n = 2000; if (n < 200) n = 200; print n }'
}

# fi_pingpong server + client on a private control port; prints GB/s or nothing.
# The ports lie below the kernel's ephemeral range (32768 up), where no
# other program's connection takes them; the client starts once the server
# listens (fi_pingpong's client does not retry a refused connection, and a
# loaded host may take seconds to start the server), and a failed client
# ends its server instead of waiting out its timeout.
PORT=$((20000 + $$ % 12000))
# Each run of fi_pingpong (and of bench_transport) ends within FI_TIMEOUT s
# (a smoke run of 5 round trips takes about one; fabtests' tcp client was
# seen to hang on a loaded host); fi_pingpong is tried up to 3 times (smoke:
# 2, within the test's 120 s).
FI_TIMEOUT=120 FI_ATTEMPTS="1 2 3"
[ "$SMOKE" = 1 ] && FI_TIMEOUT=15 FI_ATTEMPTS="1 2"
listening() { # port: some socket listens on it (ss, iproute2)
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]
}
fi_run() { # provider size
    n=$(iters "$1")
    for attempt in $FI_ATTEMPTS; do
        PORT=$((PORT + 1))
        $PIN1 timeout $FI_TIMEOUT "$FI" -p "$1" -e rdm -I "$n" -S "$2" -B "$PORT" >"$TMP/srv" 2>&1 &
        spid=$!
        w=0
        while ! listening "$PORT" && kill -0 $spid 2>/dev/null && [ $w -lt 300 ]; do
            sleep 0.05; w=$((w + 1))
        done
        crc=1
        if listening "$PORT"; then
            $PIN0 timeout $FI_TIMEOUT "$FI" -p "$1" -e rdm -I "$n" -S "$2" -P "$PORT" 127.0.0.1 \
                >"$TMP/cli" 2>&1
            crc=$?
            [ $crc = 124 ] && echo "(fi_pingpong's client did not end within $FI_TIMEOUT s)" >>"$TMP/cli"
        else
            echo "(fi_pingpong's server did not listen on port $PORT within 15 s)" >"$TMP/cli"
        fi
        [ $crc = 0 ] || kill $spid 2>/dev/null
        wait $spid
        src=$?
        if [ $crc = 0 ] && [ $src = 0 ]; then
            # Table: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
            awk 'NF == 8 && $1 != "bytes" { printf "%.6f\n", $6 / 1000 }' "$TMP/cli" | tail -1
            return 0
        fi
    done
    echo "fi_pingpong -p $1 -S $2 failed:" >&2
    cat "$TMP/cli" "$TMP/srv" >&2
    return 1
}

median() { # of the numbers given (none: nothing; an even count: the lower middle)
    [ $# -gt 0 ] || return 0
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

sfb_run() { # bench provider bytes: prints GB/s or nothing (errors to $TMP/err)
    extra=
    [ "$SMOKE" = 1 ] && extra="--iters 5"
    # an older bench_transport without --bind runs unpinned
    bind=$SFB_BIND
    [ -n "$bind" ] && ! "$1" --help 2>&1 | grep -q -- --bind && bind=
    # shellcheck disable=SC2086
    { timeout $FI_TIMEOUT "$1" --mode pingpong --sizes "$3" $extra $bind "$2" 2>"$TMP/err"
      [ $? = 124 ] && echo "(did not end within $FI_TIMEOUT s)" >>"$TMP/err"; } |
        awk '$1 ~ /^transport\/pingpong\// && $4 > 0 { printf "%.6f\n", $2 / $4 / 1000 }'
}

fail=0
hdr="# name  size  sfb_GB/s  fi_pingpong_GB/s  ratio  sfb_us  fi_pingpong_us"
[ -n "$BEFORE" ] && hdr="$hdr  before_GB/s  before_ratio"
echo "$hdr  (ping-pong, median of $REPEAT${SFB_BIND:+, pinned to CPUs $CPU0 and $CPU1})"
for prov in $PROVS; do
    list=$(echo "$SIZES" | tr ',' ' ')
    for s in $list; do
        eval "SFB_$(bytes "$s")="
        eval "FI_$(bytes "$s")="
        eval "OLD_$(bytes "$s")="
    done
    r=0
    while [ $r -lt "$REPEAT" ]; do
        r=$((r + 1))
        for s in $list; do
            b=$(bytes "$s")
            v=$(sfb_run "$BENCH" "$prov" "$b")
            if [ -z "$v" ]; then
                echo "bench_transport $prov $b failed:" >&2
                cat "$TMP/err" >&2
                fail=1
            fi
            eval "SFB_$b=\"\$SFB_$b $v\""
            if [ -n "$BEFORE" ]; then
                v=$(sfb_run "$BEFORE" "$prov" "$b")
                eval "OLD_$b=\"\$OLD_$b $v\""
            fi
            f=$(fi_run "$prov" "$b") || { [ "$SMOKE" = 1 ] || fail=1; }
            eval "FI_$b=\"\$FI_$b $f\""
        done
    done
    for s in $list; do
        b=$(bytes "$s")
        # shellcheck disable=SC2086 # the lists split into numbers on purpose
        eval "sv=\$(median \$SFB_$b); fv=\$(median \$FI_$b); ov=\$(median \$OLD_$b)"
        awk -v p="$prov" -v b="$b" -v s="$sv" -v f="$fv" -v o="$ov" -v before="$BEFORE" \
            -v g=$GATE -v smoke=$SMOKE 'BEGIN {
            if (s == "" || f == "") { printf "transport_vs_fi/%s  %d  %s  %s  n/a\n", p, b,
                (s == "" ? "-" : s), (f == "" ? "-" : f); exit 0 }
            r = (f > 0) ? s / f : 0
            low = !smoke && b >= 1048576 && r < g
            extra = ""
            if (before != "") extra = (o == "" || f <= 0) ? "  -  -" : sprintf("  %.3f  %.3f", o, o / f)
            us = (s > 0 && f > 0) ? sprintf("  %.3g  %.3g", b / s / 1000, b / f / 1000) : "  -  -"
            printf "transport_vs_fi/%s  %d  %.3f  %.3f  %.3f%s%s%s\n", p, b, s, f, r, us, extra,
                low ? "  BELOW " g * 100 "%" : ""
            exit low }' || fail=1
    done
done
if [ "$SMOKE" = 1 ]; then
    [ $fail = 0 ] && echo "verdict: smoke ok (no ratio gate)" || echo "verdict: smoke FAILED"
else
    [ $fail = 0 ] && echo "verdict: PASS (sfb >= 80% of fi_pingpong at >= 1 MiB on $(echo $PROVS))" ||
        echo "verdict: FAIL (sfb < 80% of fi_pingpong at >= 1 MiB, or a run failed)"
fi
exit $fail
