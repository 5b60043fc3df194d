#!/usr/bin/env bash
# sfb.torch across ranks (test/python/torch_job.py under `sfb launch`):
# exact against one process (SGD, momentum SGD with weight decay, Adam,
# gradient accumulation, every layer kind, overlap off), 256 parameter
# tensors, a 12-layer MLP under sync auto with its plan, staleness with plain
# SGD, checkpoint and resume against an uninterrupted run, and bad use:
# shapes that differ, ranks that start apart, a rank that dies mid-step.
# Usage: torch.sh SFB RUN_PY TORCH_JOB_PY
set -uo pipefail
SFB=$1; PY=$2; JOB=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
"$PY" --check || exit 77
"$PY" -c 'import torch' 2>/dev/null || { echo "skipped: no torch (install python3-torch)"; exit 77; }

# run NAME N OKS ARGS...: `sfb launch -n N` of torch_job.py must exit 0 with
# OKS ranks printing "ok" (N, or N - 1 when a rank leaves on purpose)
run() {
  local name=$1 n=$2 need=$3; shift 3
  timeout 120 "$SFB" launch -n "$n" -- "$PY" "$JOB" "$@" >"$tmp/$name.out" 2>&1; local rc=$?
  local oks; oks=$(grep -c '^\[[0-9]*\] ok ' "$tmp/$name.out")
  check "$name: exit 0 (rc=$rc), $need ranks say ok ($oks)" "[ $rc = 0 ] && [ $oks = $need ]"
  if [ "$oks" != "$need" ] || [ $rc != 0 ]; then tail -n 15 "$tmp/$name.out"; fi
}

run exact_sgd 4 4 exact --opt sgd
run exact_momentum 4 4 exact --opt momentum
run exact_adam 4 4 exact --opt adam
run exact_accumulate 4 4 exact --opt adam --passes 2 --global-batch 32 --steps 20
run exact_no_overlap 3 3 exact --opt momentum --overlap 0 --global-batch 12 --steps 20
run exact_fms 3 3 exact --opt sgd --sync fms --global-batch 12 --steps 20
run deep_256_tensors 3 3 exact --model deep --opt sgd --global-batch 12 --steps 10
run mlp12_auto 4 4 exact --model mlp12 --opt momentum --steps 20
grep -A12 '^\[0\] plan:' "$tmp/mlp12_auto.out" | head -n 13
check "mlp12: a plan line per Linear, each naming its engine" \
  "[ \$(grep -cE '^\[0\] [0-9]+ \(48x(20|48)\+bias\): (sfb|fms) \(auto: ' '$tmp/mlp12_auto.out') = 11 ]"
run ssp 4 4 ssp --model mlp --opt sgd --staleness 2 --steps 40 --tol 1e-4
run shapes 3 3 shapes
run init 3 3 init
run kill 4 3 kill --victim 2

# resume: 8 steps, a checkpoint, 8 more in a new job == 16 in one job
run ckpt_straight 4 4 ckpt --opt momentum --steps 16 --out "$tmp/straight.pt"
run ckpt_first 4 4 ckpt --opt momentum --steps 8 --save "$tmp/ck.pt"
run ckpt_resumed 4 4 ckpt --opt momentum --steps 16 --resume "$tmp/ck.pt" --out "$tmp/resumed.pt"
d=$("$PY" - "$tmp/straight.pt" "$tmp/resumed.pt" <<'EOF'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
print(max(float((a[k] - b[k]).abs().max() / max(float(a[k].abs().max()), 1e-12)) for k in a))
EOF
)
check "resumed run == uninterrupted run within float32 rounding ($d)" \
  "awk 'BEGIN{exit !(\"$d\" != \"\" && \"$d\" + 0 <= 1e-5)}'"
check "resumed run started at clock 8, ended at 16" "grep -q '^\[0\] ok ckpt: clock 16' '$tmp/ckpt_resumed.out'"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
