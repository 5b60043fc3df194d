/* Transport benchmark: two endpoints in one process (each with its own loop
 * thread, driven by its own compute thread), ping-pong latency/bandwidth and
 * streaming bandwidth per provider and frame size.
 *
 *   bench_transport [--smoke] [provider ...]     (default: shm tcp)
 *
 * One line per result: name  size  iters  us/op  GB/s. Warm-up excluded.
 * --smoke runs a few iterations of small sizes (registered as a test). */
#include "src/common.h"
#include "src/loop.h"
#include "src/transport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ep {
    struct sfb__loop *loop;
    struct sfb__transport *t;
    struct sfb__buf *buf;
};

struct run {
    struct ep *e;
    int peer;
    size_t size;
    int iters, warm, mode; /* mode 0 ping-pong, 1 stream */
    int is_client;
    double secs;
    int rc;
};

static int recv_one(struct sfb__transport *t, struct sfb__frame *f)
{
    return sfb__transport_recv(t, f, 10.0);
}

/* Client: ping-pong sends and waits; stream sends all then waits for one ack.
 * Server: echoes (ping-pong) or counts and acks (stream). */
static void *worker(void *arg)
{
    struct run *r = arg;
    struct sfb__transport *t = r->e->t;
    struct sfb__frame f;
    int total = r->warm + r->iters;
    double t0 = 0;
    r->rc = 0;
    if (r->mode == 0) {
        for (int i = 0; i < total; i++) {
            if (i == r->warm) t0 = sfb__now();
            if (r->is_client) {
                if ((r->rc = sfb__transport_send(t, (uint32_t)r->peer, NULL, 0, r->e->buf, 0,
                                                 r->size, 10.0)))
                    return NULL;
                if ((r->rc = recv_one(t, &f))) return NULL;
                sfb__buf_put(f.buf);
            } else {
                if ((r->rc = recv_one(t, &f))) return NULL;
                sfb__buf_put(f.buf);
                if ((r->rc = sfb__transport_send(t, (uint32_t)r->peer, NULL, 0, r->e->buf, 0,
                                                 r->size, 10.0)))
                    return NULL;
            }
        }
    } else {
        for (int round = 0; round < 2; round++) { /* round 0: warm-up */
            int n = round ? r->iters : r->warm;
            if (round) t0 = sfb__now();
            if (r->is_client) {
                for (int i = 0; i < n; i++)
                    if ((r->rc = sfb__transport_send(t, (uint32_t)r->peer, NULL, 0, r->e->buf, 0,
                                                     r->size, 10.0)))
                        return NULL;
                if ((r->rc = recv_one(t, &f))) return NULL;
                sfb__buf_put(f.buf);
            } else {
                for (int i = 0; i < n; i++) {
                    if ((r->rc = recv_one(t, &f))) return NULL;
                    sfb__buf_put(f.buf);
                }
                if ((r->rc = sfb__transport_send(t, (uint32_t)r->peer, NULL, 0, r->e->buf, 0, 1,
                                                 10.0)))
                    return NULL;
            }
        }
    }
    r->secs = sfb__now() - t0;
    return NULL;
}

static int bench_provider(const char *prov, int smoke)
{
    struct ep e[2];
    memset(e, 0, sizeof e);
    const void *names[2];
    size_t lens[2];
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        struct sfb__transport_settings s;
        sfb__transport_default_settings(&s);
        s.provider = prov;
        s.rank = (uint32_t)i;
        s.spin_s = 0.05; /* stay responsive between iterations */
        if ((rc = sfb__loop_open(&e[i].loop)) || (rc = sfb__loop_start(e[i].loop)) ||
            (rc = sfb__transport_open(&e[i].t, &s, e[i].loop)) ||
            (rc = sfb__transport_buf_get(e[i].t, 16 << 20, &e[i].buf)))
            goto out;
        memset(e[i].buf->data, 0x5a, 16 << 20);
        sfb__transport_name(e[i].t, &names[i], &lens[i]);
    }
    for (int i = 0; i < 2; i++)
        if ((rc = sfb__transport_set_peers(e[i].t, names, lens, 2))) goto out;
    for (int mode = 0; mode < 2; mode++) {
        for (size_t size = 4096; size <= ((size_t)16 << 20); size *= 4) {
            if (smoke && size > (64 << 10)) break;
            int iters = smoke ? 5 : (int)SFB_MAX(20, SFB_MIN(5000, (256u << 20) / size));
            struct run r[2];
            pthread_t th[2];
            for (int i = 0; i < 2; i++) {
                r[i] = (struct run){.e = &e[i], .peer = 1 - i, .size = size, .iters = iters,
                                    .warm = smoke ? 1 : SFB_MAX(2, iters / 10), .mode = mode,
                                    .is_client = i == 0};
                pthread_create(&th[i], NULL, worker, &r[i]);
            }
            for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
            if (r[0].rc || r[1].rc) {
                rc = r[0].rc ? r[0].rc : r[1].rc;
                fprintf(stderr, "%s: %s (%s)\n", prov, sfb_strerror(rc), sfb_last_error());
                goto out;
            }
            /* Ping-pong: one op is a round trip (2 transfers of size). */
            double us = 1e6 * r[0].secs / iters;
            double bytes = (double)size * iters * (mode == 0 ? 2 : 1);
            printf("transport/%s/%s  %zu  %d  %.2f  %.3f\n", mode == 0 ? "pingpong" : "stream",
                   sfb__transport_provider(e[0].t), size, iters, us, bytes / r[0].secs / 1e9);
            fflush(stdout);
        }
    }
out:
    for (int i = 0; i < 2; i++) {
        if (e[i].t) sfb__transport_flush(e[i].t, 5);
        if (e[i].buf) sfb__buf_put(e[i].buf);
        sfb__transport_close(&e[i].t);
        sfb__loop_close(&e[i].loop);
    }
    if (rc) fprintf(stderr, "%s: %s: %s\n", prov, sfb_strerror(rc), sfb_last_error());
    return rc;
}

int main(int argc, char **argv)
{
    int smoke = 0, nprov = 0, rc = 0;
    const char *provs[16];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke")) smoke = 1;
        else if (nprov < 16) provs[nprov++] = argv[i];
    }
    if (!nprov) {
        provs[nprov++] = "shm";
        provs[nprov++] = "tcp";
    }
    printf("# name  size  iters  us/op  GB/s\n");
    for (int i = 0; i < nprov; i++)
        if (bench_provider(provs[i], smoke)) rc = 1;
    return rc;
}
