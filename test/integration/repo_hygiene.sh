#!/usr/bin/env bash
# Checks of the source tree itself: what the default outputs of `sfb run`
# are ignored by git, every declared meson option is used, and
# scripts/check-memory writes no fixed path outside its build trees (two
# checkouts running it at once must not collide), and names of models,
# engines and topologies are compared only in their registries. Usage:
# repo_hygiene.sh SRCDIR
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

# Knowledge about a model, an engine or a topology lives in its ops table
# (house rule 15): only the three registries compare such names. A strcmp
# (strncmp, strcasecmp) elsewhere that names a registered model, engine or
# topology, or compares a model/engine/topology field or ops name, fails.
names=$( (sed -n 's/^SFB_MODEL(\([a-z0-9_]*\)).*/\1/p' "$src/models/registry.def"
          grep -ho '\.name = "[^"]*"' "$src"/sfb/*.c "$src"/topology/*.c "$src"/models/*.c | sed 's/.*"\(.*\)"/\1/') |
        sort -u | paste -sd'|')
check "registry-names-found" "[ \"\$(tr '|' '\\n' <<<'$names' | wc -l)\" -ge 6 ]"
name_cmp=$(grep -rnE --include='*.c' --include='*.h' 'str(n|case|ncase)?cmp *\(' \
             "$src/src" "$src/sfb" "$src/topology" "$src/models" "$src/include" "$src/bench" |
           grep -vE "^$src/(models/model\.c|sfb/sync\.c|topology/topo\.c):" |
           grep -E "\"($names)\"|(->|\.)(model|kind|sync|topology|engine)\b|\bkind\b|ops\)?->name|engine->name|registry_name" || true)
[ -n "$name_cmp" ] && printf 'name compared outside a registry:\n%s\n' "$name_cmp"
check "names-compared-in-registries-only" "[ -z \"\$name_cmp\" ]"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
