#!/usr/bin/env bash
# Checkpoints and --resume end to end. Usage: checkpoint.sh SFB MODE
#   kill     4 workers on Fashion-MNIST write checkpoints; one is SIGKILLed
#            after the first checkpoint exists; every rank stops within
#            10 s, `sfb run` exits non-zero naming it; --resume finishes the
#            job; its test accuracy is within 0.5 points of an uninterrupted
#            run with the same seed. BSP (--staleness 0): every clock applies
#            exactly the previous clock's updates on every replica, so the
#            resumed run follows the same trajectory as the uninterrupted one
#            (up to float summation order) and a tight bound is fair.
#   mlp      one worker, mlp with two hidden layers (three matrices): a
#            resumed run ends bit-identical to an uninterrupted one, and
#            resuming with other --hidden sizes is refused naming the field.
#            Needs MODEL_DIFF as 3rd arg.
#   corrupt  a flipped byte / a truncated newest file of one rank: resume
#            falls back to the previous checkpoint (log line, clock); every
#            file of a rank corrupted: a clear error, non-zero exit.
#   exact    BSP, 2 workers: resumed runs end bit-identical to uninterrupted
#            ones (mlr over SFB and FMS, dml). Needs MODEL_DIFF as 3rd arg.
#   metrics  a resumed run's final line, summary (clocks, bytes per clock)
#            and epochs describe the clocks it computed; both engines count
#            their data messages (FMS: pushes and sums).
#   full     outputs (metrics, model, checkpoints) written to a full disk
#            (/dev/full; a filled 1 MiB tmpfs in a private mount namespace):
#            exit 1 naming the file, no final line claiming the file.
#   config   resuming with other settings (lr, -n) is refused naming the
#            field, the same message on every rank (-n: 20 tries); a fresh
#            run refuses a directory holding checkpoints.
# Every process is bounded by timeout and reaped on exit.
set -uo pipefail
SFB=$1; mode=$2
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
acc_of() { sed -n 's/^\(\[0\] \)\{0,1\}test accuracy \([0-9.]*\)%.*/\2/p' "$1" | tail -n 1; }
resumed_clock() { sed -n 's/.*rank 0: resumed from checkpoint of clock \([0-9]*\).*/\1/p' "$1" | head -n 1; }

case $mode in
kill)
  job=(run -n 4 --model mlr --data fashion-mnist --staleness 0 --clocks 3000 --seed 3 --eval-every 0 -q)
  timeout 200 "$SFB" "${job[@]}" --out-dir "$tmp/ref" >"$tmp/ref.log" 2>&1
  check "uninterrupted run succeeds" "[ $? = 0 ]"
  ref=$(acc_of "$tmp/ref.log")
  # the debug delay (0.5 ms a clock on average) only stretches the window
  # to kill in; it changes no number
  "$SFB" "${job[@]}" --out-dir "$tmp/o" --checkpoint-every 500 --checkpoint-dir "$tmp/ck" \
    --debug-delay-ms 1 >"$tmp/run.log" 2>&1 &
  run=$!; pids+=($run)
  ok=0
  for _ in $(seq 1200); do
    n=$(ls "$tmp/ck" 2>/dev/null | grep -c '^rank-[0-3]\.clock-000000000500\.ckpt$')
    [ "$n" = 4 ] && { ok=1; break; }
    kill -0 $run 2>/dev/null || break
    sleep 0.05
  done
  check "every rank wrote the checkpoint of clock 500" "[ $ok = 1 ]"
  victim=
  for p in $(pgrep -P $run); do   # rank 1's worker (pids may wrap): sfb run names
    # the workers it forks "sfb rank R"; an exec'd one has SFB_RANK in its environ
    { [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "sfb rank 1" ] ||
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'SFB_RANK=1'; } && victim=$p
  done
  check "found rank 1's process" "[ -n '$victim' ]"
  kill -9 "$victim"; t0=$(date +%s.%N)
  for _ in $(seq 150); do kill -0 $run 2>/dev/null || break; sleep 0.1; done
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  kill -9 $run 2>/dev/null; wait $run; rc=$?
  check "sfb run exits non-zero by itself (rc=$rc)" "[ $rc != 0 ] && [ $rc != 137 ]"
  check "every rank stopped within 10 s (took $dt s)" "awk 'BEGIN{exit !($dt <= 10)}'"
  # the launcher stops the other workers and names the killed one
  check "sfb run names the killed rank" "grep -q 'rank 1 killed by signal 9' '$tmp/run.log'"
  tail -n 3 "$tmp/run.log"
  check "the run did not finish" "! grep -q 'test accuracy' '$tmp/run.log'"
  ls "$tmp/ck"
  timeout 200 "$SFB" "${job[@]}" --out-dir "$tmp/o2" --resume "$tmp/ck" --checkpoint-every 500 \
    >"$tmp/resume.log" 2>&1
  rc=$?
  check "resumed run succeeds (rc=$rc)" "[ $rc = 0 ]"
  c=$(resumed_clock "$tmp/resume.log")
  check "resumed from a checkpoint at clock >= 500 (clock ${c:-none})" "[ -n '$c' ] && [ '$c' -ge 500 ]"
  got=$(acc_of "$tmp/resume.log")
  echo "uninterrupted: ${ref:-?}%  resumed from clock ${c:-?}: ${got:-?}%"
  check "accuracy within 0.5 points of the uninterrupted run" \
    "[ -n '$ref' ] && [ -n '$got' ] && awk 'BEGIN{d=$ref-$got; if(d<0)d=-d; exit !(d <= 0.5)}'"
  ;;
exact)
  # BSP with 2 workers applies one peer update per clock, always the same
  # way: a resumed run must end bit-identical to an uninterrupted one, for
  # SFB and FMS, and for dml, whose pair stream lives in its private state;
  # and for a job of two matrices synchronized by different engines, named
  # (sfb,fms) or chosen (auto: the resumed run keeps the checkpoint's choice).
  MODEL_DIFF=$3
  for cfg in "--model mlr --sync sfb" "--model mlr --sync fms" "--model dml --lr 0.01" \
             "--model mlp --hidden 12 --sync sfb,fms" "--model mlp --hidden 12 --sync auto"; do
    n=$(echo $cfg | tr -d ' -')
    j=(run -n 2 $cfg --data synth:k=4,d=20,n=4000,seed=1 --staleness 0 --eval-every 0 -q --metrics-out "$tmp/m.%r")
    timeout 60 "$SFB" "${j[@]}" --clocks 300 --model-out "$tmp/$n.ref" >"$tmp/$n.log" 2>&1
    timeout 60 "$SFB" "${j[@]}" --clocks 200 --model-out "$tmp/$n.a" --checkpoint-every 100 \
      --checkpoint-dir "$tmp/$n.ck" >>"$tmp/$n.log" 2>&1
    timeout 60 "$SFB" "${j[@]}" --clocks 300 --model-out "$tmp/$n.b" --resume "$tmp/$n.ck" >>"$tmp/$n.log" 2>&1
    check "$cfg: resumed from clock 200" "[ \"\$(resumed_clock '$tmp/$n.log')\" = 200 ]"
    out=$("$MODEL_DIFF" "$tmp/$n.ref" "$tmp/$n.b" 0); rc=$?
    echo "$cfg: $out"
    check "$cfg: resumed model bit-identical to the uninterrupted one" "[ $rc = 0 ]"
    case $cfg in *auto*)
      check "$cfg: the resumed run keeps the checkpoint's engines" \
        "grep -q \"sync auto: the checkpoint's engines [a-z,]*\$\" '$tmp/$n.log'";;
    esac
  done
  ;;
mlp)
  MODEL_DIFF=$3
  j=(run -n 1 --model mlp --data synth:k=4,d=20,n=4000,seed=1 --eval-every 0 -q --metrics-out "$tmp/m.%r")
  timeout 60 "$SFB" "${j[@]}" --hidden 24,12 --clocks 300 --model-out "$tmp/mlp.ref" >"$tmp/mlp.log" 2>&1
  check "uninterrupted mlp run succeeds" "[ $? = 0 ]"
  timeout 60 "$SFB" "${j[@]}" --hidden 24,12 --clocks 200 --model-out "$tmp/mlp.a" --checkpoint-every 100 \
    --checkpoint-dir "$tmp/mlp.ck" >>"$tmp/mlp.log" 2>&1
  timeout 60 "$SFB" "${j[@]}" --hidden 24,12 --clocks 300 --model-out "$tmp/mlp.b" --resume "$tmp/mlp.ck" \
    >>"$tmp/mlp.log" 2>&1
  check "mlp: resumed from clock 200" "[ \"\$(resumed_clock '$tmp/mlp.log')\" = 200 ]"
  out=$("$MODEL_DIFF" "$tmp/mlp.ref" "$tmp/mlp.b" 0); rc=$?
  echo "mlp: $out"
  check "mlp: resumed model bit-identical to the uninterrupted one" "[ $rc = 0 ]"
  timeout 60 "$SFB" "${j[@]}" --hidden 24,13 --clocks 300 --model-out "$tmp/mlp.c" --resume "$tmp/mlp.ck" \
    >"$tmp/hidden.log" 2>&1
  rc=$?
  check "other --hidden: refused (rc=$rc)" "[ $rc != 0 ] && [ $rc != 124 ]"
  check "other --hidden: message names the field" \
    "grep -q 'configuration differs: hidden is \"24,12\" in the checkpoint, \"24,13\" now' '$tmp/hidden.log'"
  grep -h "configuration differs" "$tmp/hidden.log" | head -n 1
  ;;
corrupt)
  job=(run -n 2 --data synth:k=4,d=20,n=4000,seed=1 --clocks 300 --eval-every 0 -q)
  timeout 60 "$SFB" "${job[@]}" --out-dir "$tmp/o" --checkpoint-every 100 --checkpoint-dir "$tmp/pristine" \
    >"$tmp/w.log" 2>&1
  check "run with checkpoints succeeds" "[ $? = 0 ]"
  check "two checkpoints kept per rank (200, 300)" \
    "[ \"\$(ls '$tmp/pristine' | tr '\n' ' ')\" = 'rank-0.clock-000000000200.ckpt rank-0.clock-000000000300.ckpt rank-1.clock-000000000200.ckpt rank-1.clock-000000000300.ckpt ' ]"
  newest=rank-1.clock-000000000300.ckpt
  for how in flip truncate; do
    rm -rf "$tmp/ck"; cp -r "$tmp/pristine" "$tmp/ck"
    if [ $how = flip ]; then
      python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0x10; open(p,'wb').write(b)" "$tmp/ck/$newest"
      why='checksum mismatch'
    else
      truncate -s -100 "$tmp/ck/$newest"; why='truncated'
    fi
    timeout 60 "$SFB" "${job[@]}" --clocks 400 --out-dir "$tmp/o" --resume "$tmp/ck" >"$tmp/$how.log" 2>&1
    rc=$?
    check "$how: resume succeeds (rc=$rc)" "[ $rc = 0 ]"
    check "$how: warning names the file and the reason" "grep -q 'skipping checkpoint: .*$newest.*$why' '$tmp/$how.log'"
    check "$how: resumed from the previous checkpoint (clock 200)" "[ \"\$(resumed_clock '$tmp/$how.log')\" = 200 ]"
    grep -h "skipping" "$tmp/$how.log" | head -n 1
  done
  rm -rf "$tmp/ck"; cp -r "$tmp/pristine" "$tmp/ck"
  for f in "$tmp"/ck/rank-0.*; do printf 'garbage' | dd of="$f" bs=1 seek=40 conv=notrunc 2>/dev/null; done
  timeout 60 "$SFB" "${job[@]}" --out-dir "$tmp/o" --resume "$tmp/ck" >"$tmp/all.log" 2>&1
  rc=$?
  check "all of rank 0 corrupted: non-zero exit (rc=$rc)" "[ $rc != 0 ] && [ $rc != 124 ]"
  check "all corrupted: error names the dir and the rank" "grep -q 'no valid checkpoint of rank 0 in $tmp/ck' '$tmp/all.log'"
  check "all corrupted: no training happened" "! grep -q 'test accuracy' '$tmp/all.log'"
  grep -h "no valid" "$tmp/all.log" | head -n 2
  timeout 60 "$SFB" "${job[@]}" --out-dir "$tmp/o" --resume "$tmp/nothing-here" >"$tmp/none.log" 2>&1
  rc=$?
  check "missing dir: non-zero exit (rc=$rc)" "[ $rc != 0 ] && [ $rc != 124 ] && grep -q 'no valid checkpoint of rank 0 in $tmp/nothing-here' '$tmp/none.log'"
  # no rank has a file: every rank names the same one (rank 0), whichever
  # rank's error comes first
  check "missing dir: every rank names rank 0" "! grep -q 'no valid checkpoint of rank 1' '$tmp/none.log'"
  ;;
config)
  job=(run -n 2 --data synth:k=4,d=20,n=4000,seed=1 --clocks 200 --eval-every 0 -q)
  timeout 60 "$SFB" "${job[@]}" --out-dir "$tmp/o" --checkpoint-every 100 --checkpoint-dir "$tmp/ck" >"$tmp/w.log" 2>&1
  check "run with checkpoints succeeds" "[ $? = 0 ]"
  timeout 60 "$SFB" "${job[@]}" --clocks 300 --out-dir "$tmp/o" --resume "$tmp/ck" --lr 0.5 >"$tmp/lr.log" 2>&1
  rc=$?
  check "other --lr: refused (rc=$rc)" "[ $rc != 0 ] && [ $rc != 124 ]"
  check "other --lr: message names the field" "grep -q 'configuration differs: lr is \"1\" in the checkpoint, \"0.5\" now' '$tmp/lr.log'"
  grep -h "configuration differs" "$tmp/lr.log" | head -n 1
  # -n 3: rank 2 has no file at all, ranks 0 and 1 files of world 2; every
  # rank must report the world size (not "no valid checkpoint of rank 2"),
  # whichever rank the launcher hears from first: 20 tries
  args=("${job[@]}"); args[2]=3
  bad=0
  for i in $(seq 20); do
    timeout 60 "$SFB" "${args[@]}" --out-dir "$tmp/o" --resume "$tmp/ck" >"$tmp/n.log" 2>&1
    rc=$?
    if [ $rc = 0 ] || [ $rc = 124 ] || ! grep -q 'training failed: .*world is 2 in the checkpoint, 3 now' "$tmp/n.log" ||
       grep 'training failed' "$tmp/n.log" | grep -vq 'world is 2 in the checkpoint, 3 now (resume with -n 2)'; then
      bad=$((bad+1)); cat "$tmp/n.log"
    fi
  done
  check "other -n: refused naming the world size on every rank, 20 of 20 (wrong: $bad)" "[ $bad = 0 ]"
  timeout 60 "$SFB" "${job[@]}" --model-out "$tmp/m.sfb" --metrics-out "$tmp/m.%r" --resume "$tmp/ck" --model dml --lr 0.01 >"$tmp/model.log" 2>&1
  check "other --model: refused naming the field" "[ $? != 0 ] && grep -q 'model is \"mlr\" in the checkpoint, \"dml\" now' '$tmp/model.log'"
  timeout 60 "$SFB" "${job[@]}" --out-dir "$tmp/o" --checkpoint-every 100 --checkpoint-dir "$tmp/ck" >"$tmp/fresh.log" 2>&1
  check "fresh run into a directory with checkpoints: refused" "[ $? != 0 ] && grep -q 'already holds checkpoints of rank' '$tmp/fresh.log'"
  timeout 60 "$SFB" "${job[@]}" --clocks 300 --out-dir "$tmp/o" --resume "$tmp/ck" >"$tmp/ok.log" 2>&1
  check "same settings, more clocks: resumes at 200" "[ $? = 0 ] && [ \"\$(resumed_clock '$tmp/ok.log')\" = 200 ]"
  ;;
metrics)
  # What a resumed run reports is about the clocks it computed: 2 workers,
  # 125 clocks an epoch; 300 uninterrupted against 200 + resume to 300.
  for sync in sfb fms; do
    j=(run -n 2 --sync $sync --data synth:k=4,d=20,n=4000,seed=1 --staleness 0 --eval-every 0)
    timeout 60 "$SFB" "${j[@]}" --clocks 300 --metrics-out "$tmp/$sync.ref.%r" >"$tmp/$sync.ref.log" 2>&1
    timeout 60 "$SFB" "${j[@]}" --clocks 200 -q --checkpoint-every 100 --checkpoint-dir "$tmp/$sync.ck" \
      >"$tmp/$sync.a.log" 2>&1
    timeout 60 "$SFB" "${j[@]}" --clocks 300 --resume "$tmp/$sync.ck" --metrics-out "$tmp/$sync.b.%r" \
      >"$tmp/$sync.b.log" 2>&1
    rc=$?
    check "$sync: resumed run succeeds (rc=$rc)" "[ $rc = 0 ]"
    check "$sync: the final line says what this run did" \
      "grep -q ': 100 clocks (resumed at clock 200, now at 300), 1600 samples/worker in' '$tmp/$sync.b.log'"
    check "$sync: an uninterrupted run's final line is unchanged" \
      "grep -q ': 300 clocks, 4800 samples/worker in' '$tmp/$sync.ref.log'"
    # the resumed summary covers its own 100 clocks: same bytes per clock as
    # the uninterrupted run (within 2 %), start_clock 200, clocks 100
    out=$(python3 - "$tmp/$sync.ref.0" "$tmp/$sync.b.0" <<'PY'
import json, sys
def summary(p):
    return [json.loads(l) for l in open(p) if '"summary"' in l][0]
a, b = summary(sys.argv[1]), summary(sys.argv[2])
d = abs(b["bytes_sent_per_clock"] / a["bytes_sent_per_clock"] - 1)
print(f"bytes/clock {a['bytes_sent_per_clock']:.0f} uninterrupted, {b['bytes_sent_per_clock']:.0f} resumed; "
      f"start_clock {b['start_clock']} clocks {b['clocks']} samples {b['samples']}")
sys.exit(not (d <= 0.02 and b["start_clock"] == 200 and b["clocks"] == 100 and b["samples"] == 1600
              and a["start_clock"] == 0 and a["clocks"] == 300))
PY
    ); rc=$?
    echo "$sync: $out"
    check "$sync: resumed summary: bytes per clock within 2 % of the uninterrupted run's, clocks of this run" "[ $rc = 0 ]"
    # one epoch everywhere: 1-based, ceil(clocks done / 125): clock 300/300
    # is epoch 3 on the progress line and in the final eval event
    pe=$(sed -n 's/^\(\[0\] \)\{0,1\}epoch \([0-9]*\) clock 300\/300 .*/\2/p' "$tmp/$sync.ref.log" | tail -n 1)
    ee=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l][-1]["epoch"])' "$tmp/$sync.ref.0")
    check "$sync: final epoch: progress line ${pe:-none}, eval event ${ee:-none}, both 3" "[ '$pe' = 3 ] && [ '$ee' = 3 ]"
    # data counts: both engines count their data messages; over the run what
    # the transport sent minus the data messages is control frames only
    # (heartbeats: a 64-byte header each; a BYE to each peer: the header and
    # its 8-byte last clock). FMS sends pushes every clock,
    # so every one of its clock lines counts some; SFB may bundle a clock's
    # frames into the next clock's message, so only its total must be > 0.
    out=$(python3 - $sync "$tmp/$sync.ref.0" "$tmp/$sync.b.1" <<'PY'
import json, sys
bad = 0
every_clock = sys.argv[1] == "fms"
for p in sys.argv[2:]:
    lines = [json.loads(l) for l in open(p)]
    clocks = [x for x in lines if "event" not in x]
    s = [x for x in lines if x.get("event") == "summary"][0]
    zero = sum(1 for x in clocks if x["data_msgs"] == 0 or x["data_bytes"] == 0)
    total = sum(x["data_msgs"] for x in clocks)
    ctl_msgs = s["msgs_sent"] - s["data_msgs"]
    ctl_bytes = s["bytes_sent"] - s["data_bytes"]
    print(f"{p.rsplit('/', 1)[1]}: {s['data_msgs']} data msgs {s['data_bytes']} B of "
          f"{s['msgs_sent']} msgs {s['bytes_sent']} B; clock lines without data: {zero}")
    if (every_clock and zero) or total == 0 or s["data_msgs"] < total or ctl_msgs < 0 \
            or ctl_bytes != 64 * ctl_msgs + 8 * (s["world"] - 1):
        bad += 1
sys.exit(bad)
PY
    ); rc=$?
    echo "$out"
    check "$sync: data_msgs/data_bytes counted, transport total = data + control headers" "[ $rc = 0 ]"
  done
  # a run shorter than an epoch ends in epoch 1 (not 0)
  timeout 60 "$SFB" run -n 1 --data synth:k=4,d=20,n=4000,seed=1 --clocks 10 --eval-every 0 \
    --metrics-out "$tmp/short.%r" >"$tmp/short.log" 2>&1
  ee=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l][-1]["epoch"])' "$tmp/short.0")
  check "short run: final eval event in epoch 1 (got ${ee:-none})" "[ '$ee' = 1 ]"
  ;;
full)
  # Output written to a full disk is an error naming the file (exit 1),
  # never exit 0 with an empty file and a final line naming it.
  job=(run -n 1 --data synth:k=4,d=20,n=4000,seed=1 --clocks 20 --eval-every 0 -q)
  timeout 60 "$SFB" "${job[@]}" --out-dir "$tmp/o" --metrics-out /dev/full >"$tmp/devfull.log" 2>&1
  rc=$?
  check "metrics to /dev/full: exit 1 (rc=$rc)" "[ $rc = 1 ]"
  check "metrics to /dev/full: the error names the file and the cause" \
    "grep -q '/dev/full: cannot write the metrics: No space left on device' '$tmp/devfull.log'"
  check "metrics to /dev/full: no final line naming it" "! grep -q '^\(\[0\] \)\{0,1\}metrics:' '$tmp/devfull.log'"
  # results on stdout are output too (sfb worker: its own stdout)
  w=("${job[@]}"); w[0]=worker; unset 'w[1]' 'w[2]'
  timeout 60 "$SFB" "${w[@]}" --out-dir "$tmp/o" >/dev/full 2>"$tmp/stdout.log"
  rc=$?
  check "final line to a full stdout: exit 1 naming it (rc=$rc)" \
    "[ $rc = 1 ] && grep -q 'cannot write the standard output: No space left on device' '$tmp/stdout.log'"
  # a 1 MiB tmpfs in a private mount namespace (nothing outside this test
  # sees it; it goes away with the namespace), filled up: the model file,
  # the checkpoints and the metrics each fail naming their file
  if ! unshare -m true 2>/dev/null; then
    echo "SKIP: no mount namespace (needs root) for the tmpfs part"
  else
    cat >"$tmp/full.sh" <<'SH'
set -u
SFB=$1; tmp=$2; shift 2
mkdir -p "$tmp/disk" && mount -t tmpfs -o size=1m tmpfs "$tmp/disk" || exit 99
dd if=/dev/zero of="$tmp/disk/filler" bs=4k 2>/dev/null
rc=0
timeout 60 "$SFB" "$@" --out-dir "$tmp/o" --model-out "$tmp/disk/model.sfb" >"$tmp/model.log" 2>&1; echo "model $?"
timeout 60 "$SFB" "$@" --out-dir "$tmp/o" --checkpoint-every 10 --checkpoint-dir "$tmp/disk/ck" >"$tmp/ckpt.log" 2>&1; echo "ckpt $?"
timeout 60 "$SFB" "$@" --out-dir "$tmp/o" --metrics-out "$tmp/disk/m.%r.jsonl" >"$tmp/metrics.log" 2>&1; echo "metrics $?"
ls -la "$tmp/disk" >"$tmp/disk.ls"
umount "$tmp/disk"
SH
    timeout 200 unshare -m bash "$tmp/full.sh" "$SFB" "$tmp" "${job[@]}" >"$tmp/full.rc" 2>&1
    cat "$tmp/full.rc"
    for what in model ckpt metrics; do
      rc=$(sed -n "s/^$what //p" "$tmp/full.rc")
      check "$what on a full disk: exit 1 (rc=${rc:-none})" "[ '$rc' = 1 ]"
      grep -h "error" "$tmp/$what.log" | head -n 2
    done
    check "model on a full disk: the error names the file" "grep -q 'error: .*$tmp/disk/model.sfb: write failed: No space left on device' '$tmp/model.log'"
    check "checkpoint on a full disk: the error names the file" \
      "grep -q 'error: .*$tmp/disk/ck/rank-0.clock-000000000010.ckpt: write failed: No space left on device' '$tmp/ckpt.log'"
    check "metrics on a full disk: the error names the file" \
      "grep -q 'error: .*$tmp/disk/m.0.jsonl: cannot write the metrics: No space left on device' '$tmp/metrics.log'"
    check "metrics on a full disk: no final line naming it" "! grep -q '^\(\[0\] \)\{0,1\}metrics:' '$tmp/metrics.log'"
  fi
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
echo "$passes passed, $fails failed"
[ $fails = 0 ]
