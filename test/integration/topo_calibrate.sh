#!/usr/bin/env bash
# sfb topo --calibrate FILE: the model's G, O, L and CPU per message come from
# the file (G = 8/beta, O = gap, L = alpha - gap, M = alpha), later options
# override them, counts do not depend on them, and every bad file is a usage
# error naming FILE:LINE.
# Usage: topo_calibrate.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1: $out (rc $rc)"; fails=$((fails+1)); fi; }
run() { out=$("$@" 2>&1); rc=$?; }
field() { python3 -c 'import json,sys; print("%g" % json.loads(sys.argv[1])[sys.argv[2]])' "$out" "$1"; }
cat >"$tmp/c" <<'CAL'
# a comment
alpha_s 3e-4
beta_s_per_byte 8e-8

gap_s 1e-4
beta_pingpong_s_per_byte 1e-9
CAL
run "$SFB" topo --json --nodes 16 --topology halton --calibrate "$tmp/c"
check ok '[ $rc = 0 ]'
check gbps '[ "$(field link_gbps)" = 0.1 ]'
check overhead '[ "$(field msg_overhead_us)" = 100 ]'
check latency '[ "$(field latency_us)" = 200 ]'
check cpu-msg '[ "$(field cpu_msg_us)" = 300 ]'
msgs=$(field messages_per_clock); net=$(field network_time_s)
run "$SFB" topo --json --nodes 16 --topology halton
check counts-unchanged '[ "$(field messages_per_clock)" = "$msgs" ]'
run "$SFB" topo --json --nodes 16 --topology halton --calibrate "$tmp/c" --link-gbps 2 --host-cores 1
check override '[ "$(field link_gbps)" = 2 ] && [ "$(field host_cores)" = 1 ]'
check cpu-term '[ "$(field cpu_time_s)" = "$(python3 -c "print(\"%g\" % ($msgs * 300e-6))")" ]'
check time-max '[ "$(field time_s)" = "$(field cpu_time_s)" ]'
run "$SFB" topo --nodes 16 --calibrate "$tmp/c" --host-cores 2
check table-bound '[ $rc = 0 ] && [[ "$out" == *"host CPU"*"-bound"* ]]'
bad() { # name, file contents, expected message
  printf '%b' "$2" >"$tmp/bad"; want=$3
  run "$SFB" topo --nodes 4 --calibrate "$tmp/bad"
  check "$1" '[ $rc = 2 ] && [[ "$out" == *"$want"* ]]'
}
bad unknown-key 'alpha_s 1e-5\nbeta_s_per_byte 1e-8\nspeed 3\n' "bad:3: unknown key 'speed'"
bad not-a-number 'alpha_s fast\n' 'bad:1: alpha_s needs one number'
bad negative 'alpha_s 1e-5\nbeta_s_per_byte -1\n' 'bad:2: beta_s_per_byte needs one number'
bad extra-field 'alpha_s 1e-5 2\n' 'bad:1: alpha_s needs one number'
bad twice 'alpha_s 1e-5\nalpha_s 2e-5\n' 'bad:2: alpha_s given twice'
bad missing-beta 'alpha_s 1e-5\n' 'needs alpha_s and beta_s_per_byte > 0'
bad zero-beta 'alpha_s 1e-5\nbeta_s_per_byte 0\n' 'needs alpha_s and beta_s_per_byte > 0'
run "$SFB" topo --nodes 4 --calibrate "$tmp/none"
check no-file '[ $rc = 2 ] && [[ "$out" == *"cannot open"*"none"* ]]'
run "$SFB" topo --nodes 4 --host-cores x
check bad-cores '[ $rc = 2 ] && [[ "$out" == *"--host-cores"* ]]'
run "$SFB" topo --nodes 4 --cpu-msg-us -3
check bad-cpu '[ $rc = 2 ] && [[ "$out" == *"--cpu-msg-us"* ]]'
echo "$passes passed, $fails failed"
[ $fails = 0 ]
