#!/usr/bin/env python3
"""Independent checker for sfb's overlay topologies (docs/design.md §Topology).

Pure python3, no numpy. It recomputes, from the definitions alone and with
exact rational arithmetic (fractions.Fraction), the offsets of `halton`,
`halton-classic` and `full`, then checks strong connectivity and computes the
diameter and mean hop count by plain BFS over the explicit edge list. It
shares no code with the C implementation; the unit test `topo_python`
compares the two.

Usage:
  topo_check.py --nodes 16,1024,10000 [--degree Q] [--topology halton,...]
  topo_check.py --range 2:4096 --degree-extra 2     (connectivity sweep)
Output: one line per (topology, P, Q):
  <topology> <P> <Q> <degree> <connected 0|1> <diameter> <sum_hops> <offsets...>
sum_hops is the sum of hop counts over all ordered pairs (exact integer);
mean hops = sum_hops / (P*(P-1)).
"""
import argparse
import math
import sys
from collections import deque
from fractions import Fraction


def radical_inverse(n, base):
    """phi_base(n) as an exact fraction: digits of n mirrored at the point."""
    r = Fraction(0)
    scale = Fraction(1, base)
    while n > 0:
        n, d = divmod(n, base)
        r += d * scale
        scale /= base
    return r


def ceil_log2(p):
    return 0 if p <= 1 else (p - 1).bit_length()


def gcd_fix(offs, p):
    g = p
    for o in offs:
        g = math.gcd(g, o)
    if g != 1 and 1 not in offs:
        offs.append(1)
    return offs


def halton_offsets(p, q):
    """o_k = 2^j + floor(2^j * phi3(k+1)), clipped to [1, P-1]."""
    if p <= 1:
        return []
    if q >= p - 1:
        return list(range(1, p))
    L = ceil_log2(p)
    offs, seen = [], set()
    k = 0
    kmax = 16 * (p + q)
    while len(offs) < q and k < kmax:
        if q == 1:
            j = 0
        elif q <= L:
            # round half up of k(L-1)/(Q-1), exactly
            j = math.floor(Fraction(k * (L - 1), q - 1) + Fraction(1, 2))
        else:
            j = k % L
        o = 2 ** j + math.floor(2 ** j * radical_inverse(k + 1, 3))
        o = min(max(o, 1), p - 1)
        if o not in seen:
            seen.add(o)
            offs.append(o)
        k += 1
    return gcd_fix(offs, p)


def classic_offsets(p, q):
    """o_l = 1 + floor((P-1) * phi2(l)), l = 1, 2, ..."""
    if p <= 1:
        return []
    if q >= p - 1:
        return list(range(1, p))
    offs, seen = [], set()
    l = 1
    while len(offs) < q:
        o = 1 + math.floor((p - 1) * radical_inverse(l, 2))
        if o not in seen:
            seen.add(o)
            offs.append(o)
        l += 1
    return gcd_fix(offs, p)


def full_offsets(p, q):
    return list(range(1, p))


TOPOLOGIES = {
    "full": full_offsets,
    "halton": halton_offsets,
    "halton-classic": classic_offsets,
}


def analyse(p, offs):
    """Strong connectivity: BFS from node 0 over the explicit edge list and
    over the reversed edge list (everything reachable from 0 and 0 reachable
    from everything). Hop statistics: BFS from node 0, times P for the sum
    over all ordered pairs (circulant graphs are vertex-transitive; the
    --all-sources mode checks that by brute force)."""
    adj = [[(i + o) % p for o in offs] for i in range(p)]
    radj = [[] for _ in range(p)]
    for i in range(p):
        for j in adj[i]:
            radj[j].append(i)

    def bfs(graph, src):
        dist = [-1] * p
        dist[src] = 0
        dq = deque([src])
        while dq:
            u = dq.popleft()
            for v in graph[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    dq.append(v)
        return dist

    d0 = bfs(adj, 0)
    r0 = bfs(radj, 0)
    connected = all(x >= 0 for x in d0) and all(x >= 0 for x in r0)
    if not connected:
        return False, -1, -1
    return True, max(d0), sum(d0) * p


def analyse_all_sources(p, offs):
    adj = [[(i + o) % p for o in offs] for i in range(p)]
    diam, total = 0, 0
    for s in range(p):
        dist = [-1] * p
        dist[s] = 0
        dq = deque([s])
        while dq:
            u = dq.popleft()
            for v in adj[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    dq.append(v)
        if min(dist) < 0:
            return False, -1, -1
        diam = max(diam, max(dist))
        total += sum(dist)
    return True, diam, total


def parse_list(s):
    out = []
    for part in s.split(","):
        if ":" in part:
            a, b = part.split(":")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="16,64,1024",
                    help="comma list of P, ranges a:b allowed")
    ap.add_argument("--topology", default="halton,halton-classic,full")
    ap.add_argument("--degree", default="0",
                    help="comma list of Q (0 = default ceil(log2 P))")
    ap.add_argument("--all-sources", action="store_true",
                    help="BFS from every node instead of node 0 (slow)")
    args = ap.parse_args()
    for name in args.topology.split(","):
        fn = TOPOLOGIES[name]
        for p in parse_list(args.nodes):
            for q in parse_list(args.degree):
                qq = q if q > 0 else max(ceil_log2(p), 1 if p > 1 else 0)
                offs = fn(p, qq)
                if p == 1:
                    conn, diam, tot = True, 0, 0
                elif args.all_sources:
                    conn, diam, tot = analyse_all_sources(p, offs)
                else:
                    conn, diam, tot = analyse(p, offs)
                print(name, p, qq, len(offs), int(conn), diam, tot,
                      *offs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
