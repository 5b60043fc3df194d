/* libfabric transport: the peers. Their address blobs (set once), each put
 * into the AV at first use (sfb__tp_addr), the doorbell rung for a peer,
 * and errors reported naming a peer. Below the rest of the transport:
 * setup, progress, receiving and sending all call here. The protocol and
 * the split into files: src/transport/transport_impl.h. */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/loop/bell.h"
#include "src/base/util.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>

void sfb__tp_error_text(char *buf, size_t n, int peer, const char *prov, int code,
                        const char *what, const char *detail)
{
    const char *said = fi_strerror(code < 0 ? -code : code);
    char who[32] = "";
    if (peer >= 0) snprintf(who, sizeof who, "peer rank %d, ", peer);
    /* shm's fi_cq_strerror of a dead peer's receive is strerror(EIO), the
     * code's own text: said once */
    int more = detail && *detail && strcasecmp(detail, said);
    snprintf(buf, n, "%s (%sprovider %s): %s%s%s", what, who, prov, said, more ? ": " : "",
             more ? detail : "");
}

void sfb__tp_report(struct sfb__transport *t, int peer, int code, const char *what, const char *detail)
{
    stat_add(&t->stats.errors, 1);
    char msg[512];
    sfb__tp_error_text(msg, sizeof msg, peer, t->prov_name, code, what, detail);
    if (!t->s.on_error) {
        SFB_LOG_E("transport: %s", msg);
        return;
    }
    /* The owner reports it, in its own words: the comm context names the
     * peer (found later when the provider named none, src/comm/comm_live.c)
     * and says the error once, in the failure every rank prints. */
    SFB_LOG_D("transport: %s", msg);
    sfb__tp_error_text(msg, sizeof msg, -1, t->prov_name, code, what, detail);
    t->s.on_error(t->s.user, peer, code < 0 ? code : -code, msg);
}

void sfb__tp_contact(struct sfb__transport *t, uint32_t p, ssize_t rc)
{
    uint8_t *c = &t->peers.contact[p];
    if (rc == 0) *c = CONTACT_MADE;
    else if (rc == -FI_EAGAIN && *c == CONTACT_NONE) *c = CONTACT_ASKED;
}

void sfb__tp_ring(struct sfb__transport *t, uint32_t p, int always)
{
    if (t->bell) sfb__bell_mark(t->bell, p, always);
}

/* The peers' address blobs are kept, and each goes into the AV only when
 * this rank first sends to, reads from or ACKs that peer (sfb__tp_addr):
 * shm maps a peer's 16 MiB region at fi_av_insert and unmaps every mapped
 * region at close, which cost 0.7-1.0 s of each rank's teardown at P = 64
 * when every peer was inserted, though an overlay rank talks to a few. A
 * peer that only sends here needs no entry (the transport header names
 * the sender). Slot 2p is where rank p receives, 2p + 1 where it answers
 * reads: the same entry unless p runs two endpoints. */
/* Whether shm can map peer p's region under an address-space limit:
 * libfabric 1.17's shm provider dereferences the failed mapping (SIGSEGV
 * in fi_av_insert) instead of failing. 0, or reported as a failed insert
 * naming the limit. */
static int shm_map_room(struct sfb__transport *t, uint32_t p)
{
    struct rlimit rl;
    if (strcmp(t->prov_name, "shm") || getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    size_t len = (size_t)SHM_REGION_MIB << 20;
    void *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) {
        munmap(m, len);
        return 0;
    }
    char why[128];
    snprintf(why, sizeof why, "no room to map its %u MiB shared-memory region under the "
             "address-space limit (ulimit -v) of %llu MiB", SHM_REGION_MIB,
             (unsigned long long)rl.rlim_cur >> 20);
    sfb__tp_report(t, (int)p, -FI_ENOMEM, "fi_av_insert refused", why);
    return -FI_ENOMEM;
}

uint32_t sfb__tp_world(const struct sfb__transport *t)
{
    return atomic_load_explicit(&t->peers.world, memory_order_acquire);
}

const uint8_t *sfb__tp_peer_name(const struct sfb__transport *t, uint32_t p, unsigned which,
                                 size_t *len)
{
    const uint8_t *blob = t->peers.names + t->peers.name_off[p];
    *len = (t->peers.name_off[p + 1] - t->peers.name_off[p] - 1) / blob[0];
    return blob + 1 + (which < blob[0] ? which : 0) * *len;
}

/* FI_ADDR_NOTAVAIL for a rank outside the world, or any before
 * sfb__transport_set_peers: a peer can send here (an RMA announce, which
 * needs its address to be read and ACKed) before this rank knows the
 * others, and the callers keep such work queued until then. */
static fi_addr_t peer_addr(struct sfb__transport *t, uint32_t p, unsigned which)
{
    if (p >= sfb__tp_world(t)) return FI_ADDR_NOTAVAIL;
    fi_addr_t *slot = &t->peers.addr[2 * (size_t)p + which];
    if (*slot != FI_ADDR_NOTAVAIL) return *slot;
    if (which && t->peers.names[t->peers.name_off[p]] == 1) return *slot = peer_addr(t, p, 0);
    size_t part;
    const uint8_t *name = sfb__tp_peer_name(t, p, which, &part);
    /* Providers read a fixed-size address (shm: a 256-byte name slot), so
     * the name goes through a zero-padded copy. */
    uint8_t pad[SFB__TP_NAME_MAX] = {0};
    memcpy(pad, name, part);
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    if (shm_map_room(t, p)) return FI_ADDR_NOTAVAIL;
    int rc = (int)FAB(t, fi_av_insert(t->av, pad, 1, &fa, 0, NULL));
    if (rc != 1 || fa == FI_ADDR_NOTAVAIL) {
        sfb__tp_report(t, (int)p, rc < 0 ? rc : -FI_EINVAL, "fi_av_insert failed", NULL);
        return FI_ADDR_NOTAVAIL;
    }
    return *slot = fa;
}

fi_addr_t sfb__tp_addr(struct sfb__transport *t, uint32_t p)
{
    return peer_addr(t, p, 0);
}

fi_addr_t sfb__tp_read_addr(struct sfb__transport *t, uint32_t p)
{
    return peer_addr(t, p, 1);
}

int sfb__transport_set_peers(struct sfb__transport *t, const void *const *names,
                             const size_t *lens, uint32_t world)
{
    if (t->peers.world) return sfb__error(-EINVAL, "transport: peers already set");
    if (world == 0 || world > SFB__TRANSPORT_MAX_RANKS || t->s.rank >= world)
        return sfb__error(-EINVAL, "transport: world size %u with rank %u", world, t->s.rank);
    size_t total = 0;
    for (uint32_t i = 0; i < world; i++) {
        const uint8_t *b = names[i];
        if (lens[i] < 2 || (b[0] != 1 && b[0] != 2) || (lens[i] - 1) % b[0] ||
            (lens[i] - 1) / b[0] > SFB__TP_NAME_MAX)
            return sfb__error(-EINVAL, "transport: address of rank %u (%zu bytes, %u names) is "
                              "malformed", i, lens[i], lens[i] ? b[0] : 0u);
        total += lens[i];
    }
    t->peers.seq = calloc(world, sizeof *t->peers.seq);
    t->peers.heard = calloc(world, sizeof *t->peers.heard);
    t->peers.contact = calloc(world, 1);
    t->peers.addr = malloc(2 * (size_t)world * sizeof *t->peers.addr);
    t->peers.name_off = malloc((world + 1) * sizeof *t->peers.name_off);
    t->peers.names = malloc(total);
    if (!t->peers.seq || !t->peers.heard || !t->peers.contact || !t->peers.addr ||
        !t->peers.name_off || !t->peers.names)
        return -ENOMEM;
    t->peers.name_off[0] = 0;
    for (uint32_t i = 0; i < world; i++) {
        t->peers.addr[2 * i] = t->peers.addr[2 * i + 1] = FI_ADDR_NOTAVAIL;
        memcpy(t->peers.names + t->peers.name_off[i], names[i], lens[i]);
        t->peers.name_off[i + 1] = t->peers.name_off[i] + lens[i];
    }
    pthread_mutex_lock(&t->mu);
    atomic_store_explicit(&t->peers.world, world, memory_order_release); /* after the arrays */
    pthread_mutex_unlock(&t->mu);
    return 0;
}
