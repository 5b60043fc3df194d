#!/usr/bin/env bash
# sfb topo --engines: the cost model of --sync auto (docs/design.md,
# "Choosing the engine per matrix") against values worked out by hand, the
# issue's MLP example, the break-even footer, --calibrate feeding alpha, the
# JSON form, and the usage errors of topo, run and worker (issue 16).
# Usage: topo_engines.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1: $out (rc $rc)"; fails=$((fails+1)); fi; }
run() { out=$("$@" 2>&1); rc=$?; }
# field NAME [LINE]: a JSON field of output line LINE (default 1), %.9g
field() { python3 -c 'import json,sys; l=sys.argv[1].splitlines()[int(sys.argv[3])-1]; v=json.loads(l)[sys.argv[2]]; print(v if isinstance(v,str) else "%.9g" % v)' "$out" "$1" "${2:-1}"; }

fixed=(--link-gbps 8 --latency-us 10 --gemm-gflops 1 --add-gadds 1)
# P = 16, K = D = 100, S = 1, a 1000-byte frame, alpha 10 us, beta 1e-9 s/B:
# halton (clock flush) sends 4 bundles of 15256 B in all; full 15 frames.
#   sfb halton: 40 + 15.256 + 320 us; sfb full: 150 + 15 + 320 us
#   fms: 31*10 + 30*(2500 + 64)*1e-3 + 20 + 10000*(3 + 15/16)/1e3 us
run "$SFB" topo --engines --sf 100,100,1 --sf-bytes 1000 --nodes 16 --topology halton,full --flush clock "${fixed[@]}" --json
check halton-json '[ $rc = 0 ] && [ "$(field sfb_ms)" = 0.375256 ] && [ "$(field fms_ms)" = 0.446295 ] && [ "$(field sfb_msgs)" = 4 ] && [ "$(field sfb_bytes)" = 15256 ] && [ "$(field fms_bytes)" = 76920 ] && [ "$(field winner)" = sfb ]'
check full-json '[ "$(field topology 2)" = full ] && [ "$(field sfb_ms 2)" = 0.485 ] && [ "$(field sfb_msgs 2)" = 15 ] && [ "$(field winner 2)" = fms ]'
run "$SFB" topo --engines --sf 100,100,1 --sf-bytes 1000 --nodes 16 --topology halton,full --flush clock "${fixed[@]}"
check footer '[ $rc = 0 ] && [[ "$out" == *"# halton: sfb at P = 16"* ]] && [[ "$out" == *"# full: fms at P = 16"* ]]'

# The issue's MLP 784->1024->10 at P = 4, S = 32, 1 Gbit/s, 50 us, 20
# GFLOP/s: layer 1 (1024 x 785) 15.998128 vs 44.52408 ms -> sfb; layer 2
# (10 x 1025) 3.462448 vs 0.9163095 ms -> fms.
mlp=(--nodes 4 --link-gbps 1 --latency-us 50 --gemm-gflops 20 --add-gadds 1 --json)
run "$SFB" topo --engines --sf 1024,785,32 "${mlp[@]}" --topology full
check mlp-layer1 '[ $rc = 0 ] && [ "$(field sfb_ms)" = 15.998128 ] && [ "$(field fms_ms)" = 44.52408 ] && [ "$(field sf_bytes)" = 231624 ] && [ "$(field winner)" = sfb ]'
run "$SFB" topo --engines --sf 10,1025,32 "${mlp[@]}" --topology full
check mlp-layer2 '[ $rc = 0 ] && [ "$(field sfb_ms)" = 3.462448 ] && [ "$(field fms_ms)" = 0.9163095 ] && [ "$(field winner)" = fms ]'

# A surface: several P, one line per (topology, P), winners change once.
run "$SFB" topo --engines --sf 1024,785,32 --nodes 2,4,8,16,32,64,128,256 --link-gbps 1 --latency-us 50 --gemm-gflops 20 --add-gadds 1
check surface '[ $rc = 0 ] && [ "$(grep -c "^full " <<<"$out")" = 8 ] && [ "$(grep -c "^halton " <<<"$out")" = 8 ] && [[ "$out" == *"# full: sfb at P = 2..8, fms at P = 16..256"* ]]'

# --calibrate: alpha = the file's alpha_s (latency + gap), beta from it too.
printf 'alpha_s 5e-5\nbeta_s_per_byte 8e-9\ngap_s 1e-5\n' >"$tmp/cal"
run "$SFB" topo --engines --sf 1024,785,32 --calibrate "$tmp/cal" --nodes 4 --topology full --gemm-gflops 20 --add-gadds 1 --json
check calibrate '[ $rc = 0 ] && [ "$(field latency_us)" = 50 ] && [ "$(field sfb_ms)" = 15.998128 ]'

# Rates measured here when not given: the header says so, values are sane.
run "$SFB" topo --engines --sf 64,64,8 --nodes 2
check measured '[ $rc = 0 ] && [[ "$out" == *"(measured here, 1 thread)"* ]] && [[ "$out" == *"# full: "* ]]'

# Usage errors: exit 2, naming the option.
run "$SFB" topo --engines --nodes 4
check no-sf '[ $rc = 2 ] && [[ "$out" == *"--engines needs --sf K,D,S"* ]]'
run "$SFB" topo --nodes 4 --gemm-gflops 5
check rates-need-engines '[ $rc = 2 ] && [[ "$out" == *"apply to --engines"* ]]'
run "$SFB" topo --engines --sf 4,4,4 --nodes 4 --gemm-gflops 0
check gemm-zero '[ $rc = 2 ] && [[ "$out" == *"--gemm-gflops"* ]]'
run "$SFB" topo --engines --sf 4,4,4 --nodes 4 --offsets
check offsets '[ $rc = 2 ] && [[ "$out" == *"--offsets does not apply"* ]]'
run "$SFB" topo --engines --sf 0,4,4 --nodes 4
check sf-zero '[ $rc = 2 ] && [[ "$out" == *"--sf"* ]]'
run "$SFB" topo --engines --sf 4,4,4 --nodes 4 --topology ring
check bad-topology '[ $rc = 2 ] && [[ "$out" == *"unknown"* ]]'
run "$SFB" run --link-gbps 0 --clocks 1
check run-gbps-zero '[ $rc = 2 ] && [[ "$out" == *"--link-gbps"* ]]'
run "$SFB" run --latency-us -1 --clocks 1
check run-latency-negative '[ $rc = 2 ] && [[ "$out" == *"--latency-us"* ]]'
run "$SFB" worker --link-gbps abc --clocks 1
check worker-gbps-nan '[ $rc = 2 ] && [[ "$out" == *"--link-gbps"* ]]'
run "$SFB" run --help
check run-help '[ $rc = 0 ] && [[ "$out" == *"--link-gbps G"* ]] && [[ "$out" == *"--latency-us L"* ]]'

echo "$passes passed, $fails failed"
[ $fails = 0 ]
