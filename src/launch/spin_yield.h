/* Spin locks that yield the CPU on an oversubscribed host.
 *
 * libfabric's shm provider guards each receiver's region with a pthread
 * spin lock that every sender to that rank takes. With more ranks than
 * cores (P = 64 full P2P on 2 cores: 63 senders per region) a holder is
 * often preempted inside its critical section, and every other sender then
 * spins out its whole time slice: `perf` put half of all CPU in
 * pthread_spin_lock early in such a run. spin_yield.c therefore defines
 * pthread_spin_lock: the same lock taken with pthread_spin_trylock, pausing
 * between tries, and after SPINS failed tries yielding the CPU to the
 * preempted holder when SFB_SPIN_YIELD=1 is in the environment (read at the
 * first contended lock).
 *
 * It is never part of libsfb (a library must not replace a libc symbol for
 * the programs that link it). It is linked into the `sfb` executable, whose
 * exported definition the dynamic linker binds libfabric's calls to, and
 * built alone as libsfb-spin-yield.so for LD_PRELOAD into other programs.
 * The local launcher (src/launch/launch.c) sets SFB_SPIN_YIELD=1 and preloads
 * that library into the ranks it starts when the host runs more ranks than
 * CPUs; SFB_SPIN_YIELD=0 or 1 in the launcher's environment decides
 * instead. */
#ifndef SFB_LAUNCH_SPIN_YIELD_H
#define SFB_LAUNCH_SPIN_YIELD_H

/* Process-wide, any thread: 1 = yield, 0 = spin as libc's lock; -1 = as
 * SFB_SPIN_YIELD says (the default). Tests. */
void sfb__spin_yield_set(int on);
int sfb__spin_yield_enabled(void);
/* Yields so far, all threads (tests, diagnostics). */
unsigned long long sfb__spin_yields(void);

#endif
