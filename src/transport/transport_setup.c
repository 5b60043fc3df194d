/* libfabric transport: opening the fabric, domain, endpoint and CQ, the
 * progress policy, this rank's name, and closing. The protocol and the split
 * into files: src/transport/transport_impl.h. */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/loop/bell.h"
#include "src/base/util.h"
#include "src/loop/loop.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static int open_cq(struct sfb__transport *t)
{
    t->max_ops = t->s.rx_depth + 2048;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD,
                            .size = t->max_ops + 64};
    t->wait_fd = -1;
    if (fi_cq_open(t->domain, &ca, &t->cq, NULL) == 0) {
        int fd = -1;
        struct fid *f = &t->cq->fid;
        /* shm accepts the attribute but cannot wait (-FI_ENOSYS): poll it. */
        if (fi_control(&t->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0 &&
            fi_trywait(t->fabric, &f, 1) != -FI_ENOSYS) {
            t->wait_fd = fd;
            return 0;
        }
        fi_close(&t->cq->fid);
        t->cq = NULL;
    }
    ca.wait_obj = FI_WAIT_NONE;
    int rc = fi_cq_open(t->domain, &ca, &t->cq, NULL);
    return rc ? sfb__error(rc, "transport: fi_cq_open: %s", fi_strerror(-rc)) : 0;
}

/* shm found nothing: when /dev/shm is what is missing, the error says so
 * (how big it is, how much is free, what the provider and the job need)
 * instead of "not available". 0 when /dev/shm has the room. */
static int shm_too_small(void)
{
    struct statvfs st;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (statvfs("/dev/shm", &st) != 0 || cpus < 1) return 0;
    double mib = 1024.0 * 1024.0;
    double avail = (double)st.f_bsize * (double)st.f_bavail / mib;
    double total = (double)st.f_frsize * (double)st.f_blocks / mib;
    double need = (double)cpus * SHM_REGION_MIB;
    if (avail >= need) return 0;
    return sfb__error(-FI_ENOSPC, "transport: /dev/shm has %.1f MiB free of %.1f MiB, too little "
                      "for libfabric's shm provider: it starts only with room for one %u MiB "
                      "region per CPU (%ld CPUs: %.0f MiB), and every rank of the job on this "
                      "host maps one; make /dev/shm larger (docker run --shm-size=1g, mount -o "
                      "remount,size=1G /dev/shm) or use --provider tcp",
                      avail, total, SHM_REGION_MIB, cpus, need);
}

/* fi_getinfo found nothing for provider `prov`: say so in words, with the
 * providers that do offer what we need on this host (fi_strerror alone says
 * "No data available"). Takes the hints of the failed query. */
static int provider_missing(struct fi_info *hints, const char *prov)
{
    int small = strcmp(prov, "shm") ? 0 : shm_too_small();
    if (small) return small;
    free(hints->fabric_attr->prov_name);
    hints->fabric_attr->prov_name = NULL;
    hints->caps = FI_TAGGED;
    struct fi_info *all = NULL;
    char list[512] = "";
    size_t n = 0;
    if (fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &all) == 0) {
        for (struct fi_info *i = all; i; i = i->next) {
            const char *name = i->fabric_attr->prov_name;
            if (!name) continue;
            int seen = 0;
            for (struct fi_info *j = all; j != i && !seen; j = j->next)
                seen = j->fabric_attr->prov_name && !strcmp(j->fabric_attr->prov_name, name);
            if (seen) continue;
            int w = snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", name);
            if (w < 0 || (size_t)w >= sizeof list - n) break;
            n += (size_t)w;
        }
        fi_freeinfo(all);
    }
    return sfb__error(-FI_ENODATA, "transport: libfabric provider \"%s\" is not available on "
                      "this host (providers with tagged RDM endpoints here: %s); choose one "
                      "with --provider or FI_PROVIDER", prov, n ? list : "none");
}

static int name_and_slab(struct sfb__transport *t);

/* One connection per direction between two ranks: a second endpoint takes
 * this rank's receives and reads, peers send to it, and this rank's reads
 * of a peer's frame go to the peer's sending endpoint. Wanted on tcp: its
 * endpoints (libfabric 1.17, tcp;ofi_rxm) send answers to reads ahead of
 * everything else queued on the connection, reads included, so on one
 * connection carrying big frames both ways, a rank's reads wait until the
 * peer has read all it asked for: the directions take turns (bench_transport
 * --mode duplex: 480 KB frames at half the one-way rate). Apart, a read goes
 * on a connection whose far end sends nothing else back. shm never (its
 * name is set per job, and reads are CMA copies); SFB_TRANSPORT_SPLIT=0 / 1
 * forces it off / on elsewhere. */
/* A switch the environment may force: "0" off, any other non-empty value
 * on, unset or empty: `dflt`. */
static int env_switch(const char *name, int dflt)
{
    const char *env = getenv(name);
    return env && *env ? strcmp(env, "0") != 0 : dflt;
}

static int want_split(const struct sfb__transport *t)
{
    if (!strcmp(t->prov_name, "shm")) return 0;
    return env_switch("SFB_TRANSPORT_SPLIT", !strncmp(t->prov_name, "tcp", 3));
}

/* An endpoint's name into t->name at `off` (NULL: its length). */
static int ep_name(struct sfb__transport *t, struct fid_ep *ep, size_t off, size_t *len)
{
    int rc = fi_getname(&ep->fid, t->name ? t->name + off : NULL, len);
    if (rc && !(rc == -FI_ETOOSMALL && !t->name))
        return sfb__error(rc, "transport: fi_getname: %s", fi_strerror(-rc));
    return 0;
}

/* fi_getinfo for the chosen provider (RMA reads when it has them). */
static int get_info(struct sfb__transport *t)
{
    const char *prov = t->s.provider;
    if (!prov || !*prov) prov = getenv("FI_PROVIDER");
    if (!prov || !*prov) prov = t->s.all_local ? "shm" : "tcp";
    struct fi_info *hints = fi_allocinfo();
    if (!hints) return -ENOMEM;
    /* RMA reads carry big frames (transport_tx.c) wherever the provider
     * offers them: one read per frame beat overlapping 256 KiB chunks on shm
     * (CMA) and, with the loop polling while busy, on tcp;ofi_rxm at >= 4 MiB
     * (docs/performance.md). SFB_TRANSPORT_RMA=0 / 1 forces it off / on. */
    int want_rma = env_switch("SFB_TRANSPORT_RMA", 1);
    hints->caps = FI_TAGGED | (want_rma ? FI_RMA | FI_READ | FI_REMOTE_READ : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->fabric_attr->prov_name = strdup(prov);
    /* A socket-based provider picks an interface by itself; when every rank
     * is on this host, bind loopback: other interfaces may come and go (test
     * namespaces, VPNs) and are of no use here. FI_TCP_IFACE still wins. */
    const char *node = NULL;
    uint64_t flags = 0;
    if (t->s.all_local && !getenv("FI_TCP_IFACE") &&
        (!strncmp(prov, "tcp", 3) || !strncmp(prov, "udp", 3) || !strcmp(prov, "sockets"))) {
        node = "127.0.0.1";
        flags = FI_SOURCE;
    }
    int rc = fi_getinfo(FI_VERSION(1, 9), node, NULL, flags, hints, &t->info);
    if (rc && want_rma) {
        hints->caps = FI_TAGGED;
        rc = fi_getinfo(FI_VERSION(1, 9), node, NULL, flags, hints, &t->info);
    }
    if (rc == -FI_ENODATA) {
        rc = provider_missing(hints, prov);
        fi_freeinfo(hints);
        return rc;
    }
    fi_freeinfo(hints);
    if (rc) return sfb__error(rc, "transport: no FI_EP_RDM tagged provider \"%s\": %s", prov,
                              fi_strerror(-rc));
    return 0;
}

static int open_endpoints(struct sfb__transport *t);

/* The provider's fabric, domain, address vector, queue and endpoints; the
 * signal handlers libfabric installs meanwhile are not a forked child's
 * (transport_shm.c). */
static int open_fabric(struct sfb__transport *t)
{
    struct sfb__tp_sigs sigs;
    sfb__tp_shm_signals_before(&sigs);
    int rc = open_endpoints(t);
    sfb__tp_shm_signals_opened(&sigs);
    return rc;
}

static int open_endpoints(struct sfb__transport *t)
{
    int rc = get_info(t);
    if (rc) return rc;
    struct fi_info *fi = t->info;
    snprintf(t->prov_name, sizeof t->prov_name, "%s", fi->fabric_attr->prov_name);
    if (fi->tx_attr->iov_limit < 2)
        return sfb__error(-FI_ENOSYS, "transport: provider %s has iov_limit %zu (need 2)",
                          t->prov_name, fi->tx_attr->iov_limit);
    t->mr_local = (fi->domain_attr->mr_mode & FI_MR_LOCAL) || (fi->mode & FI_LOCAL_MR);
    t->rma = (fi->caps & FI_RMA) && (fi->caps & FI_READ) && (fi->caps & FI_REMOTE_READ) &&
             !(fi->domain_attr->mr_mode & (FI_MR_ENDPOINT | FI_MR_RAW));
    t->mr_virt_addr = !!(fi->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_BASIC));
    /* Remote CQ data carries a WHOLE message's header (transport_tx.c)
     * where the provider has 8 bytes of it (shm, tcp;ofi_rxm); receivers
     * take either form. SFB_TRANSPORT_CQ_DATA=0 keeps it in the message. */
    t->cq_data = fi->domain_attr->cq_data_size >= 8 && env_switch("SFB_TRANSPORT_CQ_DATA", 1);
    size_t maxmsg = fi->ep_attr->max_msg_size;
    t->chunk = SFB_MIN(t->s.chunk_size, maxmsg);
    if (t->chunk < 4096)
        return sfb__error(-FI_ENOSYS, "transport: provider %s: max_msg_size %zu too small",
                          t->prov_name, maxmsg);
    if ((rc = fi_fabric(fi->fabric_attr, &t->fabric, NULL)))
        return sfb__error(rc, "transport: fi_fabric(%s): %s", t->prov_name, fi_strerror(-rc));
    if ((rc = fi_domain(t->fabric, fi, &t->domain, NULL)))
        return sfb__error(rc, "transport: fi_domain(%s): %s", t->prov_name, fi_strerror(-rc));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    if ((rc = fi_av_open(t->domain, &aa, &t->av, NULL)))
        return sfb__error(rc, "transport: fi_av_open: %s", fi_strerror(-rc));
    if ((rc = open_cq(t))) return rc;
    if ((rc = fi_endpoint(t->domain, fi, &t->ep, NULL)))
        return sfb__error(rc, "transport: fi_endpoint: %s", fi_strerror(-rc));
    if (!strcmp(t->prov_name, "shm") && (rc = sfb__tp_shm_name(t))) return rc;
    if ((rc = fi_ep_bind(t->ep, &t->av->fid, 0)) ||
        (rc = fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(t->ep)))
        return sfb__error(rc, "transport: endpoint setup: %s", fi_strerror(-rc));
    t->rx_ep = t->ep;
    if ((t->split = want_split(t))) {
        if ((rc = fi_endpoint(t->domain, fi, &t->rx_ep, NULL)) ||
            (rc = fi_ep_bind(t->rx_ep, &t->av->fid, 0)) ||
            (rc = fi_ep_bind(t->rx_ep, &t->cq->fid, FI_TRANSMIT | FI_RECV)) ||
            (rc = fi_enable(t->rx_ep)))
            return sfb__error(rc, "transport: receiving endpoint setup: %s", fi_strerror(-rc));
    }
    return name_and_slab(t);
}

/* The endpoint's address, and the send-request slab's registration where
 * the provider wants local buffers registered. */
static int name_and_slab(struct sfb__transport *t)
{
    /* [count][rx_ep's name][ep's name if split] (sfb__transport_set_peers) */
    size_t len = 0, len2 = 0;
    int rc = ep_name(t, t->rx_ep, 1, &len);
    if (!rc && t->split) rc = ep_name(t, t->ep, 1 + len, &len2);
    if (rc) return rc;
    if (t->split && len2 != len)
        return sfb__error(-FI_EINVAL, "transport: endpoint names of %zu and %zu bytes", len, len2);
    if (!(t->name = calloc(1, 1 + 2 * len))) return -ENOMEM;
    t->name[0] = (uint8_t)(t->split ? 2 : 1);
    if ((rc = ep_name(t, t->rx_ep, 1, &len)) || (t->split && (rc = ep_name(t, t->ep, 1 + len, &len))))
        return rc;
    t->name_len = 1 + (size_t)t->name[0] * len;
    if (t->mr_local) {
        size_t n = (size_t)t->s.max_sends * sizeof(struct sreq);
        if ((rc = fi_mr_reg(t->domain, t->sreqs, n, FI_SEND, 0, t->mr_key++, 0, &t->slab_mr, NULL)))
            return sfb__error(rc, "transport: fi_mr_reg: %s", fi_strerror(-rc));
        t->slab_desc = fi_mr_desc(t->slab_mr);
    }
    return 0;
}

/* The progress policy (settings.progress; auto: block when this host runs
 * more ranks than this process has CPUs, for then a spinning loop thread
 * takes the core the rank it waits for needs), and in block mode without a
 * CQ wait fd, the doorbell. A doorbell that cannot be bound leaves the
 * rank napping poll_interval_s instead: slower, never stuck. */
static void choose_progress(struct sfb__transport *t)
{
    unsigned cpus = t->s.cpus ? t->s.cpus : sfb__cpus_allowed();
    int oversubscribed = t->s.local_ranks > cpus;
    t->block = t->s.progress == SFB__PROGRESS_BLOCK ||
               (t->s.progress == SFB__PROGRESS_AUTO && oversubscribed);
    if (t->block && t->wait_fd < 0 && t->s.world > 1 && t->s.job_key) {
        int rc = sfb__bell_open(&t->bell, t->s.job_key, t->s.rank, t->s.world);
        t->bell_armed = 1;
        if (rc)
            SFB_LOG_W("transport: no doorbell (%s): rank %u naps %.1f ms when idle",
                      sfb_error_message(rc), t->s.rank, 1e3 * t->s.poll_interval_s);
    }
    /* Progress in the caller (transport.c, "Who drives progress") where
     * every thread has a core; an oversubscribed host keeps every fabric
     * call in the loop thread, as before it (once in CI, 4 ranks bound two
     * to a core had a caller and a peer's thread each inside a shm call for
     * 10 s; not understood, not reproduced in 22 runs here).
     * SFB_CALLER_PROGRESS=0|1 decides instead. */
    const char *cp = getenv("SFB_CALLER_PROGRESS");
    t->caller_progress = cp && *cp ? strcmp(cp, "0") != 0 : !t->block;
    sfb__loop_admit(t->loop, t->caller_progress);
    /* A receiver waits its turn for a CPU too: the ACK of an RMA frame may
     * take as much longer as there are more ranks than CPUs. */
    if (oversubscribed) t->s.ack_timeout_s *= (double)t->s.local_ranks / cpus;
    SFB_LOG_D("transport: progress %s%s (%u ranks on this host, %u CPUs)",
              t->block ? "block" : "spin", t->caller_progress ? ", in the caller" : "",
              t->s.local_ranks, cpus);
}

/* Loads and probes every provider built in (the verbs provider reads
 * /proc/kallsyms twice, ~70 ms of kernel CPU); a forked worker inherits
 * it. Starts no thread and opens no fabric. */
void sfb__transport_preinit(void)
{
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    if (!hints) return;
    hints->fabric_attr->prov_name = strdup("shm");
    hints->ep_attr->type = FI_EP_RDM;
    double t = sfb__now();
    if (fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info) == 0) fi_freeinfo(info);
    fi_freeinfo(hints);
    SFB_LOG_D("transport: libfabric initialised in %.3f s", sfb__now() - t);
}

int sfb__transport_open(struct sfb__transport **out, const struct sfb__transport_settings *s,
                        struct sfb__loop *loop)
{
    *out = NULL;
    struct sfb__transport *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    t->s = *s;
    t->loop = loop;
    t->wait_fd = -1;
    const char *stall = getenv("SFB_DEBUG_STALL_SEND_TO_DEAD"); /* tests: transport_stuck.c */
    t->stuck.debug_stall = stall && *stall && strcmp(stall, "0") != 0;
    if (!t->s.chunk_size) t->s.chunk_size = 256 << 10;
    if (!t->s.max_frame) t->s.max_frame = (size_t)1 << 30;
    if (!t->s.rx_depth) t->s.rx_depth = 32;
    if (!t->s.inbox_cap) t->s.inbox_cap = 1024;
    if (!t->s.max_sends) t->s.max_sends = 1024;
    if (t->s.chunk_size < 4096) t->s.chunk_size = 4096;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->bufs.pool_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv_space, &ca);
    pthread_cond_init(&t->cv_flush, &ca);
    pthread_condattr_destroy(&ca);
    int rc;
    if (s->rank >= SFB__TRANSPORT_MAX_RANKS) {
        rc = sfb__error(-EINVAL, "transport: rank %u too large", s->rank);
        goto fail;
    }
    if (!(s->ack_timeout_s > 0) || !s->read_window) {
        rc = sfb__error(-EINVAL, "transport: ack_timeout_s %g and read_window %zu must be > 0",
                        s->ack_timeout_s, s->read_window);
        goto fail;
    }
    t->sreqs = calloc(t->s.max_sends, sizeof *t->sreqs);
    t->inbox = calloc(t->s.inbox_cap, sizeof *t->inbox);
    if (!t->sreqs || !t->inbox) {
        rc = -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < t->s.max_sends; i++) {
        t->sreqs[i].next = t->free_sreq;
        t->free_sreq = &t->sreqs[i];
    }
    if ((rc = open_fabric(t))) goto fail;
    /* Nothing runs in the loop for this transport yet: post from here. */
    for (unsigned i = 0; i < t->s.rx_depth; i++)
        if (sfb__tp_post_wildcard(t)) t->rx_deficit++;
    t->last_work = sfb__now();
    if ((rc = sfb__loop_async_open(loop, &t->async, sfb__tp_on_async, t))) goto fail;
    choose_progress(t);
    int fd = t->bell ? sfb__bell_fd(t->bell) : t->wait_fd;
    if ((rc = sfb__loop_poller_open(loop, &t->poller, fd, t->s.poll_interval_s, sfb__tp_progress, t)))
        goto fail;
    if (t->bell) sfb__loop_poller_sleep_max(t->poller, BELL_SLEEP_MAX_S);
    /* While a caller drives progress the loop thread looks in once a
     * drive's length (spin_s; transport.c, "Who drives progress"): a drive
     * that ends empty-handed wakes it at once, one that ends with its frame
     * leaves it the rest of the nap. Every 0.5 ms instead cost 4 ranks on 2
     * cores a futex round trip per wake-up against the driving caller. */
    sfb__loop_poller_away_max(t->poller, SFB_MAX(t->s.spin_s, t->s.poll_interval_s));
    SFB_LOG_D("transport: rank %u on %s (%s CQ, %s progress, chunk %zu, mr_local %d, rma %d, "
              "%s)", s->rank, t->prov_name, t->wait_fd >= 0 ? "fd" : t->bell ? "doorbell" : "polled",
              t->block ? "blocking" : "polling", t->chunk, t->mr_local, t->rma,
              t->split ? "a connection per direction" : "one endpoint");
    *out = t;
    return 0;
fail:
    sfb__transport_close(&t);
    return rc;
}

void sfb__transport_name(const struct sfb__transport *t, const void **name, size_t *len)
{
    *name = t->name;
    *len = t->name_len;
}

const char *sfb__transport_provider(const struct sfb__transport *t)
{
    return t->prov_name;
}

size_t sfb__transport_copy_max(const struct sfb__transport *t)
{
    size_t inject = t->info ? t->info->tx_attr->inject_size : 0;
    return strcmp(t->prov_name, "shm") == 0 && inject > THDR_LEN ? inject - THDR_LEN : 0;
}

void sfb__transport_started(struct sfb__transport *t)
{
    sfb__bell_unlink(t->bell);
}

const struct sfb__transport_stats *sfb__transport_stats(const struct sfb__transport *t)
{
    return &t->stats;
}

static void close_fid(struct fid *f, const char *what)
{
    int rc = fi_close(f);
    if (rc) SFB_LOG_W("transport: closing %s: %s", what, fi_strerror(-rc));
}

/* Releases the buffers the transport still references (receives, reads,
 * reassemblies, unsent requests, the inbox) and frees its pools. */
static void release_buffers(struct sfb__transport *t)
{
    for (struct slab *sl = t->bufs.op_slabs; sl; sl = sl->next) {
        struct op *ops = (struct op *)(sl + 1);
        for (int i = 0; i < 256; i++)
            if (ops[i].in_use && (ops[i].kind == OP_RECV || ops[i].kind == OP_READ))
                sfb__buf_put(ops[i].rbuf);
    }
    while (t->rd_head) {
        struct sfb__buf *b = t->rd_head;
        t->rd_head = b->next;
        sfb__buf_put(b);
    }
    for (struct asm_rec *a = t->active; a; a = a->next) {
        if (a->buf) sfb__buf_put(a->buf);
        while (a->stash) {
            struct sfb__buf *b = a->stash;
            a->stash = b->next;
            sfb__buf_put(b);
        }
    }
    if (t->sreqs)
        for (unsigned i = 0; i < t->s.max_sends; i++)
            if (t->sreqs[i].in_use && t->sreqs[i].buf) sfb__buf_put(t->sreqs[i].buf);
    while (t->ovf_head) {
        struct sfb__buf *b = t->ovf_head;
        t->ovf_head = b->next;
        sfb__buf_put(b);
    }
    for (unsigned i = 0; i < t->in_count; i++)
        sfb__buf_put(t->inbox[(t->in_head + i) % t->s.inbox_cap].buf);
    for (int c = 0; c < NCLASS; c++)
        while (t->bufs.pool[c]) {
            struct sfb__buf *b = t->bufs.pool[c];
            t->bufs.pool[c] = b->next;
            sfb__tp_buf_free(b);
        }
}

void sfb__transport_close(struct sfb__transport **tp)
{

    struct sfb__transport *t = *tp;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->closing = 1;
    pthread_cond_broadcast(&t->cv_space);
    pthread_mutex_unlock(&t->mu);
    if (sfb__transport_abandoned(t)) { /* the parked thread holds it all */
        /* only the names go: the mappings stay, and no peer is left to
         * connect (fi_close would have unlinked the region) */
        sfb__bell_unlink(t->bell);
        if (t->shm_name[0]) {
            char path[160];
            snprintf(path, sizeof path, "/dev/shm/%s", t->shm_name);
            unlink(path);
        }
        sfb__tp_keep_abandoned(t);
        *tp = NULL;
        return;
    }
    sfb__tp_shm_settle(t); /* the loop still posts what is queued */
    /* After these the loop never runs transport code again. */
    sfb__loop_poller_close(&t->poller);
    sfb__loop_async_close(&t->async);
    /* a job that failed before every rank was up (the barrier) has not
     * unlinked the doorbells' segment yet: none is left in /dev/shm */
    sfb__bell_unlink(t->bell);
    sfb__bell_close(&t->bell);
    if (t->rx_ep && t->rx_ep != t->ep) close_fid(&t->rx_ep->fid, "receiving endpoint");
    if (t->ep) close_fid(&t->ep->fid, "endpoint");
    if (t->av) close_fid(&t->av->fid, "address vector");
    if (t->cq) close_fid(&t->cq->fid, "completion queue");
    release_buffers(t);
    long live = atomic_load(&t->bufs.bufs_live);
    if (live) SFB_LOG_W("transport: %ld buffers still held by the caller at close", live);
    if (t->slab_mr) close_fid(&t->slab_mr->fid, "memory region");
    for (struct slab *sl = t->bufs.op_slabs; sl; sl = sl->next)
        if (sl->mr) close_fid(&sl->mr->fid, "memory region");
    if (t->domain) close_fid(&t->domain->fid, "domain");
    if (t->fabric) close_fid(&t->fabric->fid, "fabric");
    if (t->info) fi_freeinfo(t->info);
    while (t->bufs.op_slabs) {
        struct slab *sl = t->bufs.op_slabs;
        t->bufs.op_slabs = sl->next;
        free(sl);
    }
    while (t->bufs.asm_slabs) {
        struct slab *sl = t->bufs.asm_slabs;
        t->bufs.asm_slabs = sl->next;
        free(sl);
    }
    free(t->sreqs);
    free(t->inbox);
    free(t->peers.seq);
    free(t->peers.heard);
    free(t->peers.contact);
    free(t->peers.addr);
    free(t->peers.name_off);
    free(t->peers.names);
    free(t->name);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->bufs.pool_mu);
    pthread_cond_destroy(&t->cv_space);
    pthread_cond_destroy(&t->cv_flush);
    free(t);
    *tp = NULL;
}
