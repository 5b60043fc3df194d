/* libev event loop of the communication thread. The only module that
 * includes ev.h. */
#include "config.h"
#include "src/loop/loop.h"

#include "src/base/util.h"

#include <ev.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct call {
    void (*fn)(void *);
    void *arg;
    int done;
    struct call *next;
    void (*drop)(void *); /* posted (sfb__loop_post): heap-allocated, nobody waits */
    int posted;
};

struct sfb__loop {
    struct ev_loop *ev;
    pthread_t thread;
    int started;
    int stopped; /* loop thread has left ev_run (or is abandoned) */
    int abandoned; /* stuck for good inside a callback (sfb__loop_abandon) */
    int demoted;   /* ... and its thread runs under SCHED_IDLE since */
    ev_async wake;  /* carries calls and the stop request */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct call *calls; /* pending sfb__loop_call requests */
    int stop;
    /* Progress: whoever holds run_mu may run the loop's callbacks and touch
     * its watchers. The loop thread holds it except while it blocks in the
     * backend poll (libev's release/acquire callbacks); another thread
     * takes it with sfb__loop_try_enter and is then "in" the loop (a
     * visitor) until sfb__loop_leave. */
    pthread_mutex_t run_mu;
    _Atomic int running;   /* the loop thread is in ev_run: visitors may enter */
    _Atomic int closed_door; /* sfb__loop_admit(l, 0): no visitors */
    _Atomic int visiting;  /* a visitor holds run_mu */
    pthread_t visitor;
    int dirty; /* a visitor changed a watcher: the loop must recompute its wait */
};

struct sfb__loop_poller {
    struct sfb__loop *l;
    ev_prepare prepare;
    ev_idle idle; /* active while BUSY: keeps ev_run from blocking */
    ev_timer nap; /* bounds the block while NAP */
    ev_io io;
    int has_io;
    double interval;
    double sleep_max; /* > 0: bounds a SLEEP too (a missed wake-up costs time, not a hang) */
    double armed;     /* the bound the nap timer was started with */
    double away_max;  /* bounds an AWAY nap (default: the poll interval) */
    int (*fn)(void *);
    void *arg;
};

struct sfb__loop_timer {
    struct sfb__loop *l;
    ev_timer w;
    void (*cb)(void *);
    void *arg;
};

struct sfb__loop_io {
    struct sfb__loop *l;
    ev_io w;
    void (*cb)(void *);
    void *arg;
};

struct sfb__loop_async {
    struct sfb__loop *l;
    ev_async w;
    void (*cb)(void *);
    void *arg;
};

static void run_calls(struct sfb__loop *l)
{
    pthread_mutex_lock(&l->mu);
    while (l->calls) {
        struct call *c = l->calls;
        l->calls = c->next;
        pthread_mutex_unlock(&l->mu);
        c->fn(c->arg);
        pthread_mutex_lock(&l->mu);
        if (c->posted) free(c);
        else c->done = 1;
    }
    pthread_cond_broadcast(&l->cv);
    int stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    if (stop) ev_break(l->ev, EVBREAK_ALL);
}

/* Posted calls the loop will not run (it stopped, or is closing) get their
 * drop(); a waiting sfb__loop_call is woken, sees `stopped` and unlinks its
 * own. */
static void drop_posted(struct sfb__loop *l)
{
    pthread_mutex_lock(&l->mu);
    pthread_cond_broadcast(&l->cv);
    struct call **pp = &l->calls;
    while (*pp) {
        struct call *c = *pp;
        if (!c->posted) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        if (c->drop) c->drop(c->arg);
        free(c);
    }
    pthread_mutex_unlock(&l->mu);
}

static void wake_cb(struct ev_loop *ev, ev_async *w, int revents)
{
    run_calls(w->data);
}

/* libev's threading hooks: run_mu is free while the loop thread blocks. */
static void release_cb(struct ev_loop *ev)
{
    struct sfb__loop *l = ev_userdata(ev);
    pthread_mutex_unlock(&l->run_mu);
}

static void acquire_cb(struct ev_loop *ev)
{
    struct sfb__loop *l = ev_userdata(ev);
    pthread_mutex_lock(&l->run_mu);
}

static int visitor_is_me(const struct sfb__loop *l)
{
    return atomic_load_explicit(&l->visiting, memory_order_acquire) &&
           pthread_equal(pthread_self(), l->visitor);
}

/* A watcher changed: a visitor's change is seen by the loop thread only
 * once it wakes (sfb__loop_leave wakes it); libev's clock, stale in a
 * visitor, is brought up to date for the timers it starts. */
static void touched(struct sfb__loop *l)
{
    if (!visitor_is_me(l)) return;
    if (!l->dirty) ev_now_update(l->ev);
    l->dirty = 1;
}

int sfb__loop_open(struct sfb__loop **out)
{
    *out = NULL;
    struct sfb__loop *l = calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    l->ev = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
    if (!l->ev) {
        free(l);
        return sfb__error(-EIO, "libev: ev_loop_new failed");
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->run_mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    ev_set_userdata(l->ev, l);
    ev_set_loop_release_cb(l->ev, release_cb, acquire_cb);
    ev_async_init(&l->wake, wake_cb);
    l->wake.data = l;
    ev_async_start(l->ev, &l->wake);
    *out = l;
    return 0;
}

static void *loop_main(void *arg)
{
    struct sfb__loop *l = arg;
    /* named for top -H, perf and gdb (the process's other threads are the
     * program's: a Python program's all say python3); by the thread itself,
     * as prctl does, which valgrind follows (another thread's name goes
     * through /proc, which it does not) */
    pthread_setname_np(pthread_self(), "sfb-loop");
    pthread_mutex_lock(&l->run_mu);
    atomic_store(&l->running, 1);
    ev_run(l->ev, 0);
    atomic_store(&l->running, 0);
    pthread_mutex_unlock(&l->run_mu);
    pthread_mutex_lock(&l->mu);
    l->stopped = 1;
    pthread_mutex_unlock(&l->mu);
    /* callers that queued a call after the stop request must not wait forever */
    drop_posted(l);
    return NULL;
}

int sfb__loop_start(struct sfb__loop *l)
{
    if (l->started) return -EALREADY;
    int rc = pthread_create(&l->thread, NULL, loop_main, l);
    if (rc) return sfb__error(-rc, "loop: pthread_create failed");
    l->started = 1;
    return 0;
}

void sfb__loop_close(struct sfb__loop **lp)
{
    struct sfb__loop *l = *lp;
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    int abandoned = l->abandoned;
    pthread_mutex_unlock(&l->mu);
    if (abandoned) { /* its thread holds it: left allocated (reachable from the transport) */
        *lp = NULL;
        return;
    }
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_mutex_unlock(&l->mu);
        ev_async_send(l->ev, &l->wake);
        pthread_join(l->thread, NULL);
    }
    drop_posted(l);
    ev_async_stop(l->ev, &l->wake);
    ev_loop_destroy(l->ev);
    pthread_mutex_destroy(&l->run_mu);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    *lp = NULL;
}

void sfb__loop_abandon(struct sfb__loop *l)
{
    pthread_mutex_lock(&l->mu);
    l->abandoned = l->stopped = 1;
    pthread_cond_broadcast(&l->cv); /* callers waiting for a call: it will never run */
    /* The loop thread inside the call may spin for good (a spinlock in
     * shared memory): from now on it runs only on CPU time no other thread
     * wants, not on a core the job's threads need. (A visitor stuck instead
     * ends its process: comm_watch.c.) */
    struct sched_param idle = {0};
    if (l->started && !atomic_load_explicit(&l->visiting, memory_order_acquire))
        l->demoted = pthread_setschedparam(l->thread, SCHED_IDLE, &idle) == 0;
    pthread_mutex_unlock(&l->mu);
}

int sfb__loop_demoted(struct sfb__loop *l)
{
    pthread_mutex_lock(&l->mu);
    int d = l->demoted;
    pthread_mutex_unlock(&l->mu);
    return d;
}

int sfb__loop_in_thread(const struct sfb__loop *l)
{
    return !l->started || pthread_equal(pthread_self(), l->thread) || visitor_is_me(l);
}

int sfb__loop_try_enter(struct sfb__loop *l)
{
    if (!l->started || !atomic_load_explicit(&l->running, memory_order_acquire) ||
        atomic_load_explicit(&l->closed_door, memory_order_relaxed) ||
        pthread_equal(pthread_self(), l->thread) || visitor_is_me(l))
        return 0;
    if (pthread_mutex_trylock(&l->run_mu)) return 0;
    if (!atomic_load_explicit(&l->running, memory_order_acquire)) { /* it has left ev_run */
        pthread_mutex_unlock(&l->run_mu);
        return 0;
    }
    l->visitor = pthread_self();
    atomic_store_explicit(&l->visiting, 1, memory_order_release);
    return 1;
}

void sfb__loop_leave(struct sfb__loop *l)
{
    int dirty = l->dirty;
    l->dirty = 0;
    atomic_store_explicit(&l->visiting, 0, memory_order_release);
    pthread_mutex_unlock(&l->run_mu);
    if (dirty) ev_async_send(l->ev, &l->wake);
}

void sfb__loop_admit(struct sfb__loop *l, int visitors)
{
    atomic_store_explicit(&l->closed_door, !visitors, memory_order_relaxed);
}

int sfb__loop_visited(const struct sfb__loop *l)
{
    return atomic_load_explicit(&l->visiting, memory_order_acquire);
}

void sfb__loop_wake(struct sfb__loop *l)
{
    ev_async_send(l->ev, &l->wake);
}

/* Appends c after every call made or posted before and wakes the loop;
 * -ESHUTDOWN (c not queued) once the loop thread has stopped. */
static int enqueue(struct sfb__loop *l, struct call *c)
{
    pthread_mutex_lock(&l->mu);
    if (l->stopped) {
        pthread_mutex_unlock(&l->mu);
        return -ESHUTDOWN;
    }
    struct call **pp = &l->calls;
    while (*pp) pp = &(*pp)->next;
    *pp = c;
    pthread_mutex_unlock(&l->mu);
    ev_async_send(l->ev, &l->wake);
    return 0;
}

/* A visitor runs the calls queued before its own first, keeping the order. */
static void run_here(struct sfb__loop *l, void (*fn)(void *), void *arg)
{
    if (visitor_is_me(l)) {
        pthread_mutex_lock(&l->mu);
        int queued = l->calls != NULL;
        pthread_mutex_unlock(&l->mu);
        if (queued) run_calls(l);
    }
    fn(arg);
}

int sfb__loop_call(struct sfb__loop *l, void (*fn)(void *), void *arg)
{
    if (sfb__loop_in_thread(l)) {
        run_here(l, fn, arg);
        return 0;
    }
    if (sfb__loop_try_enter(l)) {
        run_here(l, fn, arg);
        sfb__loop_leave(l);
        return 0;
    }
    struct call c = {.fn = fn, .arg = arg};
    if (enqueue(l, &c)) return -ESHUTDOWN;
    pthread_mutex_lock(&l->mu);
    while (!c.done && !l->stopped) pthread_cond_wait(&l->cv, &l->mu);
    int rc = c.done ? 0 : -ESHUTDOWN;
    if (!c.done) { /* unlink: the loop will never run it */
        for (struct call **pp = &l->calls; *pp; pp = &(*pp)->next)
            if (*pp == &c) {
                *pp = c.next;
                break;
            }
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int sfb__loop_post(struct sfb__loop *l, void (*fn)(void *arg), void (*drop)(void *arg), void *arg)
{
    if (sfb__loop_in_thread(l)) {
        run_here(l, fn, arg);
        return 0;
    }
    if (sfb__loop_try_enter(l)) {
        run_here(l, fn, arg);
        sfb__loop_leave(l);
        return 0;
    }
    struct call *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    *c = (struct call){.fn = fn, .arg = arg, .drop = drop, .posted = 1};
    if (enqueue(l, c)) {
        free(c);
        return -ESHUTDOWN;
    }
    return 0;
}

/* ---- pollers ---- */

static void noop_idle(struct ev_loop *ev, ev_idle *w, int revents) {}
static void noop_timer(struct ev_loop *ev, ev_timer *w, int revents) {}
static void noop_io(struct ev_loop *ev, ev_io *w, int revents) {}

static void prepare_cb(struct ev_loop *ev, ev_prepare *w, int revents)
{
    struct sfb__loop_poller *p = w->data;
    int st = p->fn(p->arg);
    /* AWAY: another thread polls the source; PACE: the source moves at its
     * own pace. Either way its fd is not this loop's concern until the next
     * pass (a readable fd would not let it block). */
    int unwatched = st == SFB__POLL_AWAY || st == SFB__POLL_PACE;
    if (p->has_io && unwatched == ev_is_active(&p->io)) {
        if (unwatched) ev_io_stop(ev, &p->io);
        else ev_io_start(ev, &p->io);
    }
    int away = st == SFB__POLL_AWAY;
    if (unwatched) st = SFB__POLL_NAP;
    if (st == SFB__POLL_BUSY) {
        if (!ev_is_active(&p->idle)) ev_idle_start(ev, &p->idle);
    } else if (ev_is_active(&p->idle)) {
        ev_idle_stop(ev, &p->idle);
    }
    double bound = away ? p->away_max
                 : st == SFB__POLL_NAP ? p->interval : st == SFB__POLL_SLEEP ? p->sleep_max : 0;
    if (bound > 0) {
        if (ev_is_active(&p->nap) && p->armed != bound) ev_timer_stop(ev, &p->nap);
        if (!ev_is_active(&p->nap)) {
            ev_timer_set(&p->nap, bound, 0.);
            ev_timer_start(ev, &p->nap);
            p->armed = bound;
        }
    } else if (ev_is_active(&p->nap)) {
        ev_timer_stop(ev, &p->nap);
    }
}

struct poller_op {
    struct sfb__loop_poller *p;
    int open;
};

static void poller_op(void *arg)
{
    struct poller_op *op = arg;
    struct sfb__loop_poller *p = op->p;
    struct ev_loop *ev = p->l->ev;
    touched(p->l);
    if (op->open) {
        ev_prepare_start(ev, &p->prepare);
        if (p->has_io) ev_io_start(ev, &p->io);
    } else {
        ev_prepare_stop(ev, &p->prepare);
        ev_idle_stop(ev, &p->idle);
        ev_timer_stop(ev, &p->nap);
        if (p->has_io) ev_io_stop(ev, &p->io);
    }
}

int sfb__loop_poller_open(struct sfb__loop *l, struct sfb__loop_poller **out, int fd,
                          double poll_interval_s, int (*fn)(void *), void *arg)
{
    *out = NULL;
    struct sfb__loop_poller *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->l = l;
    p->fn = fn;
    p->arg = arg;
    p->interval = p->away_max = poll_interval_s;
    ev_prepare_init(&p->prepare, prepare_cb);
    p->prepare.data = p;
    ev_idle_init(&p->idle, noop_idle);
    ev_init(&p->nap, noop_timer);
    if (fd >= 0) {
        ev_io_init(&p->io, noop_io, fd, EV_READ);
        p->has_io = 1;
    }
    struct poller_op op = {p, 1};
    int rc = sfb__loop_call(l, poller_op, &op);
    if (rc) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Sets one of a poller's bounds (sleep_max, away_max) in the loop. */
struct bound_op {
    struct sfb__loop_poller *p;
    double *field;
    double s;
};

static void bound_in_loop(void *arg)
{
    struct bound_op *op = arg;
    touched(op->p->l);
    *op->field = op->s;
}

static void set_bound(struct sfb__loop_poller *p, double *field, double s)
{
    struct bound_op op = {p, field, s};
    if (sfb__loop_call(p->l, bound_in_loop, &op)) bound_in_loop(&op);
}

void sfb__loop_poller_sleep_max(struct sfb__loop_poller *p, double sleep_max_s)
{
    set_bound(p, &p->sleep_max, sleep_max_s);
}

void sfb__loop_poller_away_max(struct sfb__loop_poller *p, double away_max_s)
{
    set_bound(p, &p->away_max, away_max_s);
}

void sfb__loop_poller_close(struct sfb__loop_poller **pp)
{
    struct sfb__loop_poller *p = *pp;
    if (!p) return;
    struct poller_op op = {p, 0};
    /* If the loop thread is gone its watchers no longer run: stop directly. */
    if (sfb__loop_call(p->l, poller_op, &op)) poller_op(&op);
    free(p);
    *pp = NULL;
}

/* ---- timers ---- */

static void timer_cb(struct ev_loop *ev, ev_timer *w, int revents)
{
    struct sfb__loop_timer *t = w->data;
    t->cb(t->arg);
}

static void timer_start(void *arg)
{
    struct sfb__loop_timer *t = arg;
    touched(t->l);
    ev_timer_start(t->l->ev, &t->w);
}

static void timer_stop(void *arg)
{
    struct sfb__loop_timer *t = arg;
    touched(t->l);
    ev_timer_stop(t->l->ev, &t->w);
}

int sfb__loop_timer_open(struct sfb__loop *l, struct sfb__loop_timer **out, double after_s,
                         double repeat_s, void (*cb)(void *), void *arg)
{
    *out = NULL;
    struct sfb__loop_timer *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    t->l = l;
    t->cb = cb;
    t->arg = arg;
    ev_timer_init(&t->w, timer_cb, after_s, repeat_s > 0 ? repeat_s : 0.);
    t->w.data = t;
    int rc = sfb__loop_call(l, timer_start, t);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void sfb__loop_timer_close(struct sfb__loop_timer **tp)
{
    struct sfb__loop_timer *t = *tp;
    if (!t) return;
    if (sfb__loop_call(t->l, timer_stop, t)) timer_stop(t);
    free(t);
    *tp = NULL;
}

void sfb__loop_timer_rearm(struct sfb__loop_timer *t, double after_s)
{
    touched(t->l);
    ev_timer_stop(t->l->ev, &t->w);
    ev_timer_set(&t->w, after_s, t->w.repeat);
    ev_timer_start(t->l->ev, &t->w);
}

/* ---- async ---- */

static void async_cb(struct ev_loop *ev, ev_async *w, int revents)
{
    struct sfb__loop_async *a = w->data;
    a->cb(a->arg);
}

static void async_start(void *arg)
{
    struct sfb__loop_async *a = arg;
    touched(a->l);
    ev_async_start(a->l->ev, &a->w);
}

static void async_stop(void *arg)
{
    struct sfb__loop_async *a = arg;
    touched(a->l);
    ev_async_stop(a->l->ev, &a->w);
}

int sfb__loop_async_open(struct sfb__loop *l, struct sfb__loop_async **out,
                         void (*cb)(void *), void *arg)
{
    *out = NULL;
    struct sfb__loop_async *a = calloc(1, sizeof *a);
    if (!a) return -ENOMEM;
    a->l = l;
    a->cb = cb;
    a->arg = arg;
    ev_async_init(&a->w, async_cb);
    a->w.data = a;
    int rc = sfb__loop_call(l, async_start, a);
    if (rc) {
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void sfb__loop_async_send(struct sfb__loop_async *a)
{
    ev_async_send(a->l->ev, &a->w);
}

void sfb__loop_async_close(struct sfb__loop_async **ap)
{
    struct sfb__loop_async *a = *ap;
    if (!a) return;
    if (sfb__loop_call(a->l, async_stop, a)) async_stop(a);
    free(a);
    *ap = NULL;
}

/* ---- fd watchers ---- */

static void io_cb(struct ev_loop *ev, ev_io *w, int revents)
{
    struct sfb__loop_io *io = w->data;
    io->cb(io->arg);
}

static void io_start(void *arg)
{
    struct sfb__loop_io *io = arg;
    touched(io->l);
    ev_io_start(io->l->ev, &io->w);
}

static void io_stop(void *arg)
{
    struct sfb__loop_io *io = arg;
    touched(io->l);
    ev_io_stop(io->l->ev, &io->w);
}

int sfb__loop_io_open(struct sfb__loop *l, struct sfb__loop_io **out, int fd,
                      void (*cb)(void *), void *arg)
{
    *out = NULL;
    struct sfb__loop_io *io = calloc(1, sizeof *io);
    if (!io) return -ENOMEM;
    io->l = l;
    io->cb = cb;
    io->arg = arg;
    ev_io_init(&io->w, io_cb, fd, EV_READ);
    io->w.data = io;
    int rc = sfb__loop_call(l, io_start, io);
    if (rc) {
        free(io);
        return rc;
    }
    *out = io;
    return 0;
}

void sfb__loop_io_close(struct sfb__loop_io **iop)
{
    struct sfb__loop_io *io = *iop;
    if (!io) return;
    if (sfb__loop_call(io->l, io_stop, io)) io_stop(io);
    free(io);
    *iop = NULL;
}
