/* Opening a comm context: bootstrap, the host and provider exchange, the
 * transport, the endpoint-name allgather, the progress thread and the
 * heartbeats. */
#include "config.h"
#include "src/transport/transport.h"
#include "src/comm/comm_impl.h"
#include "src/boot/agree.h"
#include "src/boot/bootstrap.h"
#include "src/base/fdlimit.h"
#include "src/base/util.h"
#include "src/base/timeline.h"
#include "src/loop/loop.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The provider a rank asks for: --provider, else FI_PROVIDER, else "" (the
 * transport then takes shm when every rank is on this host, else tcp). */
static const char *provider_request(const struct sfb__comm *c)
{
    const char *p = c->s.provider;
    if (!p || !*p) p = getenv("FI_PROVIDER");
    return p ? p : "";
}

/* The providers the ranks will use, as the transport resolves what each
 * asked for (nothing: shm when every rank is on this host, else tcp), must
 * agree. all/lens: the host exchange's records (host\0, pid, request). */
static int check_providers(const struct sfb__comm *c, const char *all, const size_t *lens,
                           int all_local)
{
    enum { STRIDE = 256 + 16 };
    char *buf = malloc((size_t)c->world * STRIDE);
    const char **texts = calloc(c->world, sizeof *texts);
    size_t *tlens = calloc(c->world, sizeof *tlens);
    int ret = 0;
    if (!buf || !texts || !tlens) {
        ret = sfb__error(-ENOMEM, "out of memory");
        goto out;
    }
    const char *p = all;
    for (uint32_t r = 0; r < c->world; p += lens[r], r++) {
        size_t h = strnlen(p, lens[r]) + 1 + sizeof(int), n = SFB_MIN(lens[r] - h, 255);
        char *t = buf + (size_t)r * STRIDE;
        tlens[r] = (size_t)snprintf(t, STRIDE, "provider=%.*s\n", n ? (int)n : 3,
                                    n ? p + h : all_local ? "shm" : "tcp");
        texts[r] = t;
    }
    char why[600];
    if (sfb__agree_verdict(texts, tlens, c->world, why, sizeof why))
        ret = sfb__error(-SFB_ECONFIG,
                         "settings differ between ranks: %s (every worker of a job needs the "
                         "same --provider or FI_PROVIDER)",
                         why);
out:
    free(buf);
    free(texts);
    free(tlens);
    return ret;
}

/* Which ranks share a host (c->host_of: the lowest rank on each rank's
 * host), from the allgathered host records (name, NUL, ...). Comparing each
 * name with the hosts seen so far only: O(P · hosts). */
static int note_hosts(struct sfb__comm *c, const char *all, const size_t *lens)
{
    const char **first = calloc(c->world, sizeof *first); /* name of each distinct host */
    uint32_t *first_rank = calloc(c->world, sizeof *first_rank);
    c->host_of = calloc(c->world, sizeof *c->host_of);
    if (!first || !first_rank || !c->host_of) {
        free(first);
        free(first_rank);
        return -ENOMEM;
    }
    uint32_t hosts = 0;
    const char *p = all;
    for (uint32_t r = 0; r < c->world; p += lens[r], r++) {
        uint32_t h = 0;
        while (h < hosts && strcmp(first[h], p) != 0) h++;
        if (h == hosts) {
            first[hosts] = p;
            first_rank[hosts++] = r;
        }
        c->host_of[r] = first_rank[h];
    }
    free(first);
    free(first_rank);
    return 0;
}

/* Every rank's host name, pid and requested provider: whether all share
 * this host (the shm provider's case), and then the pids, to tell which
 * peer died. The providers are compared here, before the transport would
 * fail on a mismatch with an address error naming nothing. `here`: the
 * ranks on this host; `index`: this rank's place among them (0: the first,
 * which sweeps /dev/shm). */
static int exchange_hosts(struct sfb__comm *c, int *all_local, uint32_t *here,
                          uint32_t *index)
{
    char mine[600] = {0};
    gethostname(mine, 256);
    size_t hlen = strlen(mine) + 1;
    int pid = (int)getpid();
    memcpy(mine + hlen, &pid, sizeof pid);
    size_t plen = strlen(provider_request(c));
    if (plen > 255) return sfb__error(-SFB_EUSAGE, "provider name of %zu bytes", plen);
    memcpy(mine + hlen + sizeof pid, provider_request(c), plen);
    void *all = NULL;
    size_t *lens = calloc(c->world, sizeof *lens);
    if (!lens) return -ENOMEM;
    int ret = sfb__bootstrap_allgatherv(c->bs, mine, hlen + sizeof pid + plen, &all, lens);
    *all_local = 0;
    *here = 1;
    *index = 0;
    if (ret == 0) {
        *all_local = 1;
        *here = 0;
        const char *p = all;
        for (uint32_t r = 0; r < c->world && !ret; p += lens[r], r++) {
            size_t h = strnlen(p, lens[r]) + 1;
            if (h + sizeof pid > lens[r])
                ret = sfb__error(-SFB_EFORMAT, "rank %u sent a malformed host record", r);
            else if (h != hlen || memcmp(p, mine, hlen) != 0)
                *all_local = 0;
            else {
                ++*here;
                if (r < c->rank) ++*index;
            }
        }
        if (!ret) ret = check_providers(c, all, lens, *all_local);
        if (!ret && !*all_local) ret = note_hosts(c, all, lens);
        c->live.gone_since =
            !ret && *all_local ? calloc(c->world, sizeof *c->live.gone_since) : NULL;
        if (c->live.gone_since && (c->live.peer_pid = calloc(c->world, sizeof *c->live.peer_pid))) {
            p = all;
            for (uint32_t r = 0; r < c->world; p += lens[r], r++)
                memcpy(&c->live.peer_pid[r], p + hlen, sizeof pid);
            sfb__comm_open_pidfds(c);
        }
    }
    free(all);
    free(lens);
    return ret;
}

static int exchange_names(struct sfb__comm *c)
{
    const void *name;
    size_t len;
    sfb__transport_name(c->t, &name, &len);
    void *all = NULL;
    size_t *lens = calloc(c->world, sizeof *lens);
    const void **names = calloc(c->world, sizeof *names);
    int ret = -ENOMEM;
    if (!lens || !names) goto out;
    if ((ret = sfb__bootstrap_allgatherv(c->bs, name, len, &all, lens))) goto out;
    const uint8_t *p = all;
    for (uint32_t r = 0; r < c->world; r++) {
        names[r] = p;
        p += lens[r];
    }
    ret = sfb__transport_set_peers(c->t, names, lens, c->world);
out:
    free(all);
    free(lens);
    free(names);
    return ret;
}

int sfb__comm_peers_alloc(struct sfb__comm *c)
{
    c->last_clock = -2;
    c->live.last_heard = calloc(c->world, sizeof *c->live.last_heard);
    c->live.said_bye = calloc(c->world, sizeof *c->live.said_bye);
    c->live.last_sent = calloc(c->world, sizeof *c->live.last_sent);
    c->live.talks = calloc(c->world, 1);
    c->final_clock = calloc(c->world, sizeof *c->final_clock);
    c->stall.peer_pub = calloc(c->world, sizeof *c->stall.peer_pub);
    c->stall.peer_pub_us = calloc(c->world, sizeof *c->stall.peer_pub_us);
    c->stall.arrived = calloc(c->world, sizeof *c->stall.arrived);
    c->stall.call_seq = calloc(c->world, sizeof *c->stall.call_seq);
    c->stall.call_what = calloc(c->world, sizeof *c->stall.call_what);
    c->stall.call_pub = calloc(c->world, sizeof *c->stall.call_pub);
    c->stall.call_label = calloc((size_t)c->world * 4, sizeof *c->stall.call_label);
    if (!c->live.last_heard || !c->live.said_bye || !c->final_clock || !c->live.last_sent ||
        !c->live.talks || !c->stall.peer_pub || !c->stall.peer_pub_us || !c->stall.arrived ||
        !c->stall.call_seq || !c->stall.call_what || !c->stall.call_pub || !c->stall.call_label)
        return -ENOMEM;
    atomic_init(&c->stall.published, -1);
    const char *drop = getenv("SFB_DEBUG_DROP_SF_AT");
    uint64_t at;
    if (drop && *drop) {
        int ret = sfb__parse_env_u64("SFB_DEBUG_DROP_SF_AT", drop, 0, c->world - 1, &at);
        if (ret) return ret;
        c->stall.debug_drop_sf = at == c->rank;
    }
    for (uint32_t p = 0; p < c->world; p++) {
        atomic_init(&c->final_clock[p], INT64_MAX);
        atomic_init(&c->stall.peer_pub[p], -1);
        atomic_init(&c->stall.arrived[p], INT64_MIN);
        atomic_init(&c->stall.call_seq[p], 0);
        atomic_init(&c->stall.call_what[p], 0);
        atomic_init(&c->stall.call_pub[p], INT64_MAX);
        for (int w = 0; w < 4; w++) atomic_init(&c->stall.call_label[4 * p + w], 0);
    }
    return 0;
}

/* The heartbeat's tick (loop thread): liveness, then this rank's
 * collective call told to the peers once it has lasted (comm_stall.c). */
static void beat(void *arg)
{
    sfb__comm_heartbeat(arg);
    sfb__comm_tell_call(arg, sfb__now());
}

/* Bootstrap, this rank's place in the job, and the frame checks' job. */
static int open_job(struct sfb__comm *c, const struct sfb__comm_settings *s)
{
    struct sfb__bootstrap_settings bss;
    sfb__bootstrap_default_settings(&bss);
    bss.timeout_s = s->bootstrap_timeout_s;
    bss.connect_timeout_s = s->bootstrap_timeout_s;
    bss.rank = s->rank;
    bss.world = s->world;
    bss.rendezvous = s->rendezvous;
    bss.job_key = s->job_key;
    int ret = sfb__bootstrap_open(&c->bs, &bss);
    if (ret) return ret;
    sfb__phase_mark(SFB__PH_BOOT);
    c->rank = (uint32_t)sfb__bootstrap_rank(c->bs);
    c->world = (uint32_t)sfb__bootstrap_size(c->bs);
    c->job_key = sfb__bootstrap_job_key(c->bs);
    sfb_log_set_rank((int)c->rank);
    c->job = (struct sfb__wire_job){
        .job_key = c->job_key,
        .world_size = c->world,
        .max_s = s->max_s,
        .max_payload = (uint64_t)1 << 32,
        .stats = &c->wstats,
    };
    return sfb__comm_copy_shapes(c, s->shapes, s->nshapes);
}

/* The progress thread and the libfabric transport (shm when every rank is
 * on this host, unless asked otherwise). */
static int open_transport(struct sfb__comm *c, const struct sfb__comm_settings *s, int all_local,
                          int first_on_host, uint32_t here)
{
    int ret = sfb__loop_open(&c->loop);
    if (ret) return ret;
    struct sfb__transport_settings ts;
    sfb__transport_default_settings(&ts);
    ts.provider = s->provider;
    ts.all_local = all_local;
    ts.skip_shm_sweep = !first_on_host;
    ts.rank = c->rank;
    ts.world = c->world;
    ts.job_key = c->job_key;
    ts.local_ranks = here;
    ts.cpus = c->cpus;
    ts.progress = s->progress;
    ts.on_frame = sfb__comm_on_frame;
    ts.on_error = sfb__comm_on_error;
    ts.on_sent = sfb__comm_sent_hook;
    ts.on_pass = sfb__comm_pass_hook;
    ts.peer_gone = c->live.peer_pid ? sfb__comm_peer_gone : NULL;
    ts.user = c;
    sfb__clear_error(); /* so `why` below cannot be an older message */
    if ((ret = sfb__transport_open(&c->t, &ts, c->loop))) {
        char why[600]; /* the transport's own message (a provider that is missing, say) */
        snprintf(why, sizeof why, "%s", sfb_error_message(ret));
        return sfb__error(ret, "cannot open the libfabric transport (provider %s): %s",
                          s->provider ? s->provider
                                      : (getenv("FI_PROVIDER") ? getenv("FI_PROVIDER")
                                                               : all_local ? "shm" : "tcp"),
                          why);
    }
    sfb__phase_mark(SFB__PH_FABRIC);
    c->ops = &sfb__comm_fabric_ops;
    return 0;
}

/* Where this rank's threads run (comm.h, enum sfb__cpu_bind): before the
 * loop thread exists, so it inherits the binding. auto binds when the host
 * runs more ranks than the process may use CPUs: then each rank of the
 * host gets CPU `index` mod n of the n allowed (the launcher's binding
 * narrows them), which spares the ranks migrations and keeps a rank's two
 * threads on one core (P = 64 halton on 2 CPUs: ~15 % less per clock,
 * docs/performance.md). A failed bind leaves the placement as it was. */
static void bind_cpu(struct sfb__comm *c, enum sfb__cpu_bind how, uint32_t here, uint32_t index)
{
    cpu_set_t allowed, one;
    c->cpus = 1;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 1) return;
    uint32_t n = (uint32_t)CPU_COUNT(&allowed), k = index % n;
    c->cpus = n;
    if (how == SFB__CPU_BIND_NONE || (how == SFB__CPU_BIND_AUTO && here <= n)) return;
    CPU_ZERO(&one);
    int cpu = 0;
    for (uint32_t seen = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &allowed) && seen++ == k) break;
    if (cpu >= CPU_SETSIZE) return;
    CPU_SET(cpu, &one);
    /* every thread of the process: the ones started before (the watchdog,
     * libraries' helpers) too, and the caller's, whose affinity the loop
     * thread will inherit */
    int rc = sched_setaffinity(0, sizeof one, &one);
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; !rc && d && (e = readdir(d));) {
        long tid = strtol(e->d_name, NULL, 10);
        if (tid > 0) sched_setaffinity((pid_t)tid, sizeof one, &one); /* one that exited: gone */
    }
    if (d) closedir(d);
    if (rc)
        SFB_LOG_W("comm: rank %u: cannot bind to CPU %d: %s", c->rank, cpu, strerror(errno));
    else
        SFB_LOG_D("comm: rank %u bound to CPU %d (%u ranks on this host, %u CPUs allowed)",
                  c->rank, cpu, here, n);
}

/* World > 1: peers' hosts, the transport, the endpoint names, the progress
 * thread, the barrier that has every endpoint up, and the heartbeats. */
static int open_peers(struct sfb__comm *c, const struct sfb__comm_settings *s)
{
    int ret = sfb__comm_peers_alloc(c);
    if (ret) return ret;
    int all_local = 0;
    uint32_t here = 1, index = 0;
    if ((ret = exchange_hosts(c, &all_local, &here, &index))) return ret;
    if (s->elastic && (ret = sfb__comm_elastic_open(c))) return ret;
    c->local_ranks = here;
    bind_cpu(c, s->cpu_bind, here, index);
    sfb__phase_mark(SFB__PH_HOSTS);
    /* the env rendezvous raised it before it began (boot_env.c); PMIx not */
    sfb__fd_limit_raise(c->world, c->rank == 0);
    if ((ret = open_transport(c, s, all_local, index == 0, here))) return ret;
    if ((ret = exchange_names(c))) return ret;
    sfb__phase_mark(SFB__PH_NAMES);
    c->live.silence_s = sfb__comm_silence_timeout(c, here);
    sfb__comm_reset_heard(c);
    if ((ret = sfb__loop_start(c->loop))) return ret;
    /* Everyone's endpoint is up and addressed before the first data frame. */
    if ((ret = sfb__bootstrap_barrier(c->bs))) return ret;
    sfb__transport_started(c->t);
    sfb__phase_mark(SFB__PH_READY);
    sfb__loop_call(c->loop, sfb__comm_reset_heard, c);
    if ((ret = sfb__loop_timer_open(c->loop, &c->live.hb, s->heartbeat_s, s->heartbeat_s,
                                    beat, c)))
        return ret;
    if ((ret = sfb__comm_watch_deaths(c))) return ret;
    if ((ret = sfb__comm_watch_start(c))) return ret;
    if ((ret = sfb__comm_budget_open(c))) return ret;
    SFB_LOG_I("rank %u of %u up (bootstrap %s, provider %s)", c->rank, c->world,
              sfb__bootstrap_kind_name(sfb__bootstrap_kind(c->bs)),
              sfb__transport_provider(c->t));
    return 0;
}

int sfb__comm_open(struct sfb__comm **out, const struct sfb__comm_settings *s)
{
    *out = NULL;
    struct sfb__comm *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->live.deaths_fd = -1;
    c->elastic.fd = -1;
    c->s = *s;
    int ret = open_job(c, s);
    if (!ret && c->world > 1)
        ret = open_peers(c, s);
    else if (!ret && *provider_request(c))
        SFB_LOG_I("one worker: no transport is opened, so provider %s is not used (nor "
                  "checked)", provider_request(c));
    if (ret) {
        sfb__comm_close(&c);
        return ret;
    }
    *out = c;
    return 0;
}
