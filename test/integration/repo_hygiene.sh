#!/usr/bin/env bash
# Checks of the source tree itself: what the default outputs of `sfb run`
# are ignored by git, every declared meson option is used, and
# scripts/check-memory writes no fixed path outside its build trees (two
# checkouts running it at once must not collide). Usage: repo_hygiene.sh SRCDIR
set -uo pipefail
src=$1
fails=0; passes=0
check() { # name, condition
  if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1 ($2)"; fails=$((fails+1)); fi
}

# `sfb run` writes sfb-out/ (models, metrics) and sfb-ckpt/ (checkpoints)
# into the working directory by default.
for d in sfb-out sfb-ckpt; do
  check "gitignore-$d" "git -C '$src' check-ignore -q --no-index '$d/model.sfb'"
  check "gitignore-sub-$d" "git -C '$src' check-ignore -q --no-index 'bench/$d/x'"
done

# Every option in meson_options.txt is read somewhere with get_option().
while read -r name; do
  check "option-$name-used" "grep -rq --include=meson.build \"get_option('$name')\" '$src'"
done < <(sed -n "s/^option('\([^']*\)'.*/\1/p" "$src/meson_options.txt")

# No fixed /tmp path in scripts/check-memory.
check "check-memory-no-fixed-tmp" "! grep -qE '/tmp/[A-Za-z]' '$src/scripts/check-memory'"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
