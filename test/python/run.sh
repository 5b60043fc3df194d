#!/usr/bin/env bash
# Runs a Python test or example with an interpreter that has numpy: $SFB_PYTHON,
# else the first of python3 and /usr/bin/python3 (Debian's, where
# python3-numpy installs) that imports it; exit 77 (meson: skipped) if none.
# Usage: run.sh SCRIPT ARGS...
set -u
for py in ${SFB_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c 'import numpy' 2>/dev/null; then exec "$py" "$@"; fi
done
echo "no python3 with numpy (install python3-numpy, or set SFB_PYTHON)" >&2
exit 77
