// core/dist.h: several processes, shared by both trainers. Who this process is (rank, world size, local rank:
// from MPI when an MPI launcher started it, else from the torchrun-style RANK / WORLD_SIZE / LOCAL_RANK),
// how ZeRO shards the parameter vector, and the MPI collectives of the CPU trainer (the CUDA trainer
// does the same steps with NCCL and uses MPI only to start). Built without MPI (no USE_MPI), a run is
// one process and every collective is the identity.
#ifndef DIST_H
#define DIST_H

#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef USE_MPI
#include <mpi.h>
#endif

#include "common.h"
#include "fp8_scaling.h"
#include "gpt_model.h"

typedef struct {
    int rank, world_size, local_rank;
    int mpi;       // 1: the ranks come from MPI and MPI carries the host-side collectives
    int timeout_s; // --nccl_timeout_s: the longest wait for the other processes
    // --shard_group_size: ZeRO shards over groups of group_size consecutive ranks (a node), each group a
    // replica of the others; without it one group of all ranks
    int group_size, group_rank; // this rank's group and its place in it
    int replicas, replica;      // groups, and which one this rank is in
#ifdef USE_MPI
    MPI_Comm group_comm, replica_comm; // the ranks of this group; the ranks of this place in every group
#endif
} Dist;

#define DIST_DEFAULT_TIMEOUT_S 300 // until the flags are read (cli.h's default)

// An environment variable as a non-negative int, or -1 when unset; a malformed value is an error.
static inline int dist_env_int(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > INT_MAX) fail("environment %s=%s: not a non-negative integer", name, s);
    return (int)v;
}

// Set by mpirun (OpenMPI, MPICH / Hydra) and by srun with PMI or PMIx: MPI_Init is called only then, so
// a plain single-process run never depends on an MPI runtime.
static inline int dist_launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
           getenv("MPI_LOCALRANKID");
}

// The first of the variables that is set, as dist_env_int reads it, or -1.
static inline int dist_env_first(const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (getenv(names[i]) && *getenv(names[i])) return dist_env_int(names[i]);
    return -1;
}

// Whether the ranks come from MPI. torchrun's RANK / WORLD_SIZE win where an MPI launcher's variables
// are set too and say otherwise: `srun torchrun ...` on a PMIx cluster starts several workers inside one
// MPI task, whom MPI_Init would make one and the same rank. Where they agree (a launcher that exports
// both), MPI: it also carries the host-side collectives.
static inline int dist_ranks_from_mpi(void) {
    if (!dist_launched_by_mpi()) return 0;
    if (dist_env_int("WORLD_SIZE") < 0) return 1;
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    return dist_env_first(sizes, 3) == dist_env_int("WORLD_SIZE") &&
           dist_env_first(ranks, 3) == dist_env_int("RANK");
}

static inline void dist_from_env(Dist *d) {
    int rank = dist_env_int("RANK"), world = dist_env_int("WORLD_SIZE"), local = dist_env_int("LOCAL_RANK");
    if (world < 0) return;
    if (world < 1 || rank < 0 || rank >= world)
        fail("environment RANK=%d WORLD_SIZE=%d: RANK must be in [0, WORLD_SIZE)", rank, world);
    d->rank = rank;
    d->world_size = world;
    d->local_rank = local < 0 ? 0 : local;
}

// Shard groups of group_size consecutive ranks (cli.h's resolve_shard_group has checked that it divides
// the world size): with MPI, a communicator for each group and one for each place across the groups.
static inline void dist_set_shard_group(Dist *d, int group_size) {
    d->group_size = group_size;
    d->group_rank = d->rank % group_size;
    d->replicas = d->world_size / group_size;
    d->replica = d->rank / group_size;
#ifdef USE_MPI
    if (d->mpi && d->replicas > 1) {
        MPI_Comm_split(MPI_COMM_WORLD, d->replica, d->rank, &d->group_comm);
        MPI_Comm_split(MPI_COMM_WORLD, d->group_rank, d->rank, &d->replica_comm);
    }
#endif
}

// One process, no MPI: what dist_init starts from, and what tools and tests that run the trainers' code
// in one process use.
static inline Dist dist_single(void) {
    Dist d;
    memset(&d, 0, sizeof(d));
    d.world_size = 1;
    d.timeout_s = DIST_DEFAULT_TIMEOUT_S;
    dist_set_shard_group(&d, 1);
#ifdef USE_MPI
    d.group_comm = MPI_COMM_WORLD;
    d.replica_comm = MPI_COMM_SELF;
#endif
    return d;
}

// mpirun (OpenMPI) started several processes, and RANK / WORLD_SIZE say otherwise: torchrun does not run
// under mpirun, so they are exports left from another launch, and each process would take itself for
// another rank than MPI's.
static inline void dist_refuse_stale_env(void) {
    int mpi_world = dist_env_int("OMPI_COMM_WORLD_SIZE"), mpi_rank = dist_env_int("OMPI_COMM_WORLD_RANK");
    if (mpi_world > 1 && dist_env_int("WORLD_SIZE") >= 0 &&
        (dist_env_int("WORLD_SIZE") != mpi_world || dist_env_int("RANK") != mpi_rank))
        fail("environment RANK=%s WORLD_SIZE=%s disagree with mpirun's rank %d of %d: unset RANK and "
             "WORLD_SIZE (left exported from another launch?) or do not pass them to mpirun with -x",
             getenv("RANK") ? getenv("RANK") : "(unset)", getenv("WORLD_SIZE"), mpi_rank, mpi_world);
}

static inline void dist_init(Dist *d, int *argc, char ***argv) {
    *d = dist_single();
    dist_refuse_stale_env();
#ifdef USE_MPI
    if (dist_ranks_from_mpi()) {
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &d->world_size);
        MPI_Comm node; // the processes sharing this node: the local rank picks the GPU
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &d->local_rank);
        MPI_Comm_free(&node);
        d->mpi = 1;
        dist_set_shard_group(d, d->world_size); // one group: all the ranks
        return;
    }
#else
    (void)argc;
    (void)argv;
    if (dist_ranks_from_mpi() && (dist_env_int("OMPI_COMM_WORLD_SIZE") > 1 || dist_env_int("PMI_SIZE") > 1))
        fail("started by an MPI launcher, but this binary was built without MPI (install libopenmpi-dev and "
             "rebuild)");
#endif
    dist_from_env(d);
    dist_set_shard_group(d, d->world_size); // one group: all the ranks
    // srun without an MPI plugin starts every task as a lone process: each would train alone and all would
    // write one output directory.
    int slurm_tasks = dist_env_int("SLURM_STEP_NUM_TASKS");
    if (d->world_size == 1 && slurm_tasks > 1)
        fail(
            "srun started %d tasks without MPI ranks: use srun --mpi=pmix (or pmi2), or set RANK, WORLD_SIZE "
            "and LOCAL_RANK",
            slurm_tasks);
}

// Non-zero ranks print nothing to stdout: one log for the whole run. Errors (stderr) still name their rank.
static inline void dist_quiet_other_ranks(const Dist *d) {
    if (d->rank != 0 && !freopen("/dev/null", "w", stdout)) fail("rank %d: cannot silence stdout", d->rank);
}

// " in G groups of N" for the banners of a run with several shard groups, else "".
static inline const char *shard_groups_label(const Dist *d) {
    static char label[64];
    label[0] = '\0';
    if (d->replicas > 1) snprintf(label, sizeof(label), " in %d groups of %d", d->replicas, d->group_size);
    return label;
}

static inline void dist_finalize(Dist *d) {
#ifdef USE_MPI
    if (d->mpi && d->replicas > 1) {
        MPI_Comm_free(&d->group_comm);
        MPI_Comm_free(&d->replica_comm);
    }
    if (d->mpi) MPI_Finalize();
#endif
    d->mpi = 0;
}

// ----------------------------------------------------------------------------
// ZeRO sharding of the FP32 parameter vector (and of its gradients and AdamW moments).
// The vector is cut into units: ZeRO-1 one unit (the whole vector), ZeRO-3 the global tensors (wte, wpe,
// lnf) and then one unit per layer, so that a layer can be gathered alone. A unit of n elements is
// padded to ways * chunk, chunk = ceil(n / ways) rounded up to SHARD_ALIGN: rank r owns elements [r*chunk,
// min((r+1)*chunk, n)) of every unit (possibly none), and its shard buffer holds its chunks of all units in
// unit order. Padding elements stay zero. ZeRO-0 is one unit over one way: every rank owns everything.

// All of it runs on the host and in kernels (GPT_HD): the CUDA trainer's shard kernels evaluate the same
// layout as the CPU trainer, the checkpoints and the memory plan.

GPT_HD static inline int shard_ways(int zero_stage, int world_size) {
    return zero_stage == 0 ? 1 : world_size;
}

GPT_HD static inline int shard_num_units(const GPTConfig *cfg, int zero_stage) {
    return zero_stage == 3 ? 1 + cfg->num_layers : 1;
}

// Start (in the full vector) and elements of unit `unit`.
GPT_HD static inline void shard_unit_range(const GPTConfig *cfg, int zero_stage, int unit, size_t *start,
                                           size_t *size) {
    size_t global = param_global_size(cfg), layer = param_layer_size(cfg);
    if (zero_stage != 3) {
        *start = 0;
        *size = global + (size_t)cfg->num_layers * layer;
    } else if (unit == 0) {
        *start = 0;
        *size = global;
    } else {
        *start = global + (size_t)(unit - 1) * layer;
        *size = layer;
    }
}

// A chunk is rounded up to SHARD_ALIGN elements (several ways only) so that every rank's chunk starts
// 64-byte aligned even in FP8: NCCL's collectives run their fast path on aligned buffers.
#define SHARD_ALIGN 64
GPT_HD static inline size_t shard_chunk(size_t unit_size, int ways) {
    size_t chunk = (unit_size + (size_t)ways - 1) / (size_t)ways;
    return ways == 1 ? chunk : (chunk + SHARD_ALIGN - 1) / SHARD_ALIGN * SHARD_ALIGN;
}

// Elements of a unit that rank `rank` really owns (the rest of its chunk is padding).
GPT_HD static inline size_t shard_owned(size_t unit_size, int ways, int rank) {
    size_t chunk = shard_chunk(unit_size, ways), begin = (size_t)rank * chunk;
    if (begin >= unit_size) return 0;
    return unit_size - begin < chunk ? unit_size - begin : chunk;
}

// Offset of unit `unit`'s chunk in the shard buffer, and (unit = number of units) the buffer's size.
// Every layer unit has the same size, so the offset is closed-form.
GPT_HD static inline size_t shard_offset(const GPTConfig *cfg, int zero_stage, int world_size, int unit) {
    if (unit == 0) return 0;
    int ways = shard_ways(zero_stage, world_size);
    size_t start, first, layer;
    shard_unit_range(cfg, zero_stage, 0, &start, &first);
    if (zero_stage != 3) return shard_chunk(first, ways);
    shard_unit_range(cfg, zero_stage, 1, &start, &layer);
    return shard_chunk(first, ways) + (size_t)(unit - 1) * shard_chunk(layer, ways);
}

GPT_HD static inline size_t shard_size(const GPTConfig *cfg, int zero_stage, int world_size) {
    return shard_offset(cfg, zero_stage, world_size, shard_num_units(cfg, zero_stage));
}

// One rank's view of the layout, as a value a kernel can take, and one unit as that rank sees it.
typedef struct {
    GPTConfig cfg;
    int zero_stage, world_size;
    int ways, rank; // rank: this process's chunk of every unit (0 with one way, where it owns everything)
} ShardMap;

typedef struct {
    size_t start, size; // the unit in the parameter vector
    size_t chunk;       // the unit is padded to ways * chunk for the collectives
    size_t owned;       // elements of this rank's chunk that are real (the rest is padding)
    size_t shard;       // offset of this rank's chunk in its shard buffer
} ShardUnit;

GPT_HD static inline ShardMap shard_map(const GPTConfig *cfg, int zero_stage, int world_size, int rank) {
    ShardMap m;
    m.cfg = *cfg;
    m.zero_stage = zero_stage;
    m.world_size = world_size;
    m.ways = shard_ways(zero_stage, world_size);
    m.rank = m.ways == 1 ? 0 : rank;
    return m;
}

GPT_HD static inline ShardUnit shard_map_unit(const ShardMap *m, int unit) {
    ShardUnit u;
    shard_unit_range(&m->cfg, m->zero_stage, unit, &u.start, &u.size);
    u.chunk = shard_chunk(u.size, m->ways);
    u.owned = shard_owned(u.size, m->ways, m->rank);
    u.shard = shard_offset(&m->cfg, m->zero_stage, m->world_size, unit);
    return u;
}

// Where this rank's chunk of unit u begins in the parameter vector.
GPT_HD static inline size_t shard_unit_begin(const ShardMap *m, const ShardUnit *u) {
    return u->start + (size_t)m->rank * u->chunk;
}

// ----------------------------------------------------------------------------
// Host-side collectives over MPI (the CPU trainer's gradients and amaxes, every trainer's small values).

#ifdef USE_MPI
// MPI counts are int: a larger buffer goes in pieces.
#define DIST_MPI_PIECE ((size_t)1 << 30)

// Every collective is non-blocking and waited for at most --nccl_timeout_s: a peer that died, hangs or is
// cut off ends this process with one line (and mpirun the others) instead of holding every process until
// the allocation ends.
static inline void dist_wait(const Dist *d, MPI_Request *request, const char *what, size_t count) {
    double start = wall_time_ms();
    for (int done = 0;;) {
        MPI_Test(request, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (wall_time_ms() - start > 1e3 * d->timeout_s)
            fail("rank %d: %s of %zu elements: no progress in --nccl_timeout_s %d s: another process stopped "
                 "answering (hung, killed or cut off)",
                 d->rank, what, count, d->timeout_s);
        sched_yield();
    }
}

// Over `ranks` processes of communicator comm.
static inline void dist_allreduce_on(const Dist *d, MPI_Comm comm, int ranks, void *buf, size_t n,
                                     MPI_Datatype type, size_t elem_bytes, MPI_Op op) {
    if (!d->mpi || ranks == 1) return;
    for (size_t done = 0; done < n; done += DIST_MPI_PIECE) {
        size_t piece = n - done < DIST_MPI_PIECE ? n - done : DIST_MPI_PIECE;
        MPI_Request request;
        MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + done * elem_bytes, (int)piece, type, op, comm, &request);
        dist_wait(d, &request, "MPI_Allreduce", piece);
    }
}

static inline void dist_allreduce(const Dist *d, void *buf, size_t n, MPI_Datatype type, size_t elem_bytes,
                                  MPI_Op op) {
    dist_allreduce_on(d, MPI_COMM_WORLD, d->world_size, buf, n, type, elem_bytes, op);
}

// Counts and displacements of a unit split over the ranks of a group: place r gets its owned elements.
static inline void dist_unit_counts(const Dist *d, size_t unit_size, int *counts, int *displs) {
    size_t chunk = shard_chunk(unit_size, d->group_size);
    // Not only every count but every displacement (up to the last owner's start) and MPI's own sum of
    // the counts must fit an int: a chunk that fits is not enough.
    if (unit_size > INT_MAX)
        fail("a ZeRO unit of %zu elements is too large for one MPI collective", unit_size);
    for (int r = 0; r < d->group_size; r++) {
        counts[r] = (int)shard_owned(unit_size, d->group_size, r);
        displs[r] = (int)((size_t)r * chunk < unit_size ? (size_t)r * chunk : 0);
    }
}
#endif

static inline void dist_sum_floats(const Dist *d, float *buf, size_t n) {
#ifdef USE_MPI
    dist_allreduce(d, buf, n, MPI_FLOAT, sizeof(float), MPI_SUM);
#else
    (void)d, (void)buf, (void)n;
#endif
}

static inline void dist_max_floats(const Dist *d, float *buf, size_t n) {
#ifdef USE_MPI
    dist_allreduce(d, buf, n, MPI_FLOAT, sizeof(float), MPI_MAX);
#else
    (void)d, (void)buf, (void)n;
#endif
}

static inline void dist_sum_doubles(const Dist *d, double *buf, size_t n) {
#ifdef USE_MPI
    dist_allreduce(d, buf, n, MPI_DOUBLE, sizeof(double), MPI_SUM);
#else
    (void)d, (void)buf, (void)n;
#endif
}

static inline void dist_sum_counts(const Dist *d, unsigned long long *buf, size_t n) {
#ifdef USE_MPI
    dist_allreduce(d, buf, n, MPI_UNSIGNED_LONG_LONG, sizeof(unsigned long long), MPI_SUM);
#else
    (void)d, (void)buf, (void)n;
#endif
}

// buf (this rank's gradient shard) summed over the groups: every replica of a place gets the sum.
static inline void dist_sum_floats_across_groups(const Dist *d, float *buf, size_t n) {
#ifdef USE_MPI
    dist_allreduce_on(d, d->replica_comm, d->replicas, buf, n, MPI_FLOAT, sizeof(float), MPI_SUM);
#else
    (void)d, (void)buf, (void)n;
#endif
}

// values summed over the ranks of this group (each holds a part of what every group holds whole).
static inline void dist_sum_doubles_in_group(const Dist *d, double *buf, size_t n) {
#ifdef USE_MPI
    dist_allreduce_on(d, d->group_comm, d->group_size, buf, n, MPI_DOUBLE, sizeof(double), MPI_SUM);
#else
    (void)d, (void)buf, (void)n;
#endif
}

// values = their sum over the ranks, every rank calling it at the same point: the start-up agreements of
// run_control.h and run_files.h, over each trainer's own collectives (MPI on the CPU, NCCL on the GPU).
typedef void (*RankSum)(void *ctx, double *values, int n);

// Returns once every rank has called it: a sum of nothing over sum's collective.
static inline void rank_sum_barrier(RankSum sum, void *ctx) {
    double nothing = 0.0;
    sum(ctx, &nothing, 1);
}

// RankSum over MPI's host collectives (the CPU trainer's).
static inline void dist_rank_sum(void *dist, double *values, int n) {
    dist_sum_doubles((const Dist *)dist, values, (size_t)n);
}

// The global mean of a value every rank holds one of.
static inline double dist_mean(const Dist *d, double value) {
    dist_sum_doubles(d, &value, 1);
    return value / d->world_size;
}

// shard (this rank's owned elements) = sum over the group's ranks of full (unit_size elements). The
// padding of the chunk is left as it is.
static inline void dist_reduce_scatter_unit(const Dist *d, const float *full, size_t unit_size,
                                            float *shard) {
#ifdef USE_MPI
    if (d->mpi && d->group_size > 1) {
        int *counts = (int *)malloc_check(2 * d->group_size * sizeof(int), "MPI counts"),
            *displs = counts + d->group_size;
        dist_unit_counts(d, unit_size, counts, displs);
        MPI_Request request;
        MPI_Ireduce_scatter(full, shard, counts, MPI_FLOAT, MPI_SUM, d->group_comm, &request);
        dist_wait(d, &request, "MPI_Reduce_scatter", unit_size);
        free(counts);
        return;
    }
#endif
    (void)d;
    memcpy(shard, full, unit_size * sizeof(float));
}

// --grad_reduce_dtype bfloat16: the sum NCCL computes over BF16 buffers, in the order the CUDA emulation's
// NCCL takes (emu/nccl.cpp: rank after rank, the running sum rounded to BF16 after every addition), so that
// train_cpu and the emulated CUDA trainer agree bit for bit. Each rank's values, rounded to BF16, are
// gathered in pieces (2 bytes an element a rank: the CPU trainer's models are small) and summed on every
// rank. buf (n values) on every rank of comm = that sum.
#define DIST_BF16_PIECE ((size_t)1 << 22)
#ifdef USE_MPI
static inline void dist_sum_bf16_on(const Dist *d, MPI_Comm comm, int ranks, float *buf, size_t n) {
    if (!d->mpi || ranks == 1) return;
    size_t most = n < DIST_BF16_PIECE ? n : DIST_BF16_PIECE;
    uint16_t *mine = (uint16_t *)malloc_check((ranks + 1) * most * sizeof(uint16_t), "BF16 gradient sum"),
             *all = mine + most;
    for (size_t done = 0; done < n; done += most) {
        size_t piece = n - done < most ? n - done : most;
        for (size_t i = 0; i < piece; i++) mine[i] = bf16_from_float(buf[done + i]);
        MPI_Request request;
        MPI_Iallgather(mine, (int)piece, MPI_UINT16_T, all, (int)piece, MPI_UINT16_T, comm, &request);
        dist_wait(d, &request, "MPI_Allgather", piece);
        for (size_t i = 0; i < piece; i++) {
            float sum = bf16_to_float(all[i]);
            for (int r = 1; r < ranks; r++) sum = bf16_round(sum + bf16_to_float(all[(size_t)r * piece + i]));
            buf[done + i] = sum;
        }
    }
    free(mine);
}
#endif

// dist_sum_floats, dist_sum_floats_across_groups and dist_reduce_scatter_unit in BF16 (full is overwritten).
static inline void dist_sum_floats_bf16(const Dist *d, float *buf, size_t n) {
#ifdef USE_MPI
    dist_sum_bf16_on(d, MPI_COMM_WORLD, d->world_size, buf, n);
#else
    (void)d, (void)buf, (void)n;
#endif
}

static inline void dist_sum_floats_across_groups_bf16(const Dist *d, float *buf, size_t n) {
#ifdef USE_MPI
    dist_sum_bf16_on(d, d->replica_comm, d->replicas, buf, n);
#else
    (void)d, (void)buf, (void)n;
#endif
}

static inline void dist_reduce_scatter_unit_bf16(const Dist *d, float *full, size_t unit_size, float *shard) {
    size_t begin = (size_t)d->group_rank * shard_chunk(unit_size, d->group_size);
#ifdef USE_MPI
    dist_sum_bf16_on(d, d->group_comm, d->group_size, full, unit_size);
#endif
    if (begin < unit_size)
        memcpy(shard, full + begin, shard_owned(unit_size, d->group_size, d->group_rank) * sizeof(float));
}

// full (unit_size elements) = the owned elements of every rank of the group, in order.
static inline void dist_allgather_unit(const Dist *d, const float *shard, float *full, size_t unit_size) {
#ifdef USE_MPI
    if (d->mpi && d->group_size > 1) {
        int *counts = (int *)malloc_check(2 * d->group_size * sizeof(int), "MPI counts"),
            *displs = counts + d->group_size;
        dist_unit_counts(d, unit_size, counts, displs);
        MPI_Request request;
        MPI_Iallgatherv(shard, counts[d->group_rank], MPI_FLOAT, full, counts, displs, MPI_FLOAT,
                        d->group_comm, &request);
        dist_wait(d, &request, "MPI_Allgatherv", unit_size);
        free(counts);
        return;
    }
#endif
    (void)d;
    memcpy(full, shard, unit_size * sizeof(float));
}

static inline void dist_barrier(const Dist *d) {
#ifdef USE_MPI
    if (d->mpi && d->world_size > 1) {
        MPI_Request request;
        MPI_Ibarrier(MPI_COMM_WORLD, &request);
        dist_wait(d, &request, "MPI_Barrier", 0);
    }
#else
    (void)d;
#endif
}

// --inject_stall_rank: the chosen rank stops answering, as a hung process would, until it is killed; the
// others must end on --nccl_timeout_s.
static inline void dist_stall_if_chosen(const Dist *d, int rank) {
    if (d->rank != rank) return;
    fflush(stdout);
    for (;;) pause();
}

// The host-side collectives above need MPI: a multi-process run without it is refused.
static inline void dist_require_mpi(const Dist *d, const char *program) {
    if (d->world_size > 1 && !d->mpi)
        fail("WORLD_SIZE=%d: %s exchanges data through MPI; start it with mpirun or srun (scripts/launch.sh)",
             d->world_size, program);
}

#endif // DIST_H
