#!/bin/sh
# PMIx bootstrap under Open MPI's mpirun: 2 and 4 ranks of boot_helper gather.
# $2 (optional): the helper linked with libev first.
# Skips (77) when mpirun is not installed.
helper="$1"
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipping"; exit 77; }
extra="--oversubscribe"
[ "$(id -u)" = 0 ] && extra="$extra --allow-run-as-root"
# Keep the env rendezvous out of the way: PMIx must be the detected mode.
unset SFB_RANK SFB_WORLD_SIZE SFB_RENDEZVOUS SFB_JOB_KEY
# libpmix leaks a few bytes at init under ASan builds; not ours.
export LSAN_OPTIONS="suppressions=$(dirname "$0")/../lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fail=0
for n in 2 4; do
    out=$(timeout -k 5 40 mpirun $extra -n $n "$helper" gather 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -ne 0 ]; then echo "mpirun -n $n: exit $rc"; fail=1; continue; fi
    for r in $(seq 0 $((n - 1))); do
        echo "$out" | grep -q "^ok rank $r size $n kind PMIx key 0x" ||
            { echo "mpirun -n $n: no ok line for rank $r"; fail=1; }
    done
    keys=$(echo "$out" | sed -n 's/^ok rank .* key \(0x[0-9a-f]*\)$/\1/p' | sort -u | wc -l)
    [ "$keys" = 1 ] || { echo "mpirun -n $n: ranks disagree on the job key"; fail=1; }
done
# A binary where libev shadows libevent must fail cleanly, naming the cure.
if [ -n "$2" ]; then
    out=$(timeout -k 5 40 mpirun $extra -n 1 "$2" gather 2>&1)
    rc=$?
    echo "$out" | grep -q "link libevent_core before libev" ||
        { echo "libev-first binary: expected the libevent diagnostic (exit $rc)"; echo "$out"; fail=1; }
fi
exit $fail
