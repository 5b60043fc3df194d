#!/usr/bin/env bash
# Runs a Python test or example with an interpreter that has numpy: $SFB_PYTHON,
# else the first of python3 and /usr/bin/python3 (Debian's, where
# python3-numpy installs) that finds it. Exit 77 (meson: skipped) if there
# is none, or if libsfb ($SFB_LIB, as the tests set it) is built with ASan,
# which a python process cannot load. --check MODULE...: also 77 unless the
# interpreter finds each module. Modules are found, not imported (numpy takes
# 0.2 s, torch seconds, and every rank of a test starts here; one that is
# found but broken fails the test that uses it), and libsfb's ASan is read
# from its bytes (its DT_NEEDED name), not by ldd loading its dependencies.
# Usage: run.sh SCRIPT ARGS...   or   run.sh --check [MODULE...] (0: usable, 77: not)
set -u
if [ -n "${SFB_LIB:-}" ] && LC_ALL=C grep -qaF libasan.so "$SFB_LIB" 2>/dev/null; then
  echo "skipped: $SFB_LIB is built with ASan (python cannot load it)" >&2
  exit 77
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
    exec "$py" "$@"
  fi
done
echo "skipped: no python3 with numpy (install python3-numpy, or set SFB_PYTHON)" >&2
exit 77
