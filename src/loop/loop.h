/* The communication thread's event loop (libev), behind a small interface so
 * that only src/loop/loop.c includes ev.h.
 *
 * One loop per worker, run by one thread started with sfb__loop_start().
 * Modules hook into it with four kinds of watchers:
 *   - pollers: a progress function called before the loop blocks, plus an
 *     optional fd to wake on (libfabric CQ wait fd) — see sfb__loop_poller_open;
 *   - timers (heartbeats, metrics);
 *   - async notifiers, the only way another thread wakes the loop;
 *   - sfb__loop_call(): run a function in the loop thread and wait for it.
 *
 * Thread rules: every *_open / *_close below may be called from any thread;
 * when the loop thread is running and the caller is another thread, the
 * operation is shipped to the loop thread with sfb__loop_call (so it blocks
 * briefly). Callbacks run "in the loop", never before sfb__loop_start():
 * in the loop thread, or in a thread that has entered the loop
 * (sfb__loop_try_enter, a visitor) while the loop thread blocks. Both hold
 * the loop's progress lock, so callbacks never run at once and code "in the
 * loop" may treat the loop's state as its own. Close every watcher before
 * closing the loop.
 */
#ifndef SFB_SRC_LOOP_H
#define SFB_SRC_LOOP_H

struct sfb__loop;
struct sfb__loop_poller;
struct sfb__loop_timer;
struct sfb__loop_async;
struct sfb__loop_io;

/* Creates a loop (not running). Returns 0, -ENOMEM, or -EIO if libev fails.
 * *out is NULL on failure. */
int sfb__loop_open(struct sfb__loop **out);

/* Starts the communication thread running the loop. Returns 0, -EALREADY, or
 * a negated pthread error. Call once, from the owning (compute) thread. */
int sfb__loop_start(struct sfb__loop *l);

/* Stops the thread (if started), waits for it and frees the loop. All
 * watchers must be closed first. Sets *l to NULL; NULL is a no-op. Must not be
 * called from the loop thread. */
void sfb__loop_close(struct sfb__loop **l);

/* The loop thread is stuck for good inside a callback (a libfabric call
 * waiting on a lock that a dead process held; src/transport/transport.h): calls
 * fail at once with -ESHUTDOWN as after a stop, watchers close without it,
 * sfb__loop_close() leaves the loop allocated for the thread, and the loop
 * thread (when it is the one inside, not a visitor) runs under SCHED_IDLE.
 * Any thread. */
void sfb__loop_abandon(struct sfb__loop *l);
/* Whether the abandon put the loop thread under SCHED_IDLE (it was the
 * thread inside the call: a spin there takes no core from the job). */
int sfb__loop_demoted(struct sfb__loop *l);

/* 1 if the caller is in the loop: the loop thread, a visitor, or any
 * thread before the loop has been started. */
int sfb__loop_in_thread(const struct sfb__loop *l);

/* Enters the loop from another thread without waiting: 1 when this thread
 * now holds the progress lock (the loop thread is blocked in its poll, or
 * between passes) and may run what the loop thread would; 0 when the loop
 * thread is busy, has stopped, or the caller is already in the loop.
 * A visitor must call sfb__loop_leave soon: the loop thread's timers wait
 * for it. */
int sfb__loop_try_enter(struct sfb__loop *l);
/* Whether other threads may enter (1, the default) or every call and post
 * goes to the loop thread (0; src/transport/transport_setup.c decides). */
void sfb__loop_admit(struct sfb__loop *l, int visitors);
/* Leaves the loop; wakes the loop thread if the visitor changed a watcher
 * (it must recompute how long it may block). */
void sfb__loop_leave(struct sfb__loop *l);
/* 1 while a visitor is in the loop (any thread). */
int sfb__loop_visited(const struct sfb__loop *l);
/* Wakes the loop thread from its poll (any thread): it runs one more
 * iteration, its pollers' progress included. */
void sfb__loop_wake(struct sfb__loop *l);

/* Runs fn(arg) in the loop and returns when it has run. Runs it directly
 * when called in the loop, before sfb__loop_start(), or when the caller can
 * enter the loop at once (after the calls queued before it).
 * Returns 0, or -ESHUTDOWN if the loop thread has stopped. */
int sfb__loop_call(struct sfb__loop *l, void (*fn)(void *arg), void *arg);

/* Queues fn(arg) for the loop thread and returns at once; it runs in order
 * with every call made or posted before it (sfb__loop_call included, so a
 * later call finds it done). If the loop stops first, drop(arg) runs
 * instead (NULL: nothing), in the loop thread at its exit or in
 * sfb__loop_close(). Runs fn directly in the loop, before
 * sfb__loop_start(), or when the caller can enter the loop at once. Returns 0, -ENOMEM, or -ESHUTDOWN if the loop thread
 * has stopped (neither fn nor drop then runs). */
int sfb__loop_post(struct sfb__loop *l, void (*fn)(void *arg), void (*drop)(void *arg), void *arg);

/* What a poller's progress function returns. */
enum sfb__poll_state {
    SFB__POLL_SLEEP = 0, /* nothing to do: block until fd or another event */
    SFB__POLL_NAP = 1,   /* block at most poll_interval_s, then call again */
    SFB__POLL_BUSY = 2,  /* call again without blocking */
    SFB__POLL_AWAY = 3,  /* another thread polls the source: nap as NAP, not
                          * woken by the fd meanwhile */
    SFB__POLL_PACE = 4,  /* the source is busy at its own pace (a transfer the
                          * provider finishes piece by piece): nap as NAP, not
                          * woken by the fd, which turns readable for every
                          * few kilobytes that arrive */
};

/* A progress hook: fn(arg) runs in the loop thread once per loop iteration,
 * just before the loop would block (libev prepare), and decides how long the
 * loop may block. fd >= 0 is watched for readability to wake the loop (the fd
 * is not read; fn must drain the source). poll_interval_s > 0 bounds a NAP.
 * Returns 0 or -ENOMEM. */
int sfb__loop_poller_open(struct sfb__loop *l, struct sfb__loop_poller **out, int fd,
                          double poll_interval_s, int (*fn)(void *arg), void *arg);
/* Bounds a SLEEP as well (0, the default: a SLEEP waits for the fd or
 * another event however long). For a wake-up that may be missed (a doorbell
 * another process rings): it then costs at most sleep_max_s. */
void sfb__loop_poller_sleep_max(struct sfb__loop_poller *p, double sleep_max_s);
/* Bounds an AWAY nap (default: poll_interval_s): how long after the other
 * thread stops polling the loop may take to look again. */
void sfb__loop_poller_away_max(struct sfb__loop_poller *p, double away_max_s);
void sfb__loop_poller_close(struct sfb__loop_poller **p);

/* A timer: cb(arg) runs in the loop thread after `after_s` seconds, then every
 * `repeat_s` seconds if repeat_s > 0 (heartbeats). Returns 0 or -ENOMEM. */
int sfb__loop_timer_open(struct sfb__loop *l, struct sfb__loop_timer **out, double after_s,
                         double repeat_s, void (*cb)(void *arg), void *arg);
void sfb__loop_timer_close(struct sfb__loop_timer **t);
/* Loop thread: (re)starts t to fire once after `after_s` seconds (then
 * every repeat_s, as opened), replacing its pending expiry. */
void sfb__loop_timer_rearm(struct sfb__loop_timer *t, double after_s);

/* An fd watcher: cb(arg) runs in the loop thread while fd is readable
 * (level-triggered: cb must drain it or stop watching). Returns 0 or
 * -ENOMEM. */
int sfb__loop_io_open(struct sfb__loop *l, struct sfb__loop_io **out, int fd,
                      void (*cb)(void *arg), void *arg);
void sfb__loop_io_close(struct sfb__loop_io **io);

/* An async notifier: sfb__loop_async_send() from any thread makes cb(arg) run
 * soon in the loop thread. Several sends before it runs coalesce into one
 * call, so cb must drain whatever queue it serves. Returns 0 or -ENOMEM. */
int sfb__loop_async_open(struct sfb__loop *l, struct sfb__loop_async **out,
                         void (*cb)(void *arg), void *arg);
/* Any thread, async-signal-unsafe, never blocks. */
void sfb__loop_async_send(struct sfb__loop_async *a);
void sfb__loop_async_close(struct sfb__loop_async **a);

#endif
