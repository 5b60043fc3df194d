"""Prints a free TCP port of 127.0.0.1 for a test's explicit rendezvous
(ranks started by hand with SFB_RENDEZVOUS or --rendezvous). It is picked
below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where
neither `sfb launch`'s rendezvous ports (bound to port 0, held for the job)
nor outgoing connections take it: a port bound to 0 and let go, as tests
picked before, could be taken by another test's launcher between the pick
and rank 0's bind ("Address already in use")."""
import random
import socket

try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
for _ in range(500):
    port = random.randrange(max(1024, low - 12000), max(1025, low))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("free_port: no free port below %d" % low)
