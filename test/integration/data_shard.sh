#!/usr/bin/env bash
# Data sharding end to end (docs/design.md, "Data"):
#  * with -n 4 every rank holds only its shard of the training rows: the
#    summaries' train_rows are ⌊N/4⌋ or one more and add up to N (libsvm
#    and synth), every summary has a peak_rss_bytes > 0, and only rank 0
#    (which alone loads the test set) reports a test accuracy;
#  * a malformed line is reported with its file:line whichever rank owns
#    it: each of 3 bad files, with the bad line in another rank's shard,
#    fails with exit 1 naming the line;
#  * DML pair files (whole-set row numbers) keep the whole set on each rank.
# Usage: data_shard.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1 ($2)"; fails=$((fails+1)); fi; }

# summary field $2 of every rank's metrics in $1, one per line, rank order
field() { for f in "$1"/metrics.*.jsonl; do
  grep '"event":"summary"' "$f" | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p"; done; }

# a 1003-row libsvm file: labels 0..2, 1-based indices up to 7
awk 'BEGIN { for (i = 0; i < 1003; i++) printf "%d %d:%d.5 7:1\n", i % 3, 1 + i % 5, i }' \
  > "$tmp/train.svm"
for data in "$tmp/train.svm" "synth:k=3,d=7,n=1003,seed=2"; do
  o="$tmp/o$((passes + fails))"
  timeout 120 "$SFB" run -n 4 --data "$data" --clocks 5 --batch 4 --eval-every 0 -q \
    --out-dir "$o" >"$tmp/out" 2>&1
  rc=$?
  check "run $data" "[ $rc = 0 ]"
  [ $rc = 0 ] || cat "$tmp/out"
  rows=$(field "$o" train_rows | tr '\n' ' ')
  check "rows $data: $rows" "[ \$(wc -w <<<'$rows') = 4 ] && \
    awk '{s=0; for (i=1;i<=NF;i++) { if (\$i!=250 && \$i!=251) exit 1; s+=\$i } exit s!=1003}' <<<'$rows'"
  rss=$(field "$o" peak_rss_bytes | tr '\n' ' ')
  check "rss $data: $rss" "awk '{ if (NF!=4) exit 1; for (i=1;i<=NF;i++) if (\$i<=0) exit 1 }' <<<'$rss'"
  acc=$(field "$o" test_accuracy | tr '\n' ' ')
  if [ "$data" = "$tmp/train.svm" ]; then  # no test set at all
    check "acc $data: $acc" "[ '$acc' = 'null null null null ' ]"
  else
    check "acc $data: $acc" "[[ '$acc' =~ ^0\.[0-9]+\ null\ null\ null\ \$ ]]"
  fi
done

# DML pair files name rows of the whole set: such a run keeps the whole set
# on every rank (row 1002 is beyond any shard of 2 workers)
printf '0 1002\n5 1001\n' > "$tmp/sim.pairs"
timeout 120 "$SFB" run -n 2 --model dml --proj-dim 3 --data "$tmp/train.svm" --simi-pairs "$tmp/sim.pairs" \
  --clocks 5 --batch 2 --eval-every 0 -q --out-dir "$tmp/dml" >"$tmp/out" 2>&1
rc=$?
check "dml pair files: rc $rc" "[ $rc = 0 ] && [ \"\$(field '$tmp/dml' train_rows | tr '\n' ' ')\" = '1003 1003 ' ]"
[ $rc = 0 ] || cat "$tmp/out"

# bad lines 2, 500 and 1003: with -n 3 each is in one rank's shard only
for bad in 2 500 1003; do
  awk -v b=$bad 'BEGIN { for (i = 1; i <= 1003; i++) printf (i == b ? "%d 1:zz\n" : "%d 1:1\n"), i % 2 }' \
    > "$tmp/bad$bad.svm"
  timeout 60 "$SFB" run -n 3 --data "$tmp/bad$bad.svm" --clocks 5 -q --out-dir "$tmp/b$bad" \
    >"$tmp/out" 2>&1
  rc=$?
  check "bad line $bad: rc $rc" "[ $rc = 1 ] && grep -q 'bad$bad.svm:$bad:[0-9]*: bad value' '$tmp/out'"
  [ $rc = 1 ] || cat "$tmp/out"
done
echo "$passes passed, $fails failed"
[ $fails = 0 ]
