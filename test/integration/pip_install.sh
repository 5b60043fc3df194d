#!/usr/bin/env bash
# pip install . (pyproject.toml, meson-python) into a fresh virtual
# environment, offline (--no-build-isolation --no-index: numpy, torch and
# meson-python come from Debian through --system-site-packages), used from
# outside the source tree with nothing of a build tree on the way: the
# venv's sfb says the project's version and loads the venv's libsfb; `import
# sfb` loads the libsfb installed beside the module; `sfb launch` hands its
# ranks that libsfb and the preload installed with it; examples/torch_mlp.py
# under the venv's `sfb launch -n 2` learns, and -n 2 and -n 1 agree (the
# same samples per step: the same accuracy up to float rounding).
# pip builds a copy of the source tree (git's files, uncommitted changes
# included) with its build directory in the temporary directory: nothing is
# written into the source tree (meson-python 0.12 writes its native file
# there, and with that file present it fails on a fresh builddir).
# Usage: pip_install.sh SOURCE_DIR VERSION
set -uo pipefail
SRC=$(cd "$1" && pwd); want=$2
py=${SFB_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
# The long commands run under timeout in the background (bash runs a trap
# only between commands, and wait is one): on meson's SIGTERM, timeout passes
# the signal to its process group (pip, meson, ninja, the compilers).
bg=
run() { "$@" & bg=$!; wait $bg; local rc=$?; bg=; return $rc; }
cleanup() {
  [ -n "$bg" ] && { kill -TERM "$bg" 2>/dev/null; wait "$bg" 2>/dev/null; }
  pkill -9 -f "$tmp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }

"$py" -c 'import mesonpy, numpy, torch, venv' 2>/dev/null \
  || { echo "skipped: $py lacks meson-python, numpy, torch or venv (scripts/setup)"; exit 77; }
[ -d /usr/share/datasets/fashion-mnist ] || { echo "skipped: no Fashion-MNIST (scripts/setup)"; exit 77; }

mkdir -p "$tmp/src" "$tmp/work"
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$SRC" ls-files -z --cached --others --exclude-standard \
    | tar -C "$SRC" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$tmp/src" -xf -
else
  tar -C "$SRC" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$tmp/src" -xf -
fi
[ -f "$tmp/src/pyproject.toml" ] || { echo "FAIL: no pyproject.toml in the copy of $SRC"; exit 1; }

V=$tmp/venv
"$py" -m venv --system-site-packages "$V" >"$tmp/venv.log" 2>&1 \
  || { cat "$tmp/venv.log"; echo "skipped: python3 -m venv failed (python3-venv)"; exit 77; }
start=$SECONDS
run timeout 480 "$V/bin/python" -m pip install --no-index --no-build-isolation \
  --config-settings builddir="$tmp/build" "$tmp/src" >"$tmp/pip.log" 2>&1
rc=$?
echo "pip install: exit $rc in $((SECONDS - start)) s"
if [ $rc != 0 ]; then tail -n 40 "$tmp/pip.log"; echo "pip_install: $passes passed, 1 failed"; exit 1; fi

cd "$tmp/work" || exit 1
unset SFB_LIB PYTHONPATH LD_LIBRARY_PATH LD_PRELOAD SFB_SPIN_YIELD
site=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
lib=$site/sfb/libsfb.so.0
check "installed: bin/sfb, sfb/libsfb.so.0, sfb/libsfb-spin-yield.so, sfb.torch in $site" \
  "[ -x '$V/bin/sfb' ] && [ -f '$lib' ] && [ -f '$site/sfb/libsfb-spin-yield.so' ] && [ -f '$site/sfb/torch/__init__.py' ]"

# 1. the venv's sfb: the project's version, on the venv's libsfb
out=$("$V/bin/sfb" --version 2>&1)
check "venv/bin/sfb --version: 'sfb $want' ($out)" "[ '$out' = 'sfb $want' ]"
so=$(ldd "$V/bin/sfb" | awk '$1 ~ /^libsfb\.so/ { print $3 }')
check "venv/bin/sfb loads the venv's libsfb ($so)" "[ '$(readlink -f "$so")' = '$(readlink -f "$lib")' ]"

# 2. import sfb: the venv's module and the libsfb beside it
out=$("$V/bin/python" -c 'import sfb; print(sfb.__version__, sfb._find_library(), sfb.__file__)' 2>&1)
read -r ver found file <<<"$out"
check "import sfb: version $want, the venv's module and libsfb ($out)" \
  "[ '$ver' = '$want' ] && [ '$(readlink -f "$found")' = '$(readlink -f "$lib")' ] && [ '$file' = '$site/sfb/__init__.py' ]"

# 3. what the venv's launcher hands its ranks
out=$(SFB_SPIN_YIELD=1 timeout 30 "$V/bin/sfb" launch -n 1 -- sh -c 'echo "lib=$SFB_LIB"; echo "pre=$LD_PRELOAD"' 2>&1)
check "sfb launch: SFB_LIB is the venv's libsfb ($out)" "grep -qx '\[0\] lib=$(readlink -f "$lib")' <<<'$out'"
check "sfb launch: LD_PRELOAD is the venv's preload ($out)" \
  "grep -qx '\[0\] pre=$(readlink -f "$site")/sfb/libsfb-spin-yield.so' <<<'$out'"

# 4. a PyTorch training under the venv's launcher (a copy of the example, so
# that its sys.path entry for the source tree's python/ finds nothing)
cp "$SRC/examples/torch_mlp.py" "$SRC/examples/fashion_mnist.py" "$tmp/work/"
mlp=(--hidden 64 --steps 100)
run timeout 120 "$V/bin/sfb" launch -n 2 -- "$V/bin/python" torch_mlp.py "${mlp[@]}" >"$tmp/p2" 2>&1; rc2=$?
run timeout 120 "$V/bin/sfb" launch -n 1 -- "$V/bin/python" torch_mlp.py "${mlp[@]}" >"$tmp/p1" 2>&1; rc1=$?
grep -h 'result ' "$tmp/p2" "$tmp/p1"
val() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" "$1" | tail -n 1; }
a2=$(val "$tmp/p2" test_accuracy); a1=$(val "$tmp/p1" test_accuracy)
check "torch_mlp.py -n 2 and -n 1: exit 0, world 2 and 1 ($rc2, $rc1)" \
  "[ $rc2 = 0 ] && [ $rc1 = 0 ] && [ '$(val "$tmp/p2" world)' = 2 ] && [ '$(val "$tmp/p1" world)' = 1 ]"
check "torch_mlp.py -n 2: accuracy >= 0.70 after 100 steps ($a2)" "awk 'BEGIN{exit !(\"$a2\" != \"\" && $a2 + 0 >= 0.70)}'"
check "torch_mlp.py: -n 2 accuracy $a2 within 0.5 point of -n 1's $a1" \
  "awk 'BEGIN{d = $a2 - $a1; exit !(\"$a2\" != \"\" && \"$a1\" != \"\" && d <= 0.005 && d >= -0.005)}'"
[ $rc2 = 0 ] || tail -n 20 "$tmp/p2"

echo "pip_install: $passes passed, $fails failed"
[ $fails = 0 ]
