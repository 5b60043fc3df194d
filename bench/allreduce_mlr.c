/* Data-parallel MLR SGD with the dense gradient summed by MPI_Allreduce:
 * the baseline of bench/vs_allreduce.py. The step rule is the runtime's
 * (src/train/train.c): each rank's minibatch of S samples gives its SFs with scale
 * −η/P (sfb_model_factors), reconstructed into a zeroed dense ΔA (one sgemm);
 * the P ΔAs are summed with MPI_Allreduce and added to the replica, then the
 * local regularizer step. Same data, sharding and order as `sfb run`.
 *
 * Usage (under mpirun): allreduce_mlr DATA S CLOCKS LR [SEED]
 * Prints one JSON line on rank 0: samples/s, bytes per clock, the time spent
 * in MPI_Allreduce, and the final objective. */
#include <sfb/sfb.h>

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "allreduce_mlr: %s: %s\n", what, sfb_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: allreduce_mlr DATA S CLOCKS LR [SEED]\n");
        MPI_Finalize();
        return 2;
    }
    const char *data = argv[1];
    uint32_t s = (uint32_t)atoi(argv[2]);
    uint64_t clocks = strtoull(argv[3], NULL, 10);
    double lr = atof(argv[4]);
    uint64_t seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;

    sfb_set_blas_threads(1); /* as `sfb worker` (default --threads 1) */
    struct sfb_libsvm_settings ls;
    sfb_libsvm_default_settings(&ls);
    struct sfb_dataset train, test;
    /* this rank's shard, as `sfb run` loads it (docs/design.md, "Data") */
    struct sfb_shard shard = {(uint32_t)rank, (uint32_t)world, seed};
    uint64_t train_rows = 0;
    if (sfb_data_load_shard(data, NULL, &ls, &shard, &train, NULL, &train_rows))
        return fail("data");
    memset(&test, 0, sizeof test);
    struct sfb_model_settings ms;
    sfb_model_default_settings(&ms);
    ms.kind = "mlr";
    ms.d = train.d;
    ms.k = train.k;
    ms.seed = seed;
    ms.lambda = 0;
    struct sfb_model *m = NULL;
    if (sfb_model_open(&m, &ms)) return fail("model");
    struct sfb_sampler *sampler = NULL;
    if (sfb_sampler_open(&sampler, train_rows, (uint32_t)rank, (uint32_t)world, s, seed))
        return fail("sampler");
    struct sfb_matrix *a = sfb_model_matrix(m, 0);
    size_t n_el = (size_t)a->rows * a->cols;
    float *delta = malloc(n_el * sizeof *delta);
    uint64_t *idx = malloc(s * sizeof *idx);
    struct sfb_reconstruct *recon = NULL;
    struct sfb_sf sf[SFB_MODEL_MAX_MATRICES];
    memset(sf, 0, sizeof sf);
    if (!delta || !idx || sfb_reconstruct_open(&recon)) return fail("memory");
    struct sfb_train_settings ts;
    sfb_train_default_settings(&ts);
    ts.lr = lr;
    ts.lr_schedule = SFB_LR_CONSTANT;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), comm = 0, loss_last = 0;
    uint64_t last_n = 0;
    for (uint64_t t = 0; t < clocks; t++) {
        double eta = sfb_train_lr(&ts, t, 1);
        double loss = 0;
        if (sfb_sampler_batch(sampler, t, idx)) return fail("sampler");
        if (sfb_model_factors(m, &train, idx, s, (float)(eta / world), sf, &loss))
            return fail("factors");
        memset(delta, 0, n_el * sizeof *delta);
        struct sfb_matrix dm = {a->rows, a->cols, delta};
        const struct sfb_sf *one = &sf[0];
        if (sfb_reconstruct_apply(recon, &dm, &one, 1)) return fail("reconstruct");
        double c0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, delta, (int)n_el, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        comm += MPI_Wtime() - c0;
        for (size_t i = 0; i < n_el; i++)
            a->data[i] += delta[i];
        sfb_model_apply_local(m, (float)eta);
        if (t + 5 >= clocks) { /* objective of the last clocks, as the bench smooths */
            loss_last += loss / s;
            last_n++;
        }
    }
    double wall = MPI_Wtime() - t0;
    double sums[2] = {loss_last, comm}, tot[2];
    MPI_Reduce(sums, tot, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    double my_wall = wall; /* the slowest rank's */
    MPI_Reduce(&my_wall, &wall, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        /* ring all-reduce: 2·(P−1)/P of the buffer out of every rank */
        double bytes = 2.0 * (world - 1) / world * (double)n_el * sizeof(float);
        printf("{\"world\":%d,\"k\":%u,\"d\":%u,\"s\":%u,\"clocks\":%llu,\"wall\":%.6g,"
               "\"samples_per_s\":%.6g,\"allreduce_s\":%.6g,\"wait_fraction\":%.4g,"
               "\"bytes_per_clock\":%.6g,\"final_objective\":%.6g}\n",
               world, a->rows, a->cols, s, (unsigned long long)clocks, wall,
               (double)clocks * s * world / wall, tot[1] / world, tot[1] / world / wall, bytes,
               last_n ? tot[0] / world / (double)last_n : NAN);
    }
    sfb_reconstruct_close(&recon);
    for (int i = 0; i < SFB_MODEL_MAX_MATRICES; i++)
        sfb_sf_free(&sf[i]);
    free(delta);
    free(idx);
    sfb_sampler_close(&sampler);
    sfb_model_close(&m);
    sfb_dataset_free(&train);
    sfb_dataset_free(&test);
    MPI_Finalize();
    return 0;
}
