#!/usr/bin/env bash
# Runs a Python test or example with an interpreter that has numpy: $SFB_PYTHON,
# else the first of python3 and /usr/bin/python3 (Debian's, where
# python3-numpy installs) that finds it. Exit 77 (meson: skipped) if there
# is none. --check MODULE...: also 77 unless the interpreter finds each
# module. Modules are found, not imported (numpy takes 0.2 s, torch seconds,
# and every rank of a test starts here; one that is found but broken fails
# the test that uses it).
# A libsfb built with ASan ($SFB_LIB, as the tests set it; read from its
# bytes, its DT_NEEDED name, not by ldd loading its dependencies) loads into
# a python (not built with ASan) only with the ASan runtime preloaded ahead
# of everything: run so, without leak checks (the interpreter's own at exit);
# 77 where gcc names no libasan.so. libstdc++ is preloaded right behind it:
# ASan finds the C++ runtime's __cxa_throw when it starts, and python links
# none, so torch's first C++ exception (any error torch raises) would abort
# in ASan's interceptor ("real___cxa_throw != 0").
# Usage: run.sh [--needs MODULE]... SCRIPT ARGS...   (77 unless each MODULE is found)
#    or  run.sh --check [MODULE...]                   (0: usable, 77: not)
set -u
needs=()
while [ "${1:-}" = --needs ] && [ $# -ge 2 ]; do
  needs+=("$2")
  shift 2
done
asan=
if [ -n "${SFB_LIB:-}" ] && LC_ALL=C grep -qaF libasan.so "$SFB_LIB" 2>/dev/null; then
  asan=$(gcc -print-file-name=libasan.so 2>/dev/null)
  case "$asan" in
    /*) [ -f "$asan" ] || asan= ;;
    *) asan= ;;
  esac
  if [ -z "$asan" ]; then
    echo "skipped: $SFB_LIB is built with ASan, and gcc names no libasan.so to preload" >&2
    exit 77
  fi
  export LD_PRELOAD="$asan:libstdc++.so.6${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
found='import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))'
for py in ${SFB_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c "$found" numpy 2>/dev/null; then
    if [ "${1:-}" = --check ]; then
      shift
      [ $# = 0 ] || "$py" -c "$found" "$@" || exit 77
      exit 0
    fi
    if [ ${#needs[@]} -gt 0 ] && ! "$py" -c "$found" "${needs[@]}"; then
      echo "skipped: no ${needs[*]} for $py" >&2
      exit 77
    fi
    exec "$py" "$@"
  fi
done
echo "skipped: no python3 with numpy (install python3-numpy, or set SFB_PYTHON)" >&2
exit 77
