#!/usr/bin/env python3
"""Plain TCP in an overlay's pattern, for comparing sfb with the network
alone on the emulated cluster. Run one per namespace:

    sudo scripts/netns-cluster -n 16 --rate 100mbit --exec -- \\
        env OFFS=8,4,12,2,1 SIZES=480248,480248,480248,480248,480248 \\
        python3 bench/tcp_rounds.py

Rank r connects to r + OFFS[k] (mod P) for every k and sends SIZES[k] bytes
there each round while receiving from the ranks that connect to it; a rank
starts its next round once it has sent and received everything (as a
clock-flushed relay waits for its frames). Rank 0 prints the median round
time over ROUNDS rounds (default 30), the first 5 skipped. Needs SFB_RANK and
SFB_WORLD_SIZE (netns-cluster sets them); addresses 10.77.0.(rank + 1).
"""
import os
import selectors
import socket
import statistics
import sys
import time

PORT = 9000


def main():
    try:
        r, P = int(os.environ["SFB_RANK"]), int(os.environ["SFB_WORLD_SIZE"])
        offs = [int(x) for x in os.environ["OFFS"].split(",")]
        sizes = [int(x) for x in os.environ["SIZES"].split(",")]
    except (KeyError, ValueError) as e:
        sys.exit(f"tcp_rounds: need SFB_RANK, SFB_WORLD_SIZE, OFFS and SIZES (integers): {e}")
    if len(offs) != len(sizes) or not offs:
        sys.exit("tcp_rounds: OFFS and SIZES must have the same, non-zero length")
    rounds = int(os.environ.get("ROUNDS", "30"))
    addr = lambda j: f"10.77.0.{j + 1}"
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr(r), PORT))
    ls.listen(64)
    out = []
    for o in offs:
        s = socket.socket()
        deadline = time.monotonic() + 20
        while True:
            try:
                s.connect((addr((r + o) % P), PORT))
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"tcp_rounds: rank {r}: cannot connect to rank {(r + o) % P}")
                time.sleep(0.1)
        out.append(s)
    for k, s in enumerate(out):  # tell the receiver which link (and so which size) this is
        s.sendall(k.to_bytes(4, "little"))
    ins, insz = [], []
    for _ in offs:
        c, _a = ls.accept()
        insz.append(sizes[int.from_bytes(c.recv(4, socket.MSG_WAITALL), "little")])
        ins.append(c)
    for s in out + ins:
        s.setblocking(False)
    payload = [memoryview(bytes(n)) for n in sizes]
    buf = bytearray(1 << 20)
    times = []
    for _ in range(rounds):
        t0 = time.monotonic()
        sel = selectors.DefaultSelector()
        sent, got = [0] * len(out), [0] * len(ins)
        for i, s in enumerate(out):
            sel.register(s, selectors.EVENT_WRITE, ("o", i))
        for j, c in enumerate(ins):
            sel.register(c, selectors.EVENT_READ, ("i", j))
        left = len(out) + len(ins)
        while left:
            for key, _ev in sel.select():
                kind, i = key.data
                if kind == "o":
                    sent[i] += key.fileobj.send(payload[i][sent[i]:])
                    done = sent[i] == sizes[i]
                else:
                    n = key.fileobj.recv_into(buf, min(len(buf), insz[i] - got[i]))
                    if n == 0:
                        sys.exit(f"tcp_rounds: rank {r}: a peer closed early")
                    got[i] += n
                    done = got[i] == insz[i]
                if done:
                    sel.unregister(key.fileobj)
                    left -= 1
        sel.close()
        times.append(time.monotonic() - t0)
    if r == 0:
        print(f"tcp_rounds: P = {P}, offsets {offs}, bytes {sizes}: median round "
              f"{1e3 * statistics.median(times[5:] or times):.1f} ms over {rounds} rounds")


if __name__ == "__main__":
    main()
