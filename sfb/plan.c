/* The per-matrix engine planner (sfb/plan.h): the engine list of a job's
 * attach, and its "auto" entries chosen by the cost model (sfb/cost.c) from
 * rank 0's measurements (sfb/probe.c). */
#include "config.h"
#include "sfb/plan.h"
#include "sfb/cost.h"
#include "sfb/sync.h"
#include "src/base/util.h"
#include "src/comm/comm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int sfb__plan_engines(const char *fn, const char *spec, uint32_t n,
                      const struct sfb__sync_desc **engine_of)
{
    uint32_t k;
    int ret = sfb__sync_parse(spec ? spec : "sfb", engine_of, n, &k);
    if (ret) {
        char why[256];
        snprintf(why, sizeof why, "%s", sfb_last_error());
        return sfb__error(ret, "%s: %s", fn, why);
    }
    if (k != 1 && k != n)
        return sfb__error(-SFB_EUSAGE, "%s: engine \"%s\" names %u engines for %u "
                          "matrices (one for all, or one per matrix)", fn, spec, k, n);
    for (uint32_t m = k; m < n; m++) engine_of[m] = engine_of[0];
    return 0;
}

/* What the cost model weighs, as rank 0 sees it (broadcast, so every rank
 * plans with the same numbers and chooses the same engines): the header,
 * then per matrix the sgemm rate (0: forced, not measured), then per
 * matrix the SF frame's bytes. */
enum { AUTO_ALPHA, AUTO_BETA, AUTO_ADD, AUTO_CORES, AUTO_LOCAL, AUTO_HDR };

struct shape_at {
    uint32_t rows, cols, m;
};

static int cmp_shape(const void *x, const void *y)
{
    const struct shape_at *a = x, *b = y;
    if (a->rows != b->rows) return a->rows < b->rows ? -1 : 1;
    return a->cols < b->cols ? -1 : a->cols > b->cols;
}

/* Rank 0: each auto matrix's sgemm rate, measured once per shape (a model
 * of hundreds of layers has few shapes; a measurement takes up to ~20 ms). */
static int measure_gemm(const struct sfb__plan_job *pj, const struct sfb__sync_desc **engine_of,
                        double *gemm)
{
    struct shape_at *v = malloc(pj->n * sizeof *v);
    if (!v) return -ENOMEM;
    uint32_t k = 0;
    for (uint32_t m = 0; m < pj->n; m++)
        if (!engine_of[m]) v[k++] = (struct shape_at){pj->mats[m].rows, pj->mats[m].cols, m};
    qsort(v, k, sizeof *v, cmp_shape);
    for (uint32_t i = 0; i < k; i++)
        gemm[v[i].m] = i && !cmp_shape(&v[i], &v[i - 1])
                           ? gemm[v[i - 1].m]
                           : sfb__gemm_rate(v[i].rows, v[i].cols, pj->max_s);
    free(v);
    return 0;
}

/* Rank 0's inputs (n = pj->n): in[AUTO_HDR + m] the sgemm rate, in[AUTO_HDR
 * + n + m] the SF bytes, in[AUTO_HDR + 2n + m] the CSR c's non-zeros. */
static int auto_inputs(const struct sfb__plan_job *pj, const struct sfb__sync_desc **engine_of,
                       const struct sfb__link *link, double *in)
{
    uint64_t biggest = 0;
    for (uint32_t m = 0; m < pj->n; m++) {
        in[AUTO_HDR + pj->n + m] = pj->sf_bytes ? pj->sf_bytes[m] : 0;
        in[AUTO_HDR + 2 * (size_t)pj->n + m] = pj->sf_nnz ? pj->sf_nnz[m] : 0;
        if (!engine_of[m])
            biggest = SFB_MAX(biggest, (uint64_t)pj->mats[m].rows * pj->mats[m].cols);
    }
    in[AUTO_ALPHA] = link->alpha_s;
    in[AUTO_BETA] = link->beta_s_per_byte;
    /* rank 0's rates are the plan's: measured there alone, not while every
     * rank of the host competes for its cores */
    in[AUTO_ADD] = sfb__add_rate(biggest);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    in[AUTO_CORES] = cores > 0 ? (double)cores : 1;
    in[AUTO_LOCAL] = sfb__comm_local_ranks(pj->comm);
    return measure_gemm(pj, engine_of, in + AUTO_HDR);
}

/* Appends `line` to *text (length *len, capacity *cap). */
static int plan_line(char **text, size_t *len, size_t *cap, const char *line)
{
    size_t n = strlen(line);
    if (sfb__reserve((void **)text, cap, *len + n + 1)) return -ENOMEM;
    memcpy(*text + *len, line, n + 1);
    *len += n;
    return 0;
}

/* The auto matrices' choices (in: rank 0's inputs), and the plan: one
 * line per matrix, a forced one saying so. */
static int plan_lines(const struct sfb__plan_job *pj, const struct sfb__sync_desc **engine_of,
                      const double *in, int measured, double (*ms)[2], char **text)
{
    struct sfb__cost_env e = {
        .world = sfb__comm_world(pj->comm), .batch = pj->max_s, .topology = pj->topology,
        .degree = pj->degree, .flush_clock = pj->flush_clock,
        .link = {.alpha_s = in[AUTO_ALPHA], .beta_s_per_byte = in[AUTO_BETA], .measured = measured},
        .add_flops_per_s = in[AUTO_ADD],
        .host_cores = (uint32_t)in[AUTO_CORES], .ranks_per_host = (uint32_t)in[AUTO_LOCAL]};
    size_t len = 0, cap = 0;
    int ret = plan_line(text, &len, &cap, "");
    for (uint32_t m = 0; m < pj->n && ret >= 0; m++) {
        struct sfb__cost_matrix cm = {pj->mats[m].rows, pj->mats[m].cols,
                                      in[AUTO_HDR + pj->n + m],
                                      in[AUTO_HDR + 2 * (size_t)pj->n + m], pj->prec[m],
                                      pj->dense_prec ? pj->dense_prec[m] : SFB_WIRE_F32,
                                      pj->ordered}; /* (not the environment: every rank
                                                      * must choose alike) */
        char line[256];
        ms[m][0] = ms[m][1] = NAN;
        if (engine_of[m]) {
            snprintf(line, sizeof line, "matrix %u %ux%u: %s (forced)\n", m, pj->mats[m].rows,
                     pj->mats[m].cols, engine_of[m]->name);
            ret = plan_line(text, &len, &cap, line);
            continue;
        }
        /* each matrix at its own sgemm rate */
        e.gemm_flops_per_s = in[AUTO_HDR + m];
        int choice;
        if ((ret = sfb__cost_plan(&e, &cm, 1, &choice, &ms[m]))) break;
        /* clock-mode relays receive on their own, SF frames only: SFB */
        if (pj->flush_clock) choice = SFB__ENG_SFB;
        engine_of[m] = choice == SFB__ENG_FMS ? &sfb__fms_desc : &sfb__broadcast_desc;
        ret = sfb__cost_describe_one(m, &cm, choice, ms[m], line, sizeof line);
        if (ret >= 0) ret = plan_line(text, &len, &cap, line);
    }
    if (ret == -ENOMEM) return sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    return ret < 0 ? ret : 0;
}

int sfb__plan_auto(const struct sfb__plan_job *pj, const struct sfb__sync_desc **engine_of,
                   double (*ms)[2], char **text)
{
    uint32_t world = sfb__comm_world(pj->comm);
    struct sfb__link link = {0};
    int ret = 0;
    if (pj->link_gbps > 0 || pj->latency_us > 0) {
        link.alpha_s = (pj->latency_us > 0 ? pj->latency_us : 10.0) * 1e-6;
        link.beta_s_per_byte = 8.0 / ((pj->link_gbps > 0 ? pj->link_gbps : 1.0) * 1e9);
    } else if (world > 1 && (ret = sfb__link_probe(pj->comm, &link))) {
        return sfb__comm_explain(pj->comm, ret);
    }
    size_t len = (AUTO_HDR + 3 * (size_t)pj->n) * sizeof(double);
    double *in = calloc(1, len);
    if (!in) return sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    if (sfb__comm_rank(pj->comm) == 0 && auto_inputs(pj, engine_of, &link, in))
        ret = sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    /* every rank reaches the broadcast (a failed rank 0 fails after it,
     * alone: the others see it leave) */
    if (world > 1) {
        int r = sfb__comm_broadcast(pj->comm, 0, in, len);
        if (!ret && r) ret = r == -SFB_EUSAGE ? r : sfb__comm_explain(pj->comm, r);
    }
    if (!ret) ret = plan_lines(pj, engine_of, in, link.measured, ms, text);
    free(in);
    return ret;
}
