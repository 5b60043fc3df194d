/* Elastic jobs (include/sfb/job.h: sfb_job_lost, sfb_job_shrink; docs/design.md,
 * "Elastic jobs"): when a rank dies, the survivors go on without it, from
 * the most advanced state one of them holds, with no restart and no roll
 * back.
 *
 *   1. every survivor learns who died: its own liveness found it, or a LOST
 *      frame from the survivor that did (sent again here, so that ranks not
 *      watching the dead one stop waiting for it);
 *   2. each closes its fabric and engine and meets the others at the lowest
 *      survivor's reserved address (src/comm/comm_elastic.c), renumbered:
 *      ranks above the dead one move down one;
 *   3. they allgather the clock their replicas hold whole (ordered mode: a
 *      clock's updates of a matrix are applied together, so the SSP table's
 *      minimum applied clock is exactly what the replica holds); the most
 *      advanced survivor's matrices go to all (bit-identical replicas
 *      again), and the engine opens from the next clock on the same
 *      matrices and a fresh SSP table of the new world. */
#include "config.h"
#include <sfb/job.h>
#include "src/base/util.h"
#include "src/base/trace.h"
#include "src/boot/bootstrap.h"
#include "src/comm/comm.h"
#include "src/job/job_impl.h"
#include "sfb/sync.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sfb__job_elastic_check(const struct sfb_job *job, const struct sfb_job_attach *a)
{
    if (!job->cs.elastic || a->reattach) return 0; /* reattach: not kept, anything goes */
    if (a->staleness != 0)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: an elastic job runs at staleness 0 (%lld "
                          "asked): under SSP the survivors' replicas hold different updates, "
                          "and none of them is a state every update is in or out of whole",
                          (long long)a->staleness);
    /* each matrix's engine, as attach parsed it (NULL: "auto") */
    for (uint32_t m = 0; m < a->n; m++)
        if (job->engine_of[m] != &sfb__broadcast_desc)
            return sfb__error(-SFB_EUSAGE, "sfb_job_attach: an elastic job runs the engine "
                              "\"%s\" for every matrix, not \"%s\" (matrix %u): FMS keeps each "
                              "matrix's rows on one rank's server, which dies with it",
                              sfb__broadcast_desc.name,
                              job->engine_of[m] ? job->engine_of[m]->name : "auto", m);
    if (a->flush_clock)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: an elastic job's relays forward as "
                          "frames come (not flush_clock)");
    return 0;
}

/* -SFB_EPEER or -SFB_EUSAGE naming fn unless the job is elastic and goes on. */
static int need_elastic(const struct sfb_job *job, const char *fn)
{
    if (!job->comm) return sfb__error(-SFB_EPEER, "%s: the job ended already", fn);
    if (!job->cs.elastic) return sfb__error(-SFB_EUSAGE, "%s: not an elastic job", fn);
    return 0;
}

int sfb_job_lost(struct sfb_job *job)
{
    if (!job || !job->comm || !job->cs.elastic) return -1;
    return sfb__comm_lost(job->comm);
}

/* The old comm closed (its traffic kept), a new one open as rank `rank`
 * of `world`, meeting at `rdv`. `keep_fd`: a reservation of rdv's port
 * this rank holds (-1: none), closed once the new comm is open. */
static int reopen_comm(struct sfb_job *job, uint32_t rank, uint32_t world, const char *rdv,
                       int keep_fd)
{
    struct sfb__comm *c = job->comm;
    char key[24];
    snprintf(key, sizeof key, "0x%016" PRIx64, sfb__comm_job_key(c));
    struct sfb__comm_traffic t;
    sfb__comm_traffic(c, &t);
    job->closed_traffic.bytes_sent += t.bytes_sent;
    job->closed_traffic.bytes_recv += t.bytes_recv;
    job->closed_traffic.frames_sent += t.frames_sent;
    job->closed_traffic.frames_recv += t.frames_recv;
    /* this rank's own reservation, held until the new rendezvous is bound
     * (it may be the one rdv names) */
    int reserved = sfb__comm_take_reservation(c);
    sfb__comm_close(&job->comm);
    struct sfb__comm_settings cs = job->cs;
    cs.rank = (int)rank;
    cs.world = (int)world;
    cs.rendezvous = rdv;
    cs.job_key = key;
    int ret = sfb__comm_open(&job->comm, &cs);
    if (reserved >= 0) close(reserved);
    if (keep_fd >= 0) close(keep_fd);
    return ret;
}

/* Whether a shrink or grow keeps the attached matrices (the job's state)
 * rather than detaching them (attached with reattach, or none). */
static int keeps_matrices(const struct sfb_job *job)
{
    return job->engine && !job->reattach;
}

/* Before a world change: the engine and SSP table closed, the matrices
 * kept (`keep`: they are the job's state) or detached (reattach, none). */
static void put_down(struct sfb_job *job, int keep)
{
    if (!keep) {
        sfb__job_detach(job);
        return;
    }
    sfb__job_close_engine(job);
    sfb__ssp_fini(&job->ssp);
    job->ssp_open = 0;
}

/* Steps 1 and 2: the survivors' comm. */
static int rejoin(struct sfb_job *job, uint32_t lost)
{
    struct sfb__comm *c = job->comm;
    uint32_t rank = sfb__comm_rank(c), world = sfb__comm_world(c);
    uint32_t leader = lost == 0 ? 1 : 0;
    char rdv[80];
    snprintf(rdv, sizeof rdv, "%s", sfb__comm_elastic_addr(c, leader));
    sfb__comm_tell_lost(c, lost);
    SFB_LOG_I("rank %u died: going on as rank %u of %u (the survivors meet at %s)", lost,
              rank - (rank > lost), world - 1, rdv);
    int ret = reopen_comm(job, rank - (rank > lost), world - 1, rdv, -1);
    if (ret)
        return sfb__error(ret, "going on without rank %u: the survivors' rendezvous at %s "
                          "failed: %s", lost, rdv, sfb_error_message(ret));
    sfb__job_elastic_listen(job);
    return 0;
}

/* Every matrix of rank src to every rank (after the shapes' barrier). */
static int send_matrices(struct sfb_job *job, uint32_t src)
{
    int ret = 0;
    for (uint32_t m = 0; m < job->nmat && !ret && sfb__comm_world(job->comm) > 1; m++)
        ret = sfb__comm_broadcast(job->comm, src, job->mats[m].data,
                                  (size_t)job->mats[m].rows * job->mats[m].cols * sizeof(float));
    return ret ? sfb__comm_explain(job->comm, ret) : 0;
}

/* Step 3: the state every survivor goes on from. */
static int agree_state(struct sfb_job *job, int64_t applied, int64_t *next, uint32_t *source)
{
    uint32_t world = sfb__comm_world(job->comm);
    int64_t *all = calloc(world, sizeof *all);
    if (!all) return sfb__error(-ENOMEM, "sfb_job_shrink: out of memory");
    int ret = world > 1 ? sfb__comm_allgather(job->comm, &applied, sizeof applied, all) : 0;
    if (world == 1) all[0] = applied;
    uint32_t src = 0;
    for (uint32_t r = 1; r < world; r++)
        if (all[r] > all[src]) src = r;
    *source = src;
    *next = all[src] + 1;
    free(all);
    if (ret) return sfb__comm_explain(job->comm, ret);
    if ((ret = sfb__job_set_shapes(job))) return ret;
    return send_matrices(job, src);
}

/* The engine opened again at `clock` on a fresh SSP table of the comm's
 * world; `waited`: the wait for `clock` counts as done. */
static int restart_engine(struct sfb_job *job, int64_t clock, int waited)
{
    int ret = sfb__ssp_init(&job->ssp, sfb__comm_world(job->comm), 0, clock);
    if (ret) return ret;
    job->ssp_open = 1;
    job->env.comm = job->comm;
    job->env.ssp = &job->ssp;
    job->env.start_clock = clock;
    job->next = clock;
    job->waited = waited;
    job->ndone = 0;
    memset(job->done, 0, (job->nmat + 63) / 64 * sizeof *job->done);
    if (waited && (ret = sfb__ssp_record(&job->ssp, clock))) return ret;
    return sfb__job_open_engine(job);
}

int sfb_job_shrink(struct sfb_job *job, int64_t *next, uint32_t *source)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(next);
    SFB_ARG(source);
    int ret = need_elastic(job, __func__);
    if (ret) return ret;
    int lost = sfb__comm_lost(job->comm);
    if (lost < 0)
        return sfb__error(-SFB_EUSAGE, "sfb_job_shrink: no rank is lost (%s)",
                          sfb__comm_check(job->comm) ? sfb_last_error() : "the job is healthy");
    double t0 = sfb__now();
    int keep = keeps_matrices(job);
    int64_t applied = keep ? sfb__ssp_min_applied(&job->ssp) : -1;
    put_down(job, keep);
    *next = -1;
    *source = 0;
    ret = rejoin(job, (uint32_t)lost);
    if (!ret && keep) ret = agree_state(job, applied, next, source);
    if (!ret && keep) ret = restart_engine(job, *next, 0);
    if (ret) {
        sfb__comm_close(&job->comm);
        return ret;
    }
    SFB_LOG_I("going on without rank %d: %u workers from clock %lld, the replicas rank %u "
              "held (%.2f s)", lost, sfb__comm_world(job->comm), (long long)*next, *source,
              sfb__now() - t0);
    return 0;
}

/* ---- growing ---- */

void sfb__job_elastic_listen(struct sfb_job *job)
{
    const char *addr = getenv("SFB_JOIN");
    if (job->join_fd >= 0 || !addr || !*addr || sfb__comm_rank(job->comm) != 0) return;
    if (sfb__join_listen(addr, &job->join_fd))
        SFB_LOG_W("elastic job: no joiner can come in: %s", sfb_last_error());
}

void sfb__job_elastic_close(struct sfb_job *job)
{
    if (job->join_fd >= 0) close(job->join_fd);
    job->join_fd = -1;
    for (uint32_t i = 0; i < job->npending; i++) close(job->pending[i]);
    job->npending = 0;
}

/* Rank 0: the joiners waiting now whose key and text match, kept in
 * job->pending (the others refused). */
static void take_waiting(struct sfb_job *job, const char *text, const char *fn)
{
    uint32_t room = (uint32_t)(sizeof job->pending / sizeof job->pending[0]) - job->npending, n = 0;
    if (sfb__comm_rank(job->comm) == 0 && job->join_fd >= 0 && room &&
        sfb__join_accept(job->join_fd, sfb__comm_job_key(job->comm), text ? text : "",
                         job->pending + job->npending, room, &n))
        SFB_LOG_W("%s: %s", fn, sfb_last_error());
    job->npending += n;
}

int sfb_job_join_poll(struct sfb_job *job, const char *text, uint32_t *pending)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(pending);
    *pending = 0;
    int ret = need_elastic(job, __func__);
    if (ret) return ret;
    take_waiting(job, text, __func__);
    *pending = job->npending;
    return 0;
}

int sfb__job_elastic_open(struct sfb_job *job, struct sfb__comm_settings *cs,
                          const char *join_text)
{
    const char *joining = getenv("SFB_JOINING");
    if (!joining || strcmp(joining, "1") != 0) return 0;
    const char *addr = getenv("SFB_JOIN"), *ks = getenv("SFB_JOB_KEY");
    uint64_t key = 0;
    if (!addr || !*addr || !ks || sfb__bootstrap_parse_key(ks, &key))
        return sfb__error(-SFB_EUSAGE, "SFB_JOINING=1: joining a running job needs SFB_JOIN "
                          "(host:port of its join listener) and its SFB_JOB_KEY");
    double timeout = 600;
    const char *t = getenv("SFB_JOIN_TIMEOUT");
    if (t && *t && !(sscanf(t, "%lf", &timeout) == 1 && timeout > 0))
        return sfb__error(-SFB_EUSAGE, "SFB_JOIN_TIMEOUT=\"%s\": expected seconds > 0", t);
    uint32_t rank, world;
    char rdv[96];
    SFB_LOG_I("joining the running job at %s", addr);
    int ret = sfb__join_request(addr, key, join_text ? join_text : "", timeout, &rank, &world,
                                &job->join_clock, job->join_extra, rdv, sizeof rdv);
    if (ret) {
        job->join_clock = -1;
        return ret;
    }
    struct sfb__comm_settings c = *cs;
    c.rank = (int)rank;
    c.world = (int)world;
    c.rendezvous = rdv;
    c.job_key = ks;
    if ((ret = sfb__comm_open(&job->comm, &c))) return ret;
    job->join_attach_due = job->join_extra[0] != 0; /* 0: attach as everyone does */
    /* sfb launch --respawn's pipe: the launcher learns this copy is in */
    const char *jfd = getenv("SFB_JOINED_FD");
    int fd = jfd && *jfd ? atoi(jfd) : -1;
    if (fd > 2) {
        if (write(fd, "j", 1) != 1) SFB_LOG_D("SFB_JOINED_FD=%d: %s", fd, strerror(errno));
        close(fd);
    }
    unsetenv("SFB_JOINED_FD");
    SFB_LOG_I("joined as rank %u of %u, from clock %lld", rank, world,
              (long long)job->join_clock);
    return 0;
}

int sfb_job_joined(const struct sfb_job *job, int64_t *clock, uint32_t *max_s, uint64_t *value)
{
    if (!job || job->join_clock < 0) return 0;
    if (clock) *clock = job->join_clock;
    if (max_s) *max_s = (uint32_t)job->join_extra[0];
    if (value) *value = job->join_extra[1];
    return 1;
}

int sfb__job_joined_attach(struct sfb_job *job, const struct sfb_job_attach *a)
{
    if (a->start_clock != job->join_clock || a->max_s != job->join_extra[0])
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: a joined process attaches with "
                          "start_clock %lld and max_s %llu (sfb_job_joined), not %lld and %u",
                          (long long)job->join_clock, (unsigned long long)job->join_extra[0],
                          (long long)a->start_clock, a->max_s);
    /* the shapes' barrier was the grow's; now rank 0's matrices */
    return send_matrices(job, 0);
}

/* The joiners' rendezvous: a port reserved on SFB_JOIN's host (where every
 * rank and joiner reaches rank 0). */
static int reserve_on_join_host(char *rdv, size_t n, int *fd)
{
    char host[96];
    const char *addr = getenv("SFB_JOIN");
    snprintf(host, sizeof host, "%s", addr ? addr : "");
    char *colon = strrchr(host, ':');
    if (colon) *colon = '\0';
    return sfb__join_reserve(host, fd, rdv, n);
}

int sfb_job_grow(struct sfb_job *job, int64_t clock, const char *text, uint64_t value,
                 uint32_t *joined)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(joined);
    *joined = 0;
    int ret = need_elastic(job, __func__);
    if (ret) return ret;
    int keep = keeps_matrices(job);
    if (keep && (!job->waited || job->ndone || job->next != clock))
        return sfb__error(-SFB_EUSAGE, "sfb_job_grow: clock %lld: call it after waiting for the "
                          "clock and before publishing it", (long long)clock);
    uint32_t rank = sfb__comm_rank(job->comm), world = sfb__comm_world(job->comm);
    int *fds = job->pending; /* rank 0's joiners, taken in below (npending then 0) */
    struct {
        uint32_t n;
        char rdv[92];
    } plan = {0, ""};
    int rfd = -1;
    if (rank == 0 && job->join_fd >= 0) {
        /* those sfb_job_join_poll took in, then any waiting now */
        take_waiting(job, text, __func__);
        uint32_t n = job->npending;
        job->npending = 0; /* (their sockets are this call's to close) */
        if (n && reserve_on_join_host(plan.rdv, sizeof plan.rdv, &rfd)) {
            SFB_LOG_W("sfb_job_grow: %s", sfb_last_error());
            for (uint32_t i = 0; i < n; i++) close(fds[i]);
            n = 0;
        }
        plan.n = n;
    }
    if (world > 1) ret = sfb__comm_broadcast(job->comm, 0, &plan, sizeof plan);
    if (ret) {
        for (uint32_t i = 0; rank == 0 && i < plan.n; i++) close(fds[i]);
        if (rfd >= 0) close(rfd);
        return sfb__comm_explain(job->comm, ret);
    }
    if (!plan.n) {
        /* reattach matrices go either way: the caller attaches again (it
         * grows when its own count says joiners wait; one may be gone) */
        if (!keep) sfb__job_detach(job);
        return 0;
    }
    plan.rdv[sizeof plan.rdv - 1] = '\0';
    uint32_t grown = world + plan.n;
    /* max_s 0: the joiners attach as everyone does (nothing kept) */
    uint64_t extra[2] = {keep ? job->max_s : 0, value};
    for (uint32_t i = 0; rank == 0 && i < plan.n; i++) {
        if (sfb__join_assign(fds[i], sfb__comm_job_key(job->comm), world + i, grown, clock, extra,
                             plan.rdv))
            SFB_LOG_W("sfb_job_grow: telling joiner %u its place failed (it will not come, and "
                      "the rendezvous will name it)", i);
        close(fds[i]);
    }
    double t0 = sfb__now();
    SFB_LOG_I("clock %lld: %u process%s join%s: %u workers from now on (meeting at %s)",
              (long long)clock, plan.n, plan.n > 1 ? "es" : "", plan.n > 1 ? "" : "s", grown,
              plan.rdv);
    put_down(job, keep);
    ret = reopen_comm(job, rank, grown, plan.rdv, rfd);
    if (ret) ret = sfb__error(ret, "clock %lld: growing to %u workers: the rendezvous at %s "
                              "failed: %s", (long long)clock, grown, plan.rdv,
                              sfb_error_message(ret));
    if (!ret && keep) ret = sfb__job_set_shapes(job);
    if (!ret && keep) ret = send_matrices(job, 0);
    if (!ret && keep) ret = restart_engine(job, clock, 1);
    if (ret) {
        sfb__comm_close(&job->comm);
        return ret;
    }
    *joined = plan.n;
    SFB_LOG_I("clock %lld: %u workers (%.2f s)", (long long)clock, grown, sfb__now() - t0);
    return 0;
}
