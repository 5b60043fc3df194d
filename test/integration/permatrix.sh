#!/usr/bin/env bash
# Per-matrix sync (sfb/permatrix.c, --sync E1,E2 and --sync auto) end to end,
# on a network of two matrices (mlp, hidden 16) and 4 local workers:
#  * parity: at s = 0 with a fixed seed every engine mix (sfb, fms, sfb,fms,
#    fms,sfb, auto) ends with the parameters of the all-SFB run up to float
#    rounding (<= 1e-4 relative), and the replicas of each run agree (<= 1e-5).
#  * the "sync" metrics event names each matrix's engine; with auto it holds
#    both predictions and the choice is the cheaper one; rank 0 prints one
#    line per matrix.
#  * --trial-clocks 3 (every matrix measured, SFB_DEBUG_TRIAL_ALL): a trial
#    per matrix, each flipping one matrix of the plan the one before kept,
#    the same trials on every rank, each matrix ending on its faster
#    measured engine unless the trial said the gain was within the noise
#    (then the engine it had), the parameters those of --sync sfb.
#  * SSP: with injected delays and s in {1, 3}, a mixed job and an auto job
#    keep the SSP guarantee in every worker's metrics (ssp_check.py).
#  * bad values: an engine list longer than the model's matrices, an unknown
#    name in a list: exit 2 naming the value.
# Usage: permatrix.sh SFB MODEL_DIFF SSP_CHECK
set -uo pipefail
SFB=$1; DIFF=$2; CHECK=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
net=(--model mlp --hidden 16 --data synth:k=6,d=40,n=4000,seed=2)
common=(-n 4 "${net[@]}" --batch 8 --clocks 40 --staleness 0 --apply-early off --eval-every 0
        --seed 7 -q)

for sync in sfb fms sfb,fms fms,sfb auto; do
  timeout 100 "$SFB" run "${common[@]}" --sync $sync --model-out "$tmp/m.$sync.%r.sfb" \
    --out-dir "$tmp/o.$sync" >"$tmp/log.$sync" 2>&1
  rc=$?
  check "--sync $sync: exit 0 (rc=$rc)" "[ $rc = 0 ]"
  [ $rc = 0 ] || { tail -5 "$tmp/log.$sync"; continue; }
  [ $sync = sfb ] || check "--sync $sync: the parameters of --sync sfb" \
    "'$DIFF' '$tmp/m.sfb.0.sfb' '$tmp/m.$sync.0.sfb' 1e-4 >/dev/null"
  for r in 1 2 3; do
    check "--sync $sync: replica $r equals replica 0" \
      "'$DIFF' '$tmp/m.$sync.0.sfb' '$tmp/m.$sync.$r.sfb' 1e-5 >/dev/null"
  done
done

# --trial-clocks: every matrix measured both ways mid-run (SFB_DEBUG_TRIAL_ALL:
# whatever the predictions), the faster kept; the parameters still those of
# --sync sfb, the replicas agree, every rank saw the same trials
SFB_DEBUG_TRIAL_ALL=1 timeout 100 "$SFB" run "${common[@]}" --sync auto --trial-clocks 3 \
  --model-out "$tmp/m.trial.%r.sfb" --out-dir "$tmp/o.trial" >"$tmp/log.trial" 2>&1
rc=$?
check "--trial-clocks 3: exit 0 (rc=$rc)" "[ $rc = 0 ]"
check "--trial-clocks 3: the parameters of --sync sfb" \
  "'$DIFF' '$tmp/m.sfb.0.sfb' '$tmp/m.trial.0.sfb' 1e-4 >/dev/null"
check "--trial-clocks 3: replica 3 equals replica 0" \
  "'$DIFF' '$tmp/m.trial.0.sfb' '$tmp/m.trial.3.sfb' 1e-5 >/dev/null"
trials() {
  python3 - "$@" <<'PY'
import json, re, sys
log, paths = sys.argv[1], sys.argv[2:]
ranks = [[(e["clock"], e["engines"], e["ms_per_clock"], e["flipped"], e["flipped_ms_per_clock"],
           e["windows"], e["kept"]) for e in map(json.loads, open(p)) if e.get("event") == "trial"]
         for p in paths]
if any(r != ranks[0] for r in ranks):
    sys.exit("the ranks' trials differ")
t = ranks[0]
# one trial per matrix (a group each), each flipping one matrix of the
# plan the trial before kept
if len(t) != 2:
    sys.exit("trials %s" % (t,))
base = t[0][1]
for clock, eng, ms, flip, flip_ms, windows, kept in t:
    if eng != base or sum(a != b for a, b in zip(eng.split(","), flip.split(","))) != 1:
        sys.exit("trial %s does not flip one matrix of %s" % ((clock, eng, flip), base))
    # a flip is kept only when faster (beyond the noise: trial_stats.h), in 4 or 8 windows
    if kept not in ("flipped", "engines") or (kept == "flipped" and not flip_ms < ms) \
            or windows not in (4, 8):
        sys.exit("trial %s: kept %s" % ((clock, ms, flip_ms, windows), kept))
    base = flip if kept == "flipped" else eng
lines = re.findall(r"matrix (\d) \S+: ([0-9.e+-]+) ms a clock by sfb, ([0-9.e+-]+) ms by fms "
                   r"-> (\w+)( \(within the noise, kept\))?", open(log).read())
if len(lines) != 2:
    sys.exit("%d measured lines" % len(lines))
for m, sfb_ms, fms_ms, got, noise in lines:  # (equal to the 4 digits printed: either)
    faster = "fms" if float(fms_ms) < float(sfb_ms) else "sfb"
    if float(fms_ms) != float(sfb_ms) and (got != faster) != bool(noise):
        sys.exit("matrix %s: %s" % (m, (sfb_ms, fms_ms, got, noise)))
print("trials", t)
PY
}
check "--trial-clocks 3: 2 trials alike on every rank, each matrix the faster or within the noise" \
  "trials '$tmp/log.trial' '$tmp'/o.trial/metrics.*.jsonl"

# the "sync" event: engines per matrix; auto's choice is its cheaper prediction
sync_event() {
  python3 - "$@" <<'PY'
import json, sys
path, want = sys.argv[1], sys.argv[2]
ev = [json.loads(l) for l in open(path) if '"event":"sync"' in l]
if len(ev) != 1:
    sys.exit(f"{path}: {len(ev)} sync events")
m = ev[0]["matrices"]
got = ",".join(x["engine"] for x in m)
if want == "auto":
    for x in m:
        if x["sfb_ms"] is None or x["fms_ms"] is None:
            sys.exit(f"matrix {x['matrix']}: no prediction")
        cheaper = "fms" if x["fms_ms"] < x["sfb_ms"] else "sfb"
        if x["engine"] != cheaper:
            sys.exit(f"matrix {x['matrix']}: chose {x['engine']}, predictions {x}")
    print("auto chose", got)
elif got != want or any(x["sfb_ms"] is not None for x in m):
    sys.exit(f"engines {got}, want {want} (no predictions)")
PY
}
check "sync event of --sync fms,sfb" "sync_event '$tmp/o.fms,sfb/metrics.2.jsonl' fms,sfb"
check "sync event of --sync fms (both matrices)" "sync_event '$tmp/o.fms/metrics.0.jsonl' fms,fms"
check "sync event of --sync auto" "sync_event '$tmp/o.auto/metrics.1.jsonl' auto"
check "--sync auto: rank 0 prints one line per matrix" \
  "[ \$(grep -cE '^\[0\] matrix [01] (16x41|6x17): sfb [0-9.e+-]+ ms, fms [0-9.e+-]+ ms per clock -> (sfb|fms)$' '$tmp/log.auto') = 2 ]"

# SSP with injected delays: a mixed job and an auto job
for sync in sfb,fms auto; do
  for s in 1 3; do
    out=$(timeout 100 "$SFB" run -n 4 "${net[@]}" --batch 8 --clocks 40 --staleness $s \
          --debug-delay-ms 15 --eval-every 0 -q --sync $sync --out-dir "$tmp/s$s.$sync" 2>&1)
    rc=$?
    check "--sync $sync s=$s: exit 0 (rc=$rc)" "[ $rc = 0 ]"
    [ $rc = 0 ] || { printf '%s\n' "$out" | tail -5; continue; }
    check "--sync $sync s=$s: the SSP guarantee" \
      "python3 '$CHECK' $s '$tmp'/s$s.$sync/metrics.*.jsonl | tail -n 1"
  done
done

# bad values
timeout 30 "$SFB" run -n 2 --model mlr --data synth:k=3,d=5,n=200,seed=1 --clocks 2 -q \
  --sync sfb,fms --out-dir "$tmp/bad1" >"$tmp/bad1.log" 2>&1
rc=$?
check "two engines for mlr's one matrix: refused (rc=$rc)" "[ $rc != 0 ] && [ $rc != 124 ]"
check "... naming the value" "grep -q 'sync \"sfb,fms\" names more engines than the 1 matrices' '$tmp/bad1.log'"
timeout 30 "$SFB" run -n 2 "${net[@]}" --clocks 2 -q --sync sfb,nope >"$tmp/bad2.log" 2>&1
rc=$?
check "an unknown engine in a list: exit 2 (rc=$rc)" "[ $rc = 2 ]"
check "... naming the value" "grep -q -- '--sync: \"sfb,nope\"' '$tmp/bad2.log'"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
