/* The comm context's fields, for the network layer only: comm.c and
 * comm_api.c include this; everyone else goes through src/net/comm.h. */
#ifndef SFB_SRC_COMM_IMPL_H
#define SFB_SRC_COMM_IMPL_H

#include "src/net/comm.h"

#include <stdatomic.h>
#include <stdint.h>

struct sfb__comm {
    uint32_t rank, world;
    uint64_t job_key;
    struct sfb__bootstrap *bs;
    struct sfb__loop *loop;
    struct sfb__transport *t; /* NULL when world == 1 */
    const struct sfb__comm_ops *ops; /* how frames move (below); NULL when world == 1 */
    void *impl;                      /* the ops' own state (the loopback's rank) */
    struct sfb__wire_job job;
    struct sfb__wire_stats wstats;
    struct sfb__wire_shape shapes[8];
    struct sfb__comm_settings s;
    /* liveness (loop thread) */
    struct sfb__loop_timer *hb;
    double *last_heard;
    double *last_sent;     /* when a send to each peer last completed */
    uint8_t *talks;        /* a peer has sent this rank something other than a heartbeat */
    uint8_t *said_bye;
    _Atomic int64_t *final_clock; /* a peer's last clock (BYE or last-clock flag; INT64_MAX: running) */
    int64_t last_clock;    /* this rank's last clock if known ahead (sfb__comm_set_last_clock), else -2 */
    int *peer_pid;         /* every rank on this host: their pids, else NULL */
    double *gone_since;    /* when a peer's process was first seen gone */
    double silence_s;      /* a watched peer silent this long has failed (see heartbeat()) */
    double anon_error_at;  /* a fabric error naming no peer, not yet blamed */
    char anon_error[256];
    /* failure, published to the compute thread */
    _Atomic int failed;
    _Atomic int found_here; /* a failure found by this rank (a peer's frames), not reported */
    int failed_rank;
    char reason[512];
};

#endif
