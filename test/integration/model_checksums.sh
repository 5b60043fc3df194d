#!/usr/bin/env bash
# Bit-identity of trained models (issue 15): for a fixed seed the model file
# of every model (mlr, dml, sc) under every engine (sfb, fms) must stay
# byte-for-byte what the recorded checksums say, so a refactoring that
# changes one bit of the numbers fails here. Each case of model_checksums.txt
# is "NAME SHA256 SFB-ARGUMENTS..." (arguments after `sfb`; @LIBSVM@ stands
# for a libsvm file this script writes). The configurations are the
# deterministic ones: one worker, or two workers under BSP (--staleness 0),
# where each worker sums its own and its one peer's update in a fixed order
# (with three sfb workers, the order two peers' updates arrive in changes the
# float sums; checked: the same file in 5 of 5 repeated runs for every case
# here). About 6 s on the 2-core VM.
# Usage: model_checksums.sh SFB CHECKSUMS [--update]
#   --update rewrites CHECKSUMS with the checksums of this build (for a
#   change that alters numbers on purpose; its commit must say so).
set -uo pipefail
SFB=$1; SUMS=$2; UPDATE=${3:-}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0

# A small libsvm file (3 classes, 12 features, 1-based, some rows sparse),
# the same bytes on every run.
awk 'BEGIN { s = 12345;
  for (i = 0; i < 300; i++) {
    line = (i % 3) "";
    for (j = 1; j <= 12; j++) {
      s = (s * 1103515245 + 12345) % 2147483648;
      if (s % 4 == 0) continue;
      v = (s % 2000) / 1000.0 - 1.0 + (j % 3 == i % 3 ? 0.8 : 0);
      line = line sprintf(" %d:%.3f", j, v);
    }
    print line;
  } }' >"$tmp/data.libsvm"

out=$tmp/new.txt
grep '^#' "$SUMS" >"$out"
while read -r name sum args; do
  case $name in ''|'#'*) continue ;; esac
  run=${args//@LIBSVM@/$tmp/data.libsvm}
  # shellcheck disable=SC2086
  if ! timeout 60 "$SFB" $run --out-dir "$tmp/$name" >"$tmp/$name.log" 2>&1; then
    echo "FAIL: $name: sfb exited non-zero:"; tail -5 "$tmp/$name.log"
    fails=$((fails+1)); continue
  fi
  got=$(sha256sum <"$tmp/$name/model.sfb" | cut -d' ' -f1)
  echo "$name $got $args" >>"$out"
  if [ "$got" = "$sum" ]; then
    passes=$((passes+1))
  else
    echo "FAIL: $name: model sha256 $got, recorded $sum"
    fails=$((fails+1))
  fi
done <"$SUMS"

if [ "$UPDATE" = --update ]; then
  cp "$out" "$SUMS" && echo "model_checksums: wrote $SUMS"
fi
echo "$passes passed, $fails failed"
[ $fails = 0 ]
