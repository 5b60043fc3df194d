#!/usr/bin/env bash
# The PyTorch examples as a user runs them:
#  - examples/torch_mlp.py under `sfb launch -n 4`, 40 steps: its plan, a
#    result line above chance; with `compare` (suite long) one epoch instead
#    (the learning rate decayed to 0) at one global batch: >= 0.84, and under
#    `-n 1` the same test accuracy within 0.5 point (the same samples per
#    step; only float rounding differs; torch.sh checks the parameters
#    exactly on shorter runs);
#  - with compare too: examples/torch_cnn.py under `sfb launch -n 2`, a few
#    steps (scored on 1000 test images: the whole set takes a 2-core machine
#    ~15 s): a plan with the convolutions on the dense engine, a result line;
#    examples/torch_gan.py (a DistributedOptimizer each for the generator
#    and the discriminator) under `-n 2` and `-n 1`, a few steps: the same
#    losses (float rounding apart), the plan naming both models' layers;
#  - torch_mlp.py under mpirun (PMIx) and torchrun (RANK, WORLD_SIZE,
#    MASTER_ADDR, MASTER_PORT): a job of 2, a result line saying so.
# Usage: torch_examples.sh SFB RUN_PY EXAMPLES_DIR [compare]
set -uo pipefail
SFB=$1; PY=$2; EX=$3; compare=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
"$PY" --check || exit 77
"$PY" --check torch || { echo "skipped: no torch (install python3-torch)"; exit 77; }
val() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" "$1" | tail -n 1; }

mlp=(--hidden 128,128 --steps 40 --global-batch 64)
[ "$compare" = compare ] && mlp=(--hidden 128,128 --epochs 1 --global-batch 64)
timeout 300 "$SFB" launch -n 4 -- "$PY" "$EX/torch_mlp.py" "${mlp[@]}" >"$tmp/p4" 2>&1; rc4=$?
tail -n 2 "$tmp/p4"
a4=$(val "$tmp/p4" test_accuracy)
check "mlp: -n 4 exits 0 ($rc4), world 4" "[ $rc4 = 0 ] && [ '$(val "$tmp/p4" world)' = 4 ]"
if [ "$compare" = compare ]; then
  timeout 300 "$SFB" launch -n 1 -- "$PY" "$EX/torch_mlp.py" "${mlp[@]}" >"$tmp/p1" 2>&1; rc1=$?
  tail -n 2 "$tmp/p1"
  a1=$(val "$tmp/p1" test_accuracy)
  check "mlp: -n 1 exits 0 ($rc1), world 1" "[ $rc1 = 0 ] && [ '$(val "$tmp/p1" world)' = 1 ]"
  check "mlp: -n 4 accuracy $a4 within 0.5 point of -n 1's $a1" \
    "awk 'BEGIN{d = $a4 - $a1; exit !(\"$a4\" != \"\" && \"$a1\" != \"\" && d <= 0.005 && d >= -0.005)}'"
  check "mlp: accuracy >= 0.84 after one epoch ($a4)" "awk 'BEGIN{exit !($a4 + 0 >= 0.84)}'"
else  # (10 classes: chance is 0.1; 40 steps reach ~0.6)
  check "mlp: accuracy above chance after 40 steps ($a4)" "awk 'BEGIN{exit !($a4 + 0 >= 0.3)}'"
fi
check "mlp: the plan, a line per Linear" "[ \$(sed '/plan, as measured/q' '$tmp/p4' | grep -cE '^\[0\]   [0-9]+ \([0-9]+x[0-9]+\+bias\): (sfb|fms) ') = 3 ]"

# (the CNN and the GAN: suite long, with compare; CI's time)
if [ "$compare" = compare ]; then
  timeout 300 "$SFB" launch -n 2 -- "$PY" "$EX/torch_cnn.py" --hidden 256 --steps 20 --test-samples 1000 >"$tmp/cnn" 2>&1
  rc=$?
  grep -E '^\[0\] ( |result)' "$tmp/cnn"
  check "cnn: exit 0 and a result line ($rc)" "[ $rc = 0 ] && grep -q '^\[0\] result test_accuracy=' '$tmp/cnn'"
  check "cnn: the convolutions on the dense engine" \
    "grep -qE '^\[0\]   dense \(6 tensors, [0-9]+ values: 0.weight, 0.bias, 3.weight, 3.bias, ...\): fms' '$tmp/cnn'"
  check "cnn: the head's Linear layers by their plan" \
    "[ \$(sed '/plan, as measured/q' '$tmp/cnn' | grep -cE '^\[0\]   [0-9]+ \([0-9]+x[0-9]+\+bias\): (sfb|fms) ') = 2 ]"

  for n in 1 2; do
    timeout 300 "$SFB" launch -n $n -- "$PY" "$EX/torch_gan.py" --steps 20 --hidden 64 \
      --log-every 10 >"$tmp/gan$n" 2>&1
    echo $? >"$tmp/gan$n.rc"
  done
  tail -n 1 "$tmp/gan1" "$tmp/gan2"
  check "gan: -n 1 and -n 2 exit 0, world 2 ($(cat "$tmp/gan1.rc") $(cat "$tmp/gan2.rc"))" \
    "[ \$(cat '$tmp/gan1.rc') = 0 ] && [ \$(cat '$tmp/gan2.rc') = 0 ] && [ '$(val "$tmp/gan2" world)' = 2 ]"
  for k in d_loss g_loss d_real d_fake; do
    check "gan: $k at -n 2 ($(val "$tmp/gan2" $k)) as at -n 1 ($(val "$tmp/gan1" $k)) within 1e-3" \
      "awk 'BEGIN{a = \"$(val "$tmp/gan2" $k)\"; b = \"$(val "$tmp/gan1" $k)\"; d = a - b;
                 exit !(a != \"\" && b != \"\" && d <= 1e-3 && d >= -1e-3)}'"
  done
  check "gan: the plan, a line per Linear of each model" \
    "[ \$(grep -cE '^\[0\]   (Generator|Discriminator)\.main\.[024] \([0-9]+x[0-9]+\+bias\): (sfb|fms) ' '$tmp/gan2') = 6 ]"
fi

if command -v mpirun >/dev/null; then
  extra=(--oversubscribe); [ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
  ( unset SFB_RANK SFB_WORLD_SIZE SFB_RENDEZVOUS SFB_JOB_KEY
    timeout 120 mpirun "${extra[@]}" -n 2 -x SFB_LIB -x PATH "$PY" "$EX/torch_mlp.py" \
      --hidden 64 --steps 30 ) >"$tmp/mpi" 2>&1; rc=$?
  tail -n 1 "$tmp/mpi"
  check "mpirun -n 2: exit 0, world 2 ($rc)" "[ $rc = 0 ] && grep -q '^result .* world=2 ' '$tmp/mpi'"
fi
# torchrun's store takes MASTER_PORT, sfb's rendezvous MASTER_PORT + 1: a pair
# both free now, below the kernel's ephemeral ports (ip_local_port_range
# starts at 32768), where the ports other tests bind to 0 come from (one
# such test took the port after a bind-to-0 pick: seen once in CI)
port=$("$PY" -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32000)
    s = [socket.socket(), socket.socket()]
    try:
        s[0].bind(("127.0.0.1", p)); s[1].bind(("127.0.0.1", p + 1))
    except OSError:
        continue
    finally:
        [x.close() for x in s]
    print(p); break')
( unset SFB_RANK SFB_WORLD_SIZE SFB_RENDEZVOUS SFB_JOB_KEY
  # --redirects/--tee: Debian's torchrun 1.13 fails without them on Python 3.11
  timeout 120 "$PY" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" \
    --redirects 1 --tee 1 "$EX/torch_mlp.py" --hidden 64 --steps 30 ) >"$tmp/trun" 2>&1; rc=$?
tail -n 1 "$tmp/trun"
check "torchrun --nproc_per_node 2: exit 0, world 2 ($rc)" \
  "[ $rc = 0 ] && grep -q 'result .* world=2 ' '$tmp/trun'"
[ $rc = 0 ] || { echo "--- torchrun's output:"; tail -n 40 "$tmp/trun"; }

echo "$passes passed, $fails failed"
[ $fails = 0 ]
