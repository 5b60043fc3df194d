#!/usr/bin/env bash
# examples/torch_word_lm.py, LSTM (tied) and Transformer, on three files of
# Debian's fortunes, under `sfb launch -n 4` and `-n 1`: the same held-out
# loss within 2 % after the same words (dropout off: the draws are each
# rank's own), the embedding as sparse rows, the LSTM's four matrices each in
# the plan. Skipped without the fortunes (apt-get install fortunes).
# Usage: torch_word_lm.sh SFB RUN_PY EXAMPLES_DIR
set -uo pipefail
SFB=$1; PY=$2; EX=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
"$PY" --check || exit 77
"$PY" --check torch || { echo "skipped: no torch (install python3-torch)"; exit 77; }
val() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" "$1" | tail -n 1; }

# the word language models on Debian's fortunes (skipped without them): at
# -n 4 and -n 1 the same held-out loss within 2 % after the same words
# (dropout off: the draws are each rank's own), the table as sparse rows
if [ -d /usr/share/games/fortunes ]; then
  # three of its files (420 KB): reading the whole corpus costs each run seconds
  mkdir -p "$tmp/corpus"
  cp /usr/share/games/fortunes/{computers,science,work} "$tmp/corpus/" 2>/dev/null
  lm=(--steps 30 --dim 32 --vocab 2000 --dropout 0 --global-batch 8 --bptt 20 --log-every 30
      --corpus "$tmp/corpus")
  for m in lstm transformer; do
    timeout 300 "$SFB" launch -n 4 -- "$PY" "$EX/torch_word_lm.py" --model $m "${lm[@]}" \
      >"$tmp/$m.4" 2>&1; rc4=$?
    timeout 300 "$SFB" launch -n 1 -- "$PY" "$EX/torch_word_lm.py" --model $m "${lm[@]}" \
      >"$tmp/$m.1" 2>&1; rc1=$?
    tail -n 1 "$tmp/$m.4" "$tmp/$m.1"
    v4=$(val "$tmp/$m.4" valid_loss); v1=$(val "$tmp/$m.1" valid_loss)
    check "word_lm $m: -n 4 and -n 1 exit 0 ($rc4, $rc1), world 4" \
      "[ $rc4 = 0 ] && [ $rc1 = 0 ] && [ '$(val "$tmp/$m.4" world)' = 4 ]"
    check "word_lm $m: -n 4's held-out loss $v4 within 2 % of -n 1's $v1, below ln(2000) = 7.6" \
      "awk 'BEGIN{d = ($v4 - $v1) / $v1; exit !(\"$v4\" != \"\" && \"$v1\" != \"\" && d <= 0.02 && d >= -0.02 && $v4 < 7.6)}'"
    check "word_lm $m: the embedding as sparse rows in the plan" \
      "grep -qE '^\[0\]   emb.weight \([0-9]+x32, sparse rows\): sfb' '$tmp/$m.4'"
  done
  # (in the first plan, and in the measured one when it differs)
  check "word_lm lstm: the LSTM's four matrices each in the plan" \
    "[ \$(grep -oE '^\[0\]   rnn.weight_(ih|hh)_l[01] \(128x32\+bias\): (sfb|fms) ' '$tmp/lstm.4' | awk '{print \$2}' | sort -u | wc -l) = 4 ]"
else
  echo "word_lm: skipped (no /usr/share/games/fortunes: apt-get install fortunes)"
fi

echo "$passes passed, $fails failed"
[ $fails = 0 ]
