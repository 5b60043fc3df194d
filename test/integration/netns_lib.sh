# Shared by the emulated-cluster tests (sourced): skip unless root with ip netns,
# a temporary directory removed on exit, check() counting, and leftover().
[ "$(id -u)" = 0 ] || { echo "SKIP: not root"; exit 77; }
ip netns add sfbprobe$$ 2>/dev/null || { echo "SKIP: ip netns unavailable"; exit 77; }
ip netns del sfbprobe$$
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if "$@"; then passes=$((passes+1)); else echo "FAIL: $*"; fails=$((fails+1)); fi; }
# what a cluster leaves behind: its namespaces and bridge (names from its
# cluster.json; other users' clusters may come and go meanwhile)
leftover() { # out-dir
  python3 - "$1/cluster.json" <<'PY'
import json, subprocess, sys
c = json.load(open(sys.argv[1]))
ns = [l.split()[0] for l in subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                                           text=True).stdout.splitlines() if l.strip()]
left = [n for n in ns if n.startswith(c["netns_prefix"])]
if subprocess.run(["ip", "link", "show", c["bridge"]], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL).returncode == 0:
    left.append(c["bridge"])
print("left behind:", left or "nothing")
sys.exit(1 if left else 0)
PY
}
