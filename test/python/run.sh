#!/usr/bin/env bash
# Runs a Python test or example with an interpreter that has numpy: $SFB_PYTHON,
# else the first of python3 and /usr/bin/python3 (Debian's, where
# python3-numpy installs) that imports it. Exit 77 (meson: skipped) if there
# is none, or if libsfb ($SFB_LIB, as the tests set it) is built with ASan,
# which a python process cannot load. --check MODULE...: also 77 unless the
# interpreter finds each module (found, not imported: importing torch takes
# seconds, and a torch that is found but broken fails the test that uses it).
# Usage: run.sh SCRIPT ARGS...   or   run.sh --check [MODULE...] (0: usable, 77: not)
set -u
if [ -n "${SFB_LIB:-}" ] && ldd "$SFB_LIB" 2>/dev/null | grep -q libasan; then
  echo "skipped: $SFB_LIB is built with ASan (python cannot load it)" >&2
  exit 77
fi
for py in ${SFB_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c 'import numpy' 2>/dev/null; then
    if [ "${1:-}" = --check ]; then
      shift
      for m in "$@"; do
        "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' \
          "$m" || exit 77
      done
      exit 0
    fi
    exec "$py" "$@"
  fi
done
echo "skipped: no python3 with numpy (install python3-numpy, or set SFB_PYTHON)" >&2
exit 77
