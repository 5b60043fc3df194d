#!/usr/bin/env bash
# Runs a Python test or example with an interpreter that has numpy: $SFB_PYTHON,
# else the first of python3 and /usr/bin/python3 (Debian's, where
# python3-numpy installs) that imports it. Exit 77 (meson: skipped) if there
# is none, or if libsfb ($SFB_LIB, as the tests set it) is built with ASan,
# which a python process cannot load.
# Usage: run.sh SCRIPT ARGS...   or   run.sh --check (0: usable, 77: not)
set -u
if [ -n "${SFB_LIB:-}" ] && ldd "$SFB_LIB" 2>/dev/null | grep -q libasan; then
  echo "skipped: $SFB_LIB is built with ASan (python cannot load it)" >&2
  exit 77
fi
for py in ${SFB_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c 'import numpy' 2>/dev/null; then
    [ "${1:-}" = --check ] && exit 0
    exec "$py" "$@"
  fi
done
echo "skipped: no python3 with numpy (install python3-numpy, or set SFB_PYTHON)" >&2
exit 77
