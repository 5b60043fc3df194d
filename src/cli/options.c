/* Option parsing shared by `sfb run` and `sfb worker`: one table (below,
 * plus each registered model's own options) checks, stores and documents
 * every option. Names of models, engines and topologies come from their
 * registries. */
#include "src/cli/cli.h"
#include "src/cli/optparse.h"

#include <limits.h>
#include <math.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define T(field) \
    .off = offsetof(struct cli_job, train.field), .size = sizeof(((struct cli_job *)0)->train.field)
#define J(field) .off = offsetof(struct cli_job, field), .size = sizeof(((struct cli_job *)0)->field)
/* kind, long name, short name, destination (T or J); the metavar and the
 * help follow positionally (the members after .size) */
#define ROW(k, n, c, dest) .kind = k, .name = n, .short_name = c, dest

static int set_nprocs(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                      const char *v)
{
    struct cli_job *job = base;
    const char *cmd = ctx;
    uint64_t u;
    (void)o;
    if (!job->with_n) {
        fprintf(stderr, "sfb %s: -n is an option of `sfb run`; the launcher sets the "
                        "world size of `sfb worker`\n", cmd);
        return CLI_OPT_USAGE;
    }
    if (cli_parse_u64(v, 1, 4096, &u)) return cli_opt_bad(cmd, spelled, v, "an integer in 1..4096");
    job->nprocs = (int)u;
    return CLI_OPT_OK;
}

static int set_model(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                     const char *v)
{
    struct cli_job *job = base;
    (void)o;
    if (!sfb_model_find(v)) {
        fprintf(stderr, "sfb %s: %s: unknown model \"%s\" (known: %s)\n", (const char *)ctx,
                spelled, v, sfb_model_names());
        return CLI_OPT_USAGE;
    }
    job->train.model = v;
    return CLI_OPT_OK;
}

static int set_sync(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                    const char *v)
{
    struct cli_job *job = base;
    /* auto, one engine for every matrix, or one per matrix (sfb,fms) */
    int ok = !strcmp(v, "auto");
    for (const char *p = v; !ok;) {
        size_t len = strcspn(p, ",");
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        if (len >= sizeof name || sfb_sync_registry_find(name) < 0) break;
        if (!p[len]) ok = 1;
        p += len + 1;
    }
    if (!ok) return cli_opt_bad(ctx, spelled, v, o->want);
    job->train.sync = v;
    return CLI_OPT_OK;
}

static int set_bandwidth(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                         const char *v)
{
    struct cli_job *job = base;
    const char *why;
    (void)o;
    if (cli_parse_rate(v, &job->train.bandwidth, &why)) return cli_opt_bad(ctx, spelled, v, why);
    return CLI_OPT_OK;
}

static int set_topology(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                        const char *v)
{
    struct cli_job *job = base;
    if (sfb_topo_is_overlay(v) < 0) return cli_opt_bad(ctx, spelled, v, o->want);
    job->train.topology = v;
    return CLI_OPT_OK;
}

static const int index_bases[] = {SFB_INDEX_AUTO, SFB_INDEX_0, SFB_INDEX_1};
static const int layouts[] = {SFB_LAYOUT_AUTO, SFB_LAYOUT_DENSE, SFB_LAYOUT_SPARSE};
static const int schedules[] = {SFB_LR_CONSTANT, SFB_LR_INVSQRT, SFB_LR_STEP};
static const int flushes[] = {0, 1};
static const int on_off[] = {-1, 1, 0};
static const int levels[] = {SFB_LOG_ERROR, SFB_LOG_WARN, SFB_LOG_INFO, SFB_LOG_DEBUG};

#define U(n, f, lo, hi, meta, w, h) \
    {ROW(CLI_UINT, n, 0, T(f)), meta, h, .umin = lo, .umax = hi, .want = w}
#define R(n, f, l, hi_, op, meta, w, h) \
    {ROW(CLI_REAL, n, 0, T(f)), meta, h, .lo = l, .hi = hi_, .open = op, .want = w}
#define E(n, f, ch, vals, h) {ROW(CLI_ENUM, n, 0, T(f)), ch, h, .choices = ch, .values = vals}
#define S(n, f, meta, h) {ROW(CLI_STR, n, 0, T(f)), meta, h}
#define SECTION(h) {.kind = CLI_SECTION, .help = h}

/* Help texts the registries fill in (job_table). */
static char model_help[256], lambda_help[256], lr_help[256], sync_meta[64], sync_help[512],
    sync_want[128], topo_meta[128], topo_want[160];

/* Rows before the models' own options. */
static const struct cli_opt job_rows[] = {
    SECTION("model and data:"),
    {ROW(CLI_CALL, "model", 0, T(model)), "NAME", model_help, .call = set_model},
    S("data", data, "NAME", "fashion-mnist | synth:k=..,d=..,n=..,density=..,seed=..\n"
                           "| FILE.libsvm | IDX directory (default fashion-mnist)"),
    S("test-data", test_data, "FILE", "held-out set (libsvm, or IDX images file)"),
    E("index-base", libsvm.index_base, "auto|0|1", index_bases,
      "libsvm feature index base (default auto)"),
    E("data-layout", layout, "auto|dense|sparse", layouts, "feature storage (default: as loaded)"),
    U("dim", libsvm.dim, 1, UINT32_MAX - 1, "D", "a positive integer",
      "libsvm feature dimension (default: inferred)"),
    U("classes", libsvm.classes, 2, 1u << 24, "K", "an integer >= 2",
      "number of classes (default: inferred)"),
    R("lambda", lambda, 0, INFINITY, 0, "L", NULL, lambda_help),
    U("patches", patch, 1, 1u << 20, "P", "a positive integer",
      "train on PxP patches of square images (e.g. 8)"),
};

static const struct cli_opt job_rows2[] = {
    SECTION("training:"),
    U("batch", batch, 1, 1u << 20, "S", NULL, "samples per worker per clock (default 32/P: a\n"
                                              "global minibatch of 32 samples)"),
    U("epochs", epochs, 1, 1u << 20, "E", "a positive integer", "passes over the data (default 10)"),
    U("clocks", clocks, 1, UINT64_MAX >> 2, "T", "a positive integer",
      "run exactly T clocks instead of --epochs"),
    R("lr", lr, 0, INFINITY, CLI_OPEN_LO, "ETA", "a positive number", lr_help),
    E("lr-schedule", lr_schedule, "constant|invsqrt|step", schedules,
      "(default invsqrt: eta/sqrt(1+t/T))"),
    U("lr-period", lr_period, 1, UINT64_MAX >> 2, "T", "a positive integer",
      "schedule period in clocks (default: 1% of an epoch;\nmlp: one epoch)"),
    R("lr-decay", lr_decay, 0, 1, CLI_OPEN_LO, "F", NULL, "factor per period for step (default 0.5)"),
    U("seed", seed, 0, UINT64_MAX, "N", "a non-negative integer",
      "data order and initialisation (default 1)"),
    U("threads", threads, 1, 1024, "N", NULL, "OpenBLAS threads per worker (default 1)"),
    U("eval-every", eval_every, 0, 1u << 20, "E", "a non-negative integer",
      "test-set evaluation every E epochs (default 1; 0 = end)"),
    SECTION("synchronization:"),
    {ROW(CLI_CALL, "sync", 0, T(sync)), sync_meta, sync_help, .want = sync_want, .call = set_sync},
    {ROW(CLI_INT, "staleness", 0, T(staleness)), "S", "SSP bound; 0 = BSP, -1 = asynchronous (default 0)",
     .imin = -1, .imax = 1000000, .want = "an integer >= -1"},
    {ROW(CLI_CALL, "topology", 0, T(topology)), "NAME", topo_meta, .want = topo_want,
     .call = set_topology},
    U("degree", degree, 1, 64, "Q", NULL, "overlay out-degree (default ceil(log2 P))"),
    E("flush", flush_clock, "eager|clock", flushes, "overlay forwarding (default eager)"),
    E("apply-early", apply_early, "auto|on|off", on_off,
      "apply peers' updates as soon as they arrive,\n"
      "before SSP requires them (auto: on unless BSP)"),
    {ROW(CLI_CALL, "bandwidth", 0, T(bandwidth)), "RATE",
     "egress budget of each worker's data messages,\n"
     "e.g. 200mbit or 25MB/s (default: none)", .call = set_bandwidth},
    {ROW(CLI_CHOICE, "priority", 0, T(priority)), "fifo|magnitude|relative",
     "what leaves first when factors queue (behind\n"
     "--bandwidth or a busy link): computation order,\n"
     "largest |b||c|, or largest change relative to the\n"
     "replica's rows; oldest clock first (default fifo)",
     .choices = "fifo|magnitude|relative"},
    {ROW(CLI_CHOICE, "factor-dtype", 0, T(factor_dtype)), "f32|bf16",
     "the precision --sync sfb's factors travel in: bf16\n"
     "halves their bytes (rounded to nearest even; every\n"
     "replica applies the rounded factors, the own\n"
     "update's too, in float32) (default f32)",
     .choices = "f32|bf16"},
    {ROW(CLI_CHOICE, "dense-dtype", 0, T(dense_dtype)), "f32|bf16",
     "the precision --sync fms's rows travel in (pushes\n"
     "and sums): bf16 halves their bytes (every replica\n"
     "applies the rounded sums) (default f32)",
     .choices = "f32|bf16"},
    U("trial-clocks", trial_clocks, 0, 100000, "T", "0 or a number of clocks",
      "--sync auto, measured: where a matrix's two\n"
      "predictions are within 4x, time T clocks under\n"
      "each engine (2T where T cannot tell) and keep one\n"
      "faster beyond the noise (default 0: the start-up\n"
      "plan; runs then choose alike)"),
    R("link-gbps", link_gbps, 0, 1e6, CLI_OPEN_LO, "G", "a bandwidth in (0, 1e6] Gbit/s",
      "--sync auto's link model: bandwidth per worker\n"
      "(default: measured by a ping-pong at start-up)"),
    R("latency-us", latency_us, 0, 1e9, CLI_OPEN_LO, "L", "a latency in (0, 1e9] microseconds",
      "--sync auto's link model: latency per message\n"
      "(default: measured by a ping-pong at start-up)"),
    S("provider", provider, "NAME", "libfabric provider: shm, tcp, verbs, ... (default:\n"
                                   "FI_PROVIDER, else shm on one host, tcp across hosts)"),
    R("peer-timeout", peer_timeout, 0, INFINITY, CLI_OPEN_LO, "SEC", "a positive number of seconds",
      "a silent peer has failed after SEC seconds (default 5)"),
    R("stall-timeout", stall_timeout, 0, INFINITY, 0, "SEC", "0 or a positive number of seconds",
      "an update a live peer published SEC seconds ago\n"
      "and not arrived fails the job (lost in transit;\n"
      "default 300, 0: never)"),
    {ROW(CLI_CHOICE, "progress", 0, T(progress)), "auto|spin|block",
     "how a rank waits for messages: spin (poll,\n"
     "lowest latency) or block (sleep until woken; for\n"
     "more ranks than cores); auto: block when the host\n"
     "runs more ranks than it has CPUs (default auto)", .choices = "auto|spin|block"},
    {ROW(CLI_CHOICE, "cpu-bind", 0, T(cpu_bind)), "auto|none|cpu",
     "where a worker's threads run: cpu (each rank of a\n"
     "host on one CPU, round robin), none (the OS's or\n"
     "the launcher's placement); auto: cpu when the host\n"
     "runs more ranks than it has CPUs (default auto)", .choices = "auto|none|cpu"},
    SECTION("debugging:"),
    /* not training settings: the trainer reads them from the environment
     * (set_debug_env) */
    {ROW(CLI_REAL, "debug-delay-ms", 0, J(debug_delay_ms)), "MS",
     "add a random delay in [0, MS] ms to every clock", .lo = 0, .hi = INFINITY},
    {ROW(CLI_INT, "debug-slow-rank", 0, J(debug_slow_rank)), "R",
     "make rank R compute --debug-slow-factor times slower", .imin = 0, .imax = 1 << 24,
     .want = "a rank"},
    {ROW(CLI_REAL, "debug-slow-factor", 0, J(debug_slow_factor)), "F", "(default 1)", .lo = 1,
     .hi = INFINITY},
    SECTION("outputs:"),
    {ROW(CLI_STR, "out-dir", 0, J(out_dir)), "DIR", "model and metrics directory (default sfb-out)"},
    S("model-out", model_out, "FILE", "model file (default DIR/model.sfb)"),
    S("metrics-out", metrics_out, "PATTERN", "JSON-lines metrics, %r = rank (the pattern\n"
                                           "needs %r with more than one worker; default\n"
                                           "DIR/metrics.%r.jsonl)"),
    {ROW(CLI_STR, "timeline", 0, J(timeline)), "PATTERN",
     "each worker writes its training timeline here,\n"
     "%r = rank (Chrome trace JSON; `sfb timeline`\n"
     "merges and accounts them; as SFB_TIMELINE)", .umin = 1, .want = "a file path"},
    SECTION("checkpoints:"),
    U("checkpoint-every", checkpoint_every, 1, UINT64_MAX >> 2, "N", "a positive number of clocks",
      "every N clocks each worker writes a checkpoint\n"
      "(all drained to the same clock, files checksummed)"),
    {ROW(CLI_STR, "checkpoint-dir", 0, T(checkpoint_dir)), "DIR",
     "where (default: the --resume DIR, else sfb-ckpt);\n"
     "a fresh run refuses a DIR holding checkpoints", .umin = 1, .want = "a directory"},
    {ROW(CLI_STR, "resume", 0, T(resume_dir)), "DIR",
     "continue from the newest checkpoint valid on every\n"
     "rank (same settings and -n; --clocks/--epochs may grow)", .umin = 1, .want = "a directory"},
    SECTION("replicas:"),
    {ROW(CLI_FLAG, "ordered", 0, T(ordered)), NULL,
     "BSP: apply each clock's updates in rank order,\n"
     "so every replica holds the same bits (slower:\n"
     "the own update waits for the peers')", .ival = 1},
    {ROW(CLI_FLAG, "elastic", 0, T(elastic)), NULL,
     "a worker's death does not end the job: the others\n"
     "go on without it (--sync sfb, --staleness 0; implies\n"
     "--ordered; as SFB_ELASTIC=1, which sfb launch\n"
     "--elastic sets)", .ival = 1},
    {ROW(CLI_UINT, "respawn", 0, J(respawn)), "N",
     "sfb run --elastic: restart a worker that died,\n"
     "at most N times; it joins at the next check\n"
     "(--check-every; as SFB_RESPAWN)", .umin = 0, .umax = 1024, .want = "0..1024"},
    U("check-every", check_every, 0, UINT64_MAX >> 2, "N", "0 or a number of clocks",
      "with --ordered every N clocks the workers compare\n"
      "their replicas' fingerprints and repair one that\n"
      "differs from the majority (0: only at the end;\n"
      "default 100); else the end measures their drift"),
    {ROW(CLI_FLAG, "quiet", 'q', J(quiet)), NULL, "no progress output", .ival = 1},
    {ROW(CLI_FLAG, "verbose", 'v', J(log_level)), NULL, "debug logging (same as --log-level debug)",
     .ival = SFB_LOG_DEBUG},
    {ROW(CLI_ENUM, "log-level", 0, J(log_level)), "LEVEL", "error | warn | info | debug (default info)",
     .choices = "error|warn|info|debug", .values = levels},
    {ROW(CLI_HELP, "help", 'h', .size = 0), NULL, "this help"},
};

static const struct cli_opt nprocs_row = {ROW(CLI_CALL, "nprocs", 'n', J(nprocs)), "P",
                                          "number of local workers (default 1)",
                                          .call = set_nprocs};

/* "a: x, b: y" over a registry, into buf. */
#define JOIN(buf, i, get, fmt, ...)                                                       \
    do {                                                                                  \
        size_t len_ = 0;                                                                  \
        (buf)[0] = '\0';                                                                  \
        for (size_t i = 0; (get) && len_ < sizeof(buf); i++)                              \
            len_ += (size_t)snprintf((buf) + len_, sizeof(buf) - len_, fmt, __VA_ARGS__); \
    } while (0)

static void fill_help_texts(void)
{
    const struct sfb_model_ops *m;
    char l[160], r[160];
    snprintf(model_help, sizeof model_help, "model: %s (default %s)", sfb_model_names(),
             sfb_model_registry(0)->name);
    JOIN(l, i, (m = sfb_model_registry(i)), "%s%s %g", i ? ", " : "", m->name, m->default_lambda);
    snprintf(lambda_help, sizeof lambda_help, "regularizer: the model's L2, L1 or hinge\n"
                                              "weight (default %s)", l);
    JOIN(r, i, (m = sfb_model_registry(i)), "%s%s %g", i ? ", " : "", m->name, m->default_lr);
    snprintf(lr_help, sizeof lr_help, "step size per global minibatch (default\n%s)", r);
    JOIN(sync_meta, i, sfb_sync_registry_name(i), "%s%s", i ? "|" : "", sfb_sync_registry_name(i));
    snprintf(sync_meta + strlen(sync_meta), sizeof sync_meta - strlen(sync_meta), "|auto");
    JOIN(sync_help, i, sfb_sync_registry_name(i), "%s%s: %s", i ? "\n" : "",
         sfb_sync_registry_name(i), sfb_sync_registry_summary(i));
    snprintf(sync_help + strlen(sync_help), sizeof sync_help - strlen(sync_help),
             "\nauto: per matrix, the engine an alpha-beta cost model\n"
             "predicts faster (printed at start-up)\n"
             "E1,E2,...: one engine per matrix of the model\n(default sfb)");
    JOIN(sync_want, i, sfb_sync_registry_name(i), "%s%s", i ? ", " : "", sfb_sync_registry_name(i));
    snprintf(sync_want + strlen(sync_want), sizeof sync_want - strlen(sync_want),
             ", auto, or one engine per matrix (sfb,fms)");
    snprintf(topo_meta, sizeof topo_meta, "%s (default %s)", sfb_topo_names(),
             sfb_topo_registry_name(0));
    JOIN(topo_want, i, sfb_topo_registry_name(i), "%s%s",
         !i ? "" : sfb_topo_registry_name(i + 1) ? ", " : " or ", sfb_topo_registry_name(i));
}

/* Appends the models' own options (first model to name one wins). */
static size_t add_model_rows(struct cli_opt *t, size_t n, char (*help)[160], size_t cap)
{
    const struct sfb_model_ops *m;
    for (size_t i = 0; (m = sfb_model_registry(i)); i++) {
        for (const struct sfb_model_option *mo = m->options; mo && mo->name && n + 1 < cap; mo++) {
            size_t k = 0;
            while (k < n && !(t[k].name && !strcmp(t[k].name, mo->name))) k++;
            if (k < n) continue;
            snprintf(help[n], sizeof help[n], "%s: %s", m->name, mo->help);
            static const enum cli_kind kinds[] = {
                [SFB_MODEL_OPT_U32] = CLI_UINT,
                [SFB_MODEL_OPT_PATH] = CLI_STR,
                [SFB_MODEL_OPT_U32_LIST] = CLI_UINT_LIST,
            };
            static const size_t sizes[] = {
                [SFB_MODEL_OPT_U32] = sizeof(uint32_t),
                [SFB_MODEL_OPT_PATH] = sizeof(const char *),
                [SFB_MODEL_OPT_U32_LIST] = sizeof(struct sfb_model_u32_list),
            };
            t[n] = (struct cli_opt){kinds[mo->kind], mo->name, 0,
                                    offsetof(struct cli_job, model) + mo->offset,
                                    sizes[mo->kind], mo->metavar, help[n], .umin = mo->min,
                                    .umax = mo->max};
            n++;
        }
    }
    return n;
}

/* The whole table of `sfb run` and `sfb worker` into t (cap rows). -n is
 * row 0 for both: a worker refuses it with a message that says why
 * (set_nprocs), and its --help leaves it out. */
static void job_table(struct cli_opt *t, size_t cap, char (*help)[160])
{
    size_t n = 0;
    fill_help_texts();
    t[n++] = nprocs_row;
    for (size_t i = 0; i < sizeof job_rows / sizeof *job_rows; i++) t[n++] = job_rows[i];
    n = add_model_rows(t, n, help, cap - sizeof job_rows2 / sizeof *job_rows2 - 1);
    for (size_t i = 0; i < sizeof job_rows2 / sizeof *job_rows2; i++) t[n++] = job_rows2[i];
    t[n] = (struct cli_opt){.kind = CLI_END};
}

static void job_help(FILE *f, const struct cli_opt *table, int with_n)
{
    if (with_n)
        fprintf(f, "usage: sfb run -n P [options]\n\n"
                   "Starts P workers on this machine (shared-memory transport) and trains.\n"
                   "Each line of worker output is prefixed with its rank.\n\n");
    else
        fprintf(f, "usage: sfb worker [options]\n\n"
                   "One worker of a job. Started by a launcher: `mpirun -n P sfb worker ...`,\n"
                   "`srun --mpi=pmix sfb worker ...`, or with SFB_RANK, SFB_WORLD_SIZE,\n"
                   "SFB_RENDEZVOUS=host:port and SFB_JOB_KEY set (see README). Without any\n"
                   "of these it runs as a job of one worker, with a warning that says so.\n\n");
    cli_opt_help(f, with_n ? table : table + 1);
    fprintf(f, "Options are matched by their full names only. Output directories are\n"
               "checked writable before training starts.\n");
}

/* The environment rendezvous accepts worlds up to this size (src/boot/bootstrap.h). */
#define ENV_MAX_WORLD (1u << 20)

/* SFB_RANK and SFB_WORLD_SIZE of a worker of the environment rendezvous
 * (the bootstrap takes that path when SFB_RANK is set), each read into its
 * range before anything uses them: a rank of -1 read as an unsigned number
 * would name output files for four billion ranks. 0 (job->env_rank and
 * env_world set, or left 0 without SFB_RANK) or 2 with the message printed. */
static int env_rank_world(const char *cmd, struct cli_job *job)
{
    const char *rank = getenv("SFB_RANK"), *size = getenv("SFB_WORLD_SIZE");
    uint64_t w, r;
    if (!rank) return 0;
    if (cli_parse_u64(size, 1, ENV_MAX_WORLD, &w)) {
        fprintf(stderr, "sfb %s: SFB_WORLD_SIZE=\"%s\": expected an integer in 1..%u (SFB_RANK "
                        "is set: the environment rendezvous needs both)\n", cmd,
                size ? size : "", ENV_MAX_WORLD);
        return 2;
    }
    if (cli_parse_u64(rank, 0, w - 1, &r)) {
        fprintf(stderr, "sfb %s: SFB_RANK=\"%s\": expected an integer in 0..%llu (SFB_WORLD_SIZE "
                        "is %llu)\n", cmd, rank, (unsigned long long)w - 1, (unsigned long long)w);
        return 2;
    }
    job->env_world = (uint32_t)w;
    job->env_rank = (uint32_t)r;
    return 0;
}

/* The debugging options given become the trainer's environment variables
 * (every worker inherits them, forked or executed). 0, or 1 with the
 * message printed. */
static int set_debug_env(const char *cmd, struct cli_optparse *p, const struct cli_opt *table,
                         const struct cli_job *job)
{
    static const struct {
        const char *option, *var;
    } vars[] = {{"debug-delay-ms", "SFB_DEBUG_DELAY_MS"},
                {"debug-slow-rank", "SFB_DEBUG_SLOW_RANK"},
                {"debug-slow-factor", "SFB_DEBUG_SLOW_FACTOR"}};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        if (!cli_opt_given(p, table, vars[i].option)) continue;
        char v[64];
        if (i == 1)
            snprintf(v, sizeof v, "%d", job->debug_slow_rank);
        else
            snprintf(v, sizeof v, "%.17g", i ? job->debug_slow_factor : job->debug_delay_ms);
        if (setenv(vars[i].var, v, 1)) {
            fprintf(stderr, "sfb %s: --%s: %s\n", cmd, vars[i].option, strerror(errno));
            return 1;
        }
    }
    return 0;
}

int cli_parse_job(int argc, char **argv, const char *cmd, int with_n, struct cli_job *job)
{
    memset(job, 0, sizeof *job);
    sfb_train_default_settings(&job->train);
    /* the models' options, zero where not given (sfb_train_set_model_options
     * copies those set): not the defaults, but of this version */
    job->model.version = SFB_MODEL_SETTINGS_VERSION;
    job->debug_slow_rank = -1;
    job->debug_slow_factor = 1;
    job->nprocs = 1;
    job->with_n = with_n;
    job->out_dir = "sfb-out";
    job->log_level = SFB_LOG_INFO;
    struct cli_opt table[CLI_OPT_MAX];
    char help[CLI_OPT_MAX][160];
    job_table(table, CLI_OPT_MAX, help);
    struct cli_optparse p;
    cli_opt_init(&p, argc, argv, cmd);
    int r = cli_opt_parse(&p, table, job, (void *)cmd);
    if (r == CLI_OPT_HELP) job_help(stdout, table, with_n);
    if (r) return r;
    if (sfb_train_set_model_options(&job->train, &job->model)) {
        fprintf(stderr, "sfb %s: %s\n", cmd, sfb_last_error());
        return 1;
    }
    if (cli_opt_given(&p, table, "epochs") && cli_opt_given(&p, table, "clocks")) {
        fprintf(stderr, "sfb %s: --epochs and --clocks contradict each other: give one\n", cmd);
        return 2;
    }
    /* --flush eager given explicitly: the settings cannot tell it from the default */
    if (cli_opt_given(&p, table, "flush") && sfb_topo_is_overlay(job->train.topology) == 0) {
        fprintf(stderr, "sfb %s: --flush applies to an overlay; add --topology halton\n", cmd);
        return 2;
    }
    /* sfb launch --elastic's workers, or sfb run's forks (whose launcher
     * reads it too) */
    const char *elastic = getenv("SFB_ELASTIC");
    if (!cli_opt_given(&p, table, "elastic") && elastic && !strcmp(elastic, "1"))
        job->train.elastic = 1;
    if (with_n && job->train.elastic && setenv("SFB_ELASTIC", "1", 1)) {
        fprintf(stderr, "sfb %s: --elastic: %s\n", cmd, strerror(errno));
        return 1;
    }
    if (with_n && cli_opt_given(&p, table, "respawn")) {
        char v[16];
        snprintf(v, sizeof v, "%u", job->respawn);
        if (!job->train.elastic) {
            fprintf(stderr, "sfb %s: --respawn restarts the workers of an elastic job: add "
                            "--elastic\n", cmd);
            return 2;
        }
        if (setenv("SFB_RESPAWN", v, 1)) {
            fprintf(stderr, "sfb %s: --respawn: %s\n", cmd, strerror(errno));
            return 1;
        }
    }
    if (!with_n && (r = env_rank_world(cmd, job))) return r;
    /* the job reads it when it opens (every worker: forks and execs inherit it) */
    if (job->timeline && setenv("SFB_TIMELINE", job->timeline, 1)) {
        fprintf(stderr, "sfb %s: --timeline: %s\n", cmd, strerror(errno));
        return 1;
    }
    if ((r = set_debug_env(cmd, &p, table, job))) return r;
    uint32_t world = cli_known_world(job, with_n);
    if (sfb_train_check_settings(&job->train, world)) {
        fprintf(stderr, "sfb %s: %s\n", cmd, sfb_last_error());
        return 2;
    }
    return cli_paths_build(job, cmd, world);
}

char **cli_worker_argv(int argc, char **argv, char *self)
{
    struct cli_opt table[CLI_OPT_MAX];
    char help[CLI_OPT_MAX][160];
    job_table(table, CLI_OPT_MAX, help);
    size_t cap = (size_t)argc + 3;
    for (int i = 1; i < argc; i++) cap += strlen(argv[i]);
    char **out = calloc(cap, sizeof *out);
    if (!out) return NULL;
    out[0] = strdup(self);
    out[1] = strdup("worker");
    struct cli_optparse p;
    cli_opt_init(&p, argc, argv, "run");
    int n = out[0] && out[1] ? cli_opt_canonical(&p, table, "nprocs", out + 2, cap - 3) : -1;
    if (n < 0) {
        cli_free_argv(out);
        return NULL;
    }
    return out;
}

void cli_free_argv(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++) free(argv[i]);
    free(argv);
}

uint32_t cli_known_world(const struct cli_job *job, int with_n)
{
    return with_n ? (uint32_t)job->nprocs : job->env_world;
}
