# Sourced by scripts/test and scripts/check-memory (bash). Puts Debian's
# python3 (/usr/bin/python3: scripts/setup installs it, with numpy) first in
# PATH for the tests, through a directory in the build tree holding only a
# link to it. The tests start python3 several hundred times (metrics checks,
# JSON fields); a version manager's shim first in PATH (pyenv's is a bash
# script that runs `pyenv exec`) costs ~0.3 s of CPU per start on the 2-core
# VM, minutes over the suites, and its interpreter may lack numpy.
# Usage: sfb_python_first BUILD_DIR
sfb_python_first() {
  local py=/usr/bin/python3 dir=$(cd "$1" && pwd)/python-path
  [ -x "$py" ] || return 0
  [ "$(command -v python3)" = "$py" ] && return 0
  mkdir -p "$dir" && ln -sfn "$py" "$dir/python3" && export PATH="$dir:$PATH"
}
