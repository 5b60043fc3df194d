#!/usr/bin/env bash
# Checks of the source tree itself: what the default outputs of `sfb run`
# are ignored by git, every declared meson option is used, and
# scripts/check-memory writes no fixed path outside its build trees (two
# checkouts running it at once must not collide), names of models,
# engines and topologies are compared only in their registries, and the
# docs pages and README sections the code cites exist. Usage:
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

# Messages (and comments) that send the reader to a page name one that
# exists: every docs/NAME.md cited in the code, and every README section
# cited as README: Section or README, "Section" is a heading there.
code_dirs=("$src/src" "$src/python/sfb" "$src/include" "$src/sfb" "$src/models" "$src/topology")
cited_docs=$(grep -rhoE --include='*.c' --include='*.h' --include='*.py' 'docs/[A-Za-z0-9_./-]+\.md' \
               "${code_dirs[@]}" | sort -u)
missing_docs=$(for f in $cited_docs; do [ -e "$src/$f" ] || echo "$f"; done)
[ -n "$missing_docs" ] && printf 'cited but missing:\n%s\n' "$missing_docs"
check "cited-docs-found" "[ -n \"\$cited_docs\" ]"
check "cited-docs-exist" "[ -z \"\$missing_docs\" ]"
readme_secs=$(grep -rhoE --include='*.c' --include='*.h' --include='*.py' \
                'README(:|,) *\\?"?[A-Z][A-Za-z0-9 -]+' "${code_dirs[@]}" |
              sed -E 's/^README(:|,) *\\?"?//' | sort -u)
missing_secs=$(while IFS= read -r sec; do
                 [ -z "$sec" ] || grep -qxE "#+ +$sec" "$src/README.md" || echo "$sec"
               done <<<"$readme_secs")
[ -n "$missing_secs" ] && printf 'README sections cited but missing:\n%s\n' "$missing_secs"
check "cited-readme-sections-exist" "[ -z \"\$missing_secs\" ]"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
