#!/usr/bin/env bash
# --factor-dtype bf16 (factors on the wire in bfloat16) against f32 with the
# same seed, 4 workers, one epoch of Fashion-MNIST, --ordered:
#  - mlr, and an mlp by factors (--sync sfb, 32 hidden units, --batch 16,
#    --lr 0.1: the default first-epoch step of 0.3 leaves a one-epoch
#    accuracy that moves by a point or more with any perturbation, a seed's
#    or a rounding's), reach a test accuracy within 0.5 points of f32's;
#  - the replicas stay bit-identical (rank 0: "replicas: identical");
#  - every rank's SF bytes per clock (the summary's data_bytes) are half of
#    f32's, within 2 % (c goes CSR at other densities in the two), and the
#    summary's formula_bytes_per_clock is half;
#  - one worker rounds too: its model differs from f32's (-n 1 and -n 4 mean
#    the same by bf16);
#  - --sync auto's cost model charges bf16 factors their bytes: at a slow
#    link the plan's sfb prediction about halves;
#  - --sync fms --dense-dtype bf16 (the pushes and sums in bfloat16): replicas
#    identical, accuracy within 0.5 points of f32's, half the bytes;
#  - --factor-dtype f16 and --dense-dtype f16 are refused (exit 2).
# Usage: factor_dtype.sh SFB [long]   (long: the mlp pair too)
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
run() { # NAME ARGS...: sfb run into $tmp/NAME (output NAME.out)
  local name=$1; shift
  timeout 120 "$SFB" run --out-dir "$name" --seed 3 -q "$@" >"$name.out" 2>&1
}
acc() { sed -n 's/^\[0\] test accuracy \([0-9.]*\)%.*/\1/p' "$1.out" | tail -n 1; }

models=(mlr); [ "${2:-}" = long ] && models+=(mlp)
for model in "${models[@]}"; do
  args=(-n 4 --model "$model" --epochs 1 --ordered)
  [ $model = mlp ] && args+=(--sync sfb --hidden 32 --batch 16 --lr 0.1)
  for dt in f32 bf16; do
    run "$model-$dt" "${args[@]}" --factor-dtype $dt; rc=$?
    check "$model $dt: exit 0 ($rc)" "[ $rc = 0 ]"
    check "$model $dt: rank 0 says replicas: identical" \
      "grep -q '^\[0\] .*replicas: identical' $model-$dt.out"
  done
  a=$(acc "$model-f32"); b=$(acc "$model-bf16")
  echo "$model: test accuracy f32 $a%, bf16 $b%"
  check "$model: bf16's accuracy ($b%) within 0.5 points of f32's ($a%)" \
    "[ -n '$a' ] && [ -n '$b' ] && awk 'BEGIN{d = $b - $a; exit !(d <= 0.5 && d >= -0.5)}'"
  if python3 - "$model" <<'PY'
import json, sys
m = sys.argv[1]
def summary(dt, r):
    return [json.loads(l) for l in open(f"{m}-{dt}/metrics.{r}.jsonl")
            if '"event":"summary"' in l][0]
bad = 0
for r in range(4):
    f, b = summary("f32", r), summary("bf16", r)
    ratio = (b["data_bytes"] / b["clocks"]) / (f["data_bytes"] / f["clocks"])
    form = b["formula_bytes_per_clock"] / f["formula_bytes_per_clock"]
    if r == 0:
        print(f"{m}: SF bytes per clock f32 {f['data_bytes'] / f['clocks']:.0f}, "
              f"bf16 {b['data_bytes'] / b['clocks']:.0f} (x{ratio:.4f}); formula x{form:.4f}")
    if not 0.49 <= ratio <= 0.51 or abs(form - 0.5) > 1e-9:
        print(f"rank {r}: bf16 bytes x{ratio:.4f} of f32's, formula x{form:.4f}"); bad += 1
sys.exit(1 if bad else 0)
PY
  then passes=$((passes+1)); else echo "FAIL: $model: bf16's bytes per clock not half of f32's"; fails=$((fails+1)); fi
done

# --dense-dtype: FMS's rows (pushes and sums) in bfloat16
for dt in f32 bf16; do
  run "fms-$dt" -n 4 --model mlr --sync fms --clocks 300 --ordered --dense-dtype $dt; rc=$?
  check "fms $dt: exit 0 ($rc)" "[ $rc = 0 ]"
  check "fms $dt: rank 0 says replicas: identical" "grep -q '^\[0\] .*replicas: identical' fms-$dt.out"
done
a=$(acc fms-f32); b=$(acc fms-bf16)
echo "fms: test accuracy f32 $a%, bf16 rows $b%"
check "fms: bf16 rows' accuracy ($b%) within 0.5 points of f32's ($a%)" \
  "[ -n '$a' ] && [ -n '$b' ] && awk 'BEGIN{d = $b - $a; exit !(d <= 0.5 && d >= -0.5)}'"
if python3 - <<'PY'
import json
def summary(dt, r):
    return [json.loads(l) for l in open(f"fms-{dt}/metrics.{r}.jsonl")
            if '"event":"summary"' in l][0]
bad = 0
for r in range(4):
    f, b = summary("f32", r), summary("bf16", r)
    ratio = b["data_bytes"] / f["data_bytes"]  # (the same clocks; headers stay whole)
    form = b["formula_bytes_per_clock"] / f["formula_bytes_per_clock"]
    if r == 0:
        print(f"fms: bytes bf16 rows x{ratio:.4f} of f32's; formula x{form:.4f}")
    if not 0.49 <= ratio <= 0.52 or abs(form - 0.5) > 1e-9:
        print(f"rank {r}: bf16 rows' bytes x{ratio:.4f} of f32's, formula x{form:.4f}"); bad += 1
raise SystemExit(1 if bad else 0)
PY
then passes=$((passes+1)); else echo "FAIL: fms: bf16 rows' bytes not half of f32's"; fails=$((fails+1)); fi

for dt in f32 bf16; do
  run "one-$dt" -n 1 --clocks 200 --model-out "one-$dt.sfb" --factor-dtype $dt; rc=$?
  check "-n 1 $dt: exit 0 ($rc)" "[ $rc = 0 ]"
done
check "-n 1: bf16 rounds the factors too (its model differs from f32's)" \
  "[ -s one-f32.sfb ] && [ -s one-bf16.sfb ] && ! cmp -s one-f32.sfb one-bf16.sfb"

for dt in f32 bf16; do
  run "auto-$dt" -n 2 --sync auto --link-gbps 0.01 --latency-us 10 --clocks 2 --factor-dtype $dt
  rc=$?
  check "--sync auto $dt: exit 0 ($rc)" "[ $rc = 0 ]"
done
sfb_ms() { sed -n 's/.*matrix 0 10x785: sfb \([0-9.e+-]*\) ms.*/\1/p' "$1.out" | head -n 1; }
a=$(sfb_ms auto-f32); b=$(sfb_ms auto-bf16)
echo "--sync auto at 10 Mbit/s: sfb predicted $a ms per clock with f32 factors, $b ms with bf16"
check "--sync auto: the plan charges bf16 factors about half ($b ms vs $a ms)" \
  "[ -n '$a' ] && [ -n '$b' ] && awk 'BEGIN{r = $b / $a; exit !(r > 0.45 && r < 0.6)}'"

out=$(timeout 30 "$SFB" run -n 1 --clocks 1 --factor-dtype f16 --out-dir bad 2>&1); rc=$?
check "--factor-dtype f16: refused, exit 2 ($rc)" \
  "[ $rc = 2 ] && printf '%s' \"\$out\" | grep -q 'is not f32 or bf16'"
out=$(timeout 30 "$SFB" run -n 1 --clocks 1 --dense-dtype f16 --out-dir bad 2>&1); rc=$?
check "--dense-dtype f16: refused, exit 2 ($rc)" \
  "[ $rc = 2 ] && printf '%s' \"\$out\" | grep -q 'is not f32 or bf16'"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
