/* The per-matrix cost model (sfb/cost.h; the formulas are documented there
 * and in docs/design.md). The SFB side's message and byte counts come from
 * the topology's own routing and simulator (sfb_topo_analyse), the code
 * `sfb topo` runs, so an overlay's relaying and bundling is counted as the
 * runtime does it and never re-derived here. */
#include "config.h"
#include "sfb/cost.h"
#include "sfb/sync.h"
#include "src/base/util.h"
#include "src/wire/wire.h"

#include <sfb/cost_model.h>
#include <sfb/topo.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>

#define DEFAULT_ALPHA_S 10e-6
#define DEFAULT_BETA 8e-9 /* 1 Gbit/s */
#define HDR 64.0          /* wire header of every frame (src/wire/wire.h) */
#define SF_PREFIX 8.0     /* scale and nnz before the factors (sfb/codec.h) */

/* α and β to use: the given ones, or the defaults when none was given. */
static int link_of(const struct sfb__cost_env *e, double *alpha, double *beta)
{
    *alpha = e->link.alpha_s;
    *beta = e->link.beta_s_per_byte;
    if (!e->link.measured && *alpha == 0 && *beta == 0) {
        *alpha = DEFAULT_ALPHA_S;
        *beta = DEFAULT_BETA;
    }
    if (!(*alpha >= 0) || !(*beta > 0) || *alpha > 1e3 || *beta > 1)
        return sfb__error(-EINVAL, "cost model: link alpha %g s, beta %g s/byte (want alpha in "
                          "[0, 1000], beta in (0, 1])", *alpha, *beta);
    return 0;
}

/* Messages and bytes one worker sends per clock under the topology. */
static int sfb_traffic(const struct sfb__cost_env *e, double sf_bytes, double alpha, double beta,
                       double *msgs, double *bytes)
{
    *msgs = *bytes = 0;
    if (e->world < 2) return 0;
    struct sfb_topo *t = NULL;
    int ret = sfb_topo_open(&t, e->topology ? e->topology : "full", e->world, e->degree);
    if (ret) return ret;
    struct sfb_topo_sim_settings s;
    sfb_topo_sim_default_settings(&s);
    s.sf_bytes = (uint64_t)(sf_bytes + 0.5);
    s.link_gbps = 8.0 / (beta * 1e9);
    s.latency_us = alpha * 1e6;
    s.flush = e->flush_clock ? SFB_TOPO_FLUSH_CLOCK : SFB_TOPO_FLUSH_EAGER;
    struct sfb_topo_report r = {.size = sizeof r};
    ret = sfb_topo_analyse(t, &s, &r);
    sfb_topo_close(&t);
    if (ret) return ret;
    *msgs = (double)r.messages_per_node;
    *bytes = (double)r.bytes_per_node;
    return 0;
}

int sfb__cost_parts(const struct sfb__cost_env *e, const struct sfb__cost_matrix *m,
                    struct sfb__cost_parts *out)
{
    SFB_ENTER();
    SFB_ARG(e);
    SFB_ARG(m);
    SFB_ARG(out);
    if (!e->world || !e->batch)
        return sfb__error(-EINVAL, "cost model: world %u, batch %u (both must be > 0)", e->world,
                          e->batch);
    if (!m->rows || !m->cols || !(m->sf_bytes >= 0) || !(m->c_nnz >= 0))
        return sfb__error(-EINVAL, "cost model: matrix %llux%llu, SF frame %g bytes",
                          (unsigned long long)m->rows, (unsigned long long)m->cols, m->sf_bytes);
    if (!(e->gemm_flops_per_s > 0) || !(e->add_flops_per_s > 0))
        return sfb__error(-EINVAL, "cost model: gemm rate %g, add rate %g (both must be > 0)",
                          e->gemm_flops_per_s, e->add_flops_per_s);
    double alpha, beta;
    int ret = link_of(e, &alpha, &beta);
    if (ret) return ret;
    double P = e->world, K = (double)m->rows, D = (double)m->cols, S = e->batch;
    double N = m->c_nnz > 0 ? m->c_nnz : 0;
    int bf16 = m->prec == SFB_WIRE_BF16;
    double E = bf16 ? 2 : 4; /* bytes a number of B and c */
    /* CSR c: row pointers, columns and values (sfb/codec.h) */
    double B = m->sf_bytes > 0 ? m->sf_bytes
               : N > 0        ? HDR + SF_PREFIX + E * S * K + 4 * (S + 1) + (4 + E) * N
                              : HDR + SF_PREFIX + E * S * (K + D);
    double stretch = 1;
    if (e->host_cores && e->ranks_per_host > e->host_cores)
        stretch = (double)e->ranks_per_host / e->host_cores;
    struct sfb__cost_parts r = {.sf_bytes = B};

    if ((ret = sfb_traffic(e, B, alpha, beta, &r.msgs[SFB__ENG_SFB], &r.bytes[SFB__ENG_SFB])))
        return ret;
    /* one SF's apply: the GEMM, or the sparse pass for a CSR c */
    double apply_s = N > 0 ? 2 * K * N / e->add_flops_per_s : 2 * K * D * S / e->gemm_flops_per_s;
    /* bf16: each SF widened to float32 first (the apply's numbers stay
     * float32): B's S·K numbers and c's (S·D dense, nnz CSR) */
    double widen_s = bf16 ? (S * K + (N > 0 ? N : S * D)) / e->add_flops_per_s : 0;
    r.compute_ms[SFB__ENG_SFB] = 1e3 * stretch * (apply_s + widen_s) * P;

    /* factors pushed (m->fms_factors, where fewer bytes than a block's
     * rows): the pushes' pass (form, check, hash) and the owner's adds of
     * the others' rows go, the product's flops move to the owners */
    int factors = m->fms_factors && N == 0 && m->dense_prec != SFB_WIRE_BF16 && e->world > 1 &&
                  sfb__fms_factors_smaller((uint64_t)ceil(K / P), (uint64_t)D, (uint64_t)S);
    double passes = 3 + (P - 1) / P - (factors ? 2 * (P - 1) / P : 0);
    r.compute_ms[SFB__ENG_FMS] = 1e3 * stretch * (apply_s + K * D * passes / e->add_flops_per_s);
    double phases = 0;
    if (e->world > 1) {
        /* 2(P−1) row blocks out (P−1 pushes, P−1 sums), each as its chunks
         * (sfb/fms.c), or P−1 pushes of factors and the sums' chunks; the
         * first sum waits for the first chunk's last push: one more α
         * between the phases */
        double chunks = ceil(ceil(K / P) / sfb__fms_chunk_rows((uint32_t)K, (uint32_t)D,
                                                                (uint32_t)P));
        double dense_e = m->dense_prec == SFB_WIRE_BF16 ? 2 : 4;
        double sums = (P - 1) * (dense_e * K * D / P + chunks * HDR);
        r.msgs[SFB__ENG_FMS] = (P - 1) * (factors ? 1 + chunks : 2 * chunks);
        r.bytes[SFB__ENG_FMS] =
            sums + (factors ? (P - 1) * (HDR + SFB_WIRE_FACTORS_PREFIX + 4 * S * (K / P + D))
                            : sums);
        phases = alpha;
    }
    for (int k = 0; k < 2; k++)
        r.ms[k] = 1e3 * (r.msgs[k] * alpha + r.bytes[k] * beta) + r.compute_ms[k];
    r.ms[SFB__ENG_FMS] += 1e3 * phases;
    *out = r;
    return 0;
}

int sfb__cost_predict(const struct sfb__cost_env *e, const struct sfb__cost_matrix *m,
                      double ms[2])
{
    struct sfb__cost_parts r;
    SFB_ARG(ms);
    int ret = sfb__cost_parts(e, m, &r);
    if (ret) return ret;
    ms[0] = r.ms[0];
    ms[1] = r.ms[1];
    return 0;
}

/* ---- the public face (include/sfb/cost.h): `sfb topo --engines` ---- */

void sfb_cost_default_settings(struct sfb_cost_settings *s)
{
    if (!s) return;
    *s = (struct sfb_cost_settings){.version = SFB_COST_SETTINGS_VERSION, .world = 2, .batch = 32,
                                    .link_gbps = 1, .latency_us = 10};
}

/* The first version's size of struct sfb_cost_result */
#define RESULT_V1 SFB_END_OF(struct sfb_cost_result, winner)

int sfb_cost_predict(const struct sfb_cost_settings *s, uint64_t rows, uint64_t cols,
                     double sf_bytes, struct sfb_cost_result *out)
{
    SFB_ENTER();
    SFB_ARG(s);
    SFB_ARG(out);
    int ret = SFB_CHECK_SIZE(out, "sfb_cost_result", RESULT_V1);
    if (!ret)
        ret = SFB_CHECK_VERSION(s, "sfb_cost_settings", "sfb_cost_default_settings",
                                SFB_COST_SETTINGS_VERSION);
    if (ret) return ret;
    if (!(s->link_gbps > 0) || s->link_gbps > 1e6 || !(s->latency_us >= 0) || s->latency_us > 1e9)
        return sfb__error(-SFB_EUSAGE, "cost model: link %g Gbit/s, latency %g us (want a "
                          "bandwidth in (0, 1e6] and a latency in [0, 1e9])", s->link_gbps,
                          s->latency_us);
    struct sfb__cost_env e = {
        .world = s->world, .batch = s->batch, .topology = s->topology, .degree = s->degree,
        .flush_clock = s->flush_clock,
        .link = {.alpha_s = s->latency_us * 1e-6, .beta_s_per_byte = 8 / (s->link_gbps * 1e9)},
        .gemm_flops_per_s = s->gemm_gflops * 1e9, .add_flops_per_s = s->add_gadds * 1e9,
        .host_cores = s->host_cores, .ranks_per_host = s->ranks_per_host};
    struct sfb__cost_matrix m = {rows, cols, sf_bytes, 0, SFB_WIRE_F32, SFB_WIRE_F32, 0};
    struct sfb__cost_parts r;
    if ((ret = sfb__cost_parts(&e, &m, &r))) return ret;
    struct sfb_cost_result all = {.size = sizeof all, .sf_bytes = r.sf_bytes};
    for (int k = 0; k < 2; k++) {
        all.ms[k] = r.ms[k];
        all.msgs[k] = r.msgs[k];
        all.bytes[k] = r.bytes[k];
        all.compute_ms[k] = r.compute_ms[k];
    }
    all.winner = r.ms[SFB__ENG_FMS] < r.ms[SFB__ENG_SFB] ? SFB_COST_FMS : SFB_COST_SFB;
    sfb__sized_copy(out, out->size, &all, sizeof all);
    return 0;
}

double sfb_cost_gemm_rate(uint64_t rows, uint64_t cols, uint32_t s)
{
    return sfb__gemm_rate(rows, cols, s);
}

double sfb_cost_add_rate(uint64_t n)
{
    return sfb__add_rate(n);
}

int sfb__cost_plan(const struct sfb__cost_env *e, const struct sfb__cost_matrix *m, uint32_t n,
                   int *choice, double (*ms)[2])
{
    SFB_ENTER();
    SFB_ARG(m);
    SFB_ARG(choice);
    for (uint32_t i = 0; i < n; i++) {
        double t[2];
        int ret = sfb__cost_predict(e, &m[i], t);
        if (ret) return sfb__error(ret, "matrix %u: %s", i, sfb_error_message(ret));
        choice[i] = t[SFB__ENG_FMS] < t[SFB__ENG_SFB] ? SFB__ENG_FMS : SFB__ENG_SFB;
        if (ms) {
            ms[i][0] = t[0];
            ms[i][1] = t[1];
        }
    }
    return 0;
}

int sfb__cost_describe_one(uint32_t index, const struct sfb__cost_matrix *m, int choice,
                           const double ms[2], char *buf, size_t cap)
{
    char sparse[48] = "";
    if (m->c_nnz > 0) snprintf(sparse, sizeof sparse, " (sparse c, %.0f nnz)", m->c_nnz);
    int w = snprintf(buf, cap, "matrix %u %llux%llu%s: sfb %.3g ms, fms %.3g ms per clock -> %s\n",
                     index, (unsigned long long)m->rows, (unsigned long long)m->cols, sparse, ms[0],
                     ms[1], choice == SFB__ENG_FMS ? "fms" : "sfb");
    return w < 0 ? sfb__error(-EINVAL, "cost describe: formatting failed") : w;
}

int sfb__cost_describe(const struct sfb__cost_matrix *m, uint32_t n, const int *choice,
                       const double (*ms)[2], char *buf, size_t cap)
{
    SFB_ENTER();
    SFB_ARG(m);
    SFB_ARG(choice);
    SFB_ARG(ms);
    SFB_ARG(buf || !cap);
    size_t len = 0;
    if (cap) buf[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        int w = sfb__cost_describe_one(i, &m[i], choice[i], ms[i], len < cap ? buf + len : NULL,
                                       len < cap ? cap - len : 0);
        if (w < 0) return w;
        len += (size_t)w;
    }
    return len > INT32_MAX ? -EOVERFLOW : (int)len;
}
