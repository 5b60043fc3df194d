/* Spin locks that yield the CPU on an oversubscribed host.
 *
 * libfabric's shm provider guards each receiver's region with a pthread
 * spin lock that every sender to that rank takes. With more ranks than
 * cores (P = 64 full P2P on 2 cores: 63 senders per region) a holder is
 * often preempted inside its critical section, and every other sender then
 * spins out its whole time slice: `perf` put half of all CPU in
 * pthread_spin_lock early in such a run. libsfb therefore defines
 * pthread_spin_lock itself (the dynamic linker binds libfabric's calls to
 * it, libsfb coming before libc in the search order): the same lock taken
 * with pthread_spin_trylock, pausing between tries, and after SPINS failed
 * tries yielding the CPU to the preempted holder -- but only once
 * sfb__spin_yield_enable(1) was called, which the transport does when this
 * host runs more ranks than the process may use CPUs (SFB_SPIN_YIELD=0 / 1
 * forces it off / on). Otherwise it spins as libc's does. Not interposed
 * where libsfb is loaded privately (dlopen without RTLD_GLOBAL, as Python's
 * ctypes does): libc's lock then, correct and only slower when
 * oversubscribed. */
#ifndef SFB_SRC_SPIN_YIELD_H
#define SFB_SRC_SPIN_YIELD_H

/* Process-wide; any thread. */
void sfb__spin_yield_enable(int on);
int sfb__spin_yield_enabled(void);
/* Yields so far, all threads (tests, diagnostics). */
unsigned long long sfb__spin_yields(void);

#endif
