#!/usr/bin/env bash
# A library exports its API and nothing else (STYLE.md rule 17): every
# symbol libsfb.so defines in its dynamic symbol table is a public sfb_ name
# (never sfb__, never a symbol of libc or another library, such as the
# yielding pthread_spin_lock of the sfb command), and the API is there.
# Usage: exports.sh LIBSFB
set -uo pipefail
LIB=$1
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
syms=$(nm -D --defined-only "$LIB" | awk 'NF == 3 { print $3 }')
others=$(grep -v '^sfb_[a-z0-9]' <<<"$syms" | tr '\n' ' ')
internal=$(grep '^sfb__' <<<"$syms" | tr '\n' ' ')
check "only sfb_ symbols (others: [$others])" "[ -z '$others' ]"
check "no internal sfb__ symbols ([$internal])" "[ -z '$internal' ]"
for api in sfb_job_open sfb_job_publish sfb_launch_local sfb_version sfb_error_message; do
  check "$api exported" "grep -qx '$api' <<<'$syms'"
done
echo "exports: $passes passed, $fails failed"
[ $fails = 0 ]
