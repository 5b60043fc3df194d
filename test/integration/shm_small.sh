#!/usr/bin/env bash
# A /dev/shm too small for libfabric's shm provider (16 MiB, a container's
# default is 64 MiB) is named with its size, its free space and what the
# provider needs, not reported as "provider shm not available on this
# host". Runs in a private mount namespace with its own small /dev/shm
# (root or user namespaces needed; skipped, exit 77, without them).
# Usage: shm_small.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
uflags=-m # root; else a user namespace of one's own
ns() { # SIZE CMD...: CMD with a tmpfs of SIZE on /dev/shm, in a mount namespace of its own
  local size=$1; shift
  timeout -s KILL 60 unshare $uflags --propagation private -- sh -c \
    'mount -t tmpfs -o size="$0" tmpfs /dev/shm && exec "$@"' "$size" "$@"
}
ns 1M true 2>/dev/null || { uflags=-rm; ns 1M true 2>/dev/null; } ||
  { echo "skipped: cannot mount a private /dev/shm (unshare -m)"; exit 77; }
cpus=$(getconf _NPROCESSORS_ONLN)
data=synth:k=4,d=20,n=400,seed=1
ns 16M timeout 30 "$SFB" run -n 2 --data $data --clocks 2 -q --out-dir "$tmp/o" >"$tmp/s.out" 2>&1
rc=$?
check "16 MiB /dev/shm: exit 1 (rc=$rc)" "[ $rc = 1 ]"
check "names /dev/shm's size and free space" "grep -Eq '/dev/shm has 1[56]\.[0-9] MiB free of 16\.0 MiB' '$tmp/s.out'"
check "names what the provider needs ($cpus CPUs)" \
  "grep -qF 'room for one 16 MiB region per CPU ($cpus CPUs: $((16 * cpus)) MiB)' '$tmp/s.out'"
check "not 'not available'" "! grep -q 'not available on this host' '$tmp/s.out'"
[ $fails = 0 ] || cat "$tmp/s.out"
# room for what the provider asks: the job runs
ns $((16 * cpus + 16))M timeout 60 "$SFB" run -n 2 --data $data --clocks 2 -q --out-dir "$tmp/o2" \
  >"$tmp/ok.out" 2>&1
rc=$?
check "$((16 * cpus + 16)) MiB /dev/shm: the job runs (rc=$rc)" "[ $rc = 0 ]"
[ $rc = 0 ] || cat "$tmp/ok.out"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
