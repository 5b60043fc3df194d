/* The bandwidth budget of one worker (--bandwidth): a token bucket that
 * paces the data messages it sends (its own factors, relayed bundles, FMS
 * row blocks); heartbeats and control frames are not charged.
 *
 * Tokens (bytes) accrue at `rate` per second up to `burst`. A message may
 * leave while the balance is not negative, and is charged its full size
 * when it does, so a message larger than the balance is sent and owed: the
 * long-run rate is exactly `rate`, and over any window of T seconds a
 * worker sends at most burst + rate·T + one message. Callers keep their
 * messages small against rate · 1 s (the relay caps a message at what
 * 2.5 ms of budget carries, sfb/parts.c) so that even 1-second windows stay
 * close.
 *
 * The bucket also measures how long it held senders back: from the first
 * refusal until the next message goes, the worker was "held" by its
 * budget; sfb__pace_held_s is the running total (the metrics' budget_wait_s
 * compares it with the time spent waiting for peers).
 *
 * Thread-safe (one mutex): the loop thread's relay and the compute thread's
 * FMS sends share a worker's bucket. */
#ifndef SFB_SRC_PACE_H
#define SFB_SRC_PACE_H

#include <pthread.h>
#include <stdint.h>

struct sfb__pace {
    pthread_mutex_t mu;
    double rate;  /* bytes per second, > 0 */
    double burst; /* the bucket's depth in bytes */
    double tokens;
    double at;    /* when `tokens` was last brought up to date */
    int held;     /* a sender was refused and none has sent since */
    double held_since, held_total;
    uint64_t charged; /* bytes charged so far */
};

/* rate > 0 bytes/s; burst ≥ 0 bytes (the bucket starts full). Returns 0 or
 * -EINVAL. */
int sfb__pace_init(struct sfb__pace *p, double rate, double burst, double now);
void sfb__pace_destroy(struct sfb__pace *p);

/* 0 when a message may leave at `now`, else the seconds until one may
 * (and the worker counts as held from now until the next charge). */
double sfb__pace_delay(struct sfb__pace *p, double now);

/* A message of `bytes` left at `now`. */
void sfb__pace_charge(struct sfb__pace *p, uint64_t bytes, double now);

/* Seconds held back by the budget up to `now` (monotonic). */
double sfb__pace_held_s(struct sfb__pace *p, double now);

#endif
