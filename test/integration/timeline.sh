#!/usr/bin/env bash
# The training timeline (SFB_TIMELINE / --timeline, `sfb timeline`):
#  - `sfb run -n 3 --clocks 30 --timeline tl.%r.json`: one file per rank,
#    each valid Chrome trace JSON holding 30 waits, 30 publishes, applies
#    and frames received from and sent to both peers; `sfb timeline -o merged.json`
#    prints 29 steps per rank whose parts add up to the step (to 0.3 ms of
#    rounding) and a mean line per rank; the merged file holds every event;
#  - SFB_TIMELINE without %r: FILE.<rank>;
#  - the same merge with --output after a file, and with -oFILE;
#  - bad use: no file (exit 2), -o without a value (exit 2, named), a file
#    that is not a timeline (exit 1, file:line named);
#  - sfb.torch (init(timeline=...)): forward and backward per layer, the
#    backward pass, reduce and step on the user track beside the job's (on
#    an ASan libsfb too: run.sh preloads the runtime into python).
# Usage: timeline.sh SFB RUN_PY LIBSFB PYTHON_DIR
set -uo pipefail
SFB=$1; PY=$2; LIB=$3; PYDIR=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
"$PY" --check || { echo "skipped: no python3 with numpy"; exit 77; }

timeout 120 "$SFB" run -n 3 --clocks 30 --out-dir o -q --timeline "$tmp/tl.%r.json" >run.out 2>&1
rc=$?
check "run: exit 0 ($rc), three files" "[ $rc = 0 ] && [ -f tl.0.json ] && [ -f tl.1.json ] && [ -f tl.2.json ]"
counts=$("$PY" - tl.0.json tl.1.json tl.2.json <<'PYEOF'
import collections, json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    c = collections.Counter(e["name"] for e in d["traceEvents"] if e["ph"] == "X")
    peers = sorted({e["args"]["peer"] for e in d["traceEvents"] if e["name"] == "recv"})
    to = sorted({e["args"]["peer"] for e in d["traceEvents"] if e["name"] == "send"})
    print(c["wait"], c["publish"], c["apply"] >= 29, peers, to == peers, d["otherData"]["rank"])
PYEOF
)
echo "$counts"
check "each file: 30 waits, 30 publishes, applies, frames from and to both peers, its rank" \
  "[ \"\$(sed -n 1p <<<'$counts')\" = '30 30 True [1, 2] True 0' ] && [ \"\$(sed -n 2p <<<'$counts')\" = '30 30 True [0, 2] True 1' ] && [ \"\$(sed -n 3p <<<'$counts')\" = '30 30 True [0, 1] True 2' ]"
"$SFB" timeline -o merged.json tl.0.json tl.1.json tl.2.json >acct.txt 2>&1; rc=$?
tail -n 3 acct.txt
check "timeline: exit 0 ($rc), 29 steps and a mean per rank" \
  "[ $rc = 0 ] && for r in 0 1 2; do [ \$(grep -c \"^rank \$r step \" acct.txt) = 29 ] && grep -q \"^rank \$r mean of 29 steps: \" acct.txt || exit 1; done"
check "timeline: each step's parts add up to it" \
  "awk '/ step /{t=\$5; s=\$9+\$12+\$15+\$18; d=t-s; if (d > 0.3 || d < -0.3) bad=1} END{exit bad}' acct.txt"
merged=$("$PY" -c 'import json,sys; print(sum(1 for e in json.load(open("merged.json"))["traceEvents"]))')
single=$(cat tl.*.json | grep -c '^{"name"')
check "merged: valid JSON, every event ($merged of $single)" "[ '$merged' = '$single' ]"

"$SFB" timeline tl.0.json --output merged2.json tl.1.json tl.2.json >acct2.txt 2>&1; rc=$?
check "timeline: --output after a file, the same trace and accounts ($rc)" \
  "[ $rc = 0 ] && cmp -s merged.json merged2.json && cmp -s acct.txt acct2.txt"
"$SFB" timeline -omerged3.json tl.0.json tl.1.json tl.2.json >/dev/null 2>&1; rc=$?
check "timeline: -oFILE ($rc)" "[ $rc = 0 ] && cmp -s merged.json merged3.json"

SFB_TIMELINE="$tmp/plain" timeout 60 "$SFB" run -n 2 --clocks 5 --out-dir o2 -q >/dev/null 2>&1
check "SFB_TIMELINE without %r: FILE.<rank>" "[ -f plain.0 ] && [ -f plain.1 ]"

"$SFB" timeline >none.txt 2>&1; rc=$?
check "timeline without files: exit 2 ($rc)" "[ $rc = 2 ] && grep -q 'no file' none.txt"
"$SFB" timeline tl.0.json -o >noval.txt 2>&1; rc=$?
check "timeline -o without a value: exit 2 ($rc), named" \
  "[ $rc = 2 ] && grep -q -- '-o needs a value' noval.txt"
printf '{"traceEvents":[\n{"name":"x","ph":"X","pid":0}\n' >bad.json
"$SFB" timeline bad.json >bad.txt 2>&1; rc=$?
check "timeline of a foreign file: exit 1 naming bad.json:2 ($rc)" "[ $rc = 1 ] && grep -q 'bad.json:2: not an event' bad.txt"
: >empty.json; printf 'hello\n{"a":1}\n' >other.json
for f in empty other; do
  "$SFB" timeline tl.0.json $f.json >$f.txt 2>&1; rc=$?
  check "timeline of a file with no events ($f.json): exit 1 naming it ($rc)" \
    "[ $rc = 1 ] && grep -q '$f.json: no trace events' $f.txt"
done
# one rank's file twice; a file cut short (its closing line missing)
"$SFB" timeline tl.0.json tl.1.json tl.0.json >twice.txt 2>&1; rc=$?
check "timeline of rank 0's file twice: exit 1 naming both ($rc)" \
  "[ $rc = 1 ] && grep -q \"tl.0.json and tl.0.json both hold rank 0's timeline\" twice.txt"
head -n $(( $(wc -l <tl.1.json) / 2 )) tl.1.json >half.json
"$SFB" timeline tl.0.json half.json >half.txt 2>&1; rc=$?
check "timeline of a truncated file: exit 1 naming it ($rc)" \
  "[ $rc = 1 ] && grep -q 'half.json: truncated after line' half.txt"
# a timeline that cannot be written is said at the start, not after the run
SFB_TIMELINE=$PWD/nodir/tl.%r.json timeout 60 "$SFB" run -n 2 --clocks 3 \
  --out-dir nodir-out >nodir.txt 2>&1; rc=$?
# (either rank's error: the first to fail ends the job, perhaps before the other says its own)
check "SFB_TIMELINE in a missing directory: exit 1 at the start, naming it ($rc)" \
  "[ $rc = 1 ] && grep -q 'cannot create $PWD/nodir/tl\.[01]\.json' nodir.txt && ! grep -q 'test accuracy' nodir.txt"
# ... and given as --timeline, a bad command line (exit 2, nothing run)
timeout 60 "$SFB" run -n 2 --clocks 3 --timeline nodir/tl.json --out-dir nodir-out2 \
  >nodir2.txt 2>&1; rc=$?
check "--timeline in a missing directory: exit 2, naming it ($rc)" \
  "[ $rc = 2 ] && grep -q -- '--timeline: the directory nodir does not exist' nodir2.txt && [ ! -e nodir-out2 ]"

if SFB_LIB=$LIB "$PY" --check torch 2>/dev/null; then
  cat >tl_torch.py <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[2])
import torch, torch.nn as nn
import sfb.torch as sft
sft.init(timeline=sys.argv[1])
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 5))
sft.broadcast_parameters(m.state_dict())
opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
for t in range(10):
    opt.zero_grad()
    nn.functional.cross_entropy(m(torch.randn(8, 20)), torch.randint(0, 5, (8,))).backward()
    opt.step()
sft.shutdown()
PYEOF
  SFB_LIB=$LIB timeout 120 "$SFB" launch -n 2 -- "$PY" tl_torch.py "$tmp/tt.%r.json" "$PYDIR" \
    >torch.out 2>&1; rc=$?
  names=$("$PY" -c '
import collections, json
d = json.load(open("tt.1.json"))
c = collections.Counter(e["name"] for e in d["traceEvents"] if e["ph"] == "X" and e["tid"] == 2)
print(" ".join("%s=%d" % kv for kv in sorted(c.items())))')
  echo "torch user track: $names"
  check "sfb.torch: forward and backward per layer, backward, reduce, step on the user track ($rc)" \
    "[ $rc = 0 ] && [ '$names' = 'backward=10 backward 0=10 backward 2=10 forward 0=10 forward 1=10 forward 2=10 forward model=10 reduce=11 step=10' ]"
  "$SFB" timeline tt.0.json tt.1.json >tacct.txt 2>&1
  check "sfb.torch: accounted per step" "grep -q '^rank 1 mean of 1[01] steps: ' tacct.txt"
else
  echo "sfb.torch part skipped: no torch for $PY"
fi

echo "$passes passed, $fails failed"
[ $fails = 0 ]
