// gpu/nccl.cuh: the NCCL communicator of a run of several processes (one GPU each) and the collectives the
// trainer uses, each the identity when the run is one process (no communicator, no NCCL call at all).
// The communicator needs one unique id that rank 0 draws and every rank learns before it joins:
//  - started by MPI (mpirun, srun): rank 0 broadcasts it with MPI_Bcast;
//  - NCCL_COMM_ID=<host>:<port> set (any launcher): every rank derives it from that address, where rank 0
//    listens; no file (NCCL's other ranks retry connecting for some 20-60 s, NCCL_SOCKET_RETRY_CNT: start
//    rank 0 no later than that);
//  - started torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, no MPI): rank 0 writes it to a file in
//    --output_dir (temp file + rename, so nobody reads half of it) and the others poll for it, which needs
//    a directory every rank sees: one node, or a filesystem the nodes share. The file's name carries a
//    value unique to the launch (torchrun's run id and restart count, or Slurm's job, step and requeue
//    count), so a file an earlier, killed launch left behind is never read; a launch without one is
//    refused. Rank 0 removes it once every rank has joined (or at exit).
// The communicator is non-blocking and every wait on it is bounded: a peer that died, hangs or lost its
// link ends the run after --nccl_timeout_s with one line naming the rank and the collective (the
// communicator aborted first, so that its kernels exit), for the launcher's requeue and --resume to take
// over, instead of holding every other GPU until the allocation ends.
// Collectives are in place, as NCCL defines it: all-gather when sendbuff == recvbuff + rank * sendcount,
// reduce-scatter when recvbuff == sendbuff + rank * recvcount.
#ifndef GPU_NCCL_CUH
#define GPU_NCCL_CUH

#include <nccl.h>
#include <unistd.h>

#include "../core/atomic_file.h"
#include "../core/dist.h"
#include "common.cuh"

#define nccl_check(call) nccl_check_at((call), #call, __FILE__, __LINE__)
static inline void nccl_check_at(ncclResult_t result, const char *what, const char *file, int line) {
    if (result != ncclSuccess) fail("NCCL: %s: %s (%s:%d)", what, ncclGetErrorString(result), file, line);
}

typedef struct {
    ncclComm_t comm; // NULL when the run is one process
    int rank, world_size;
    int timeout_s;       // --nccl_timeout_s
    cudaEvent_t drained; // recorded to wait for a stream
} Comm;

#define NCCL_ID_FILE_MAGIC 20261202

// The collectives this process has enqueued on any of its communicators, and the last of them: the
// message of a wait that fails names it.
static unsigned long long collectives_issued;
static char last_collective[96];

// Every communicator this process holds (the world's, and with --shard_group_size its group's and its
// replicas'), in creation order: each wait polls them all, and a failure aborts them all, the split ones
// first (a kernel of one left spinning would hold the others' abort, which frees device memory).
#define MAX_LIVE_COMMS 3
static ncclComm_t live_comms[MAX_LIVE_COMMS];

static inline void comm_register(ncclComm_t comm) {
    for (int i = 0; i < MAX_LIVE_COMMS; i++)
        if (!live_comms[i]) {
            live_comms[i] = comm;
            return;
        }
    fail("internal: more than %d NCCL communicators", MAX_LIVE_COMMS);
}

static inline int comm_is_live(ncclComm_t comm) {
    for (int i = 0; i < MAX_LIVE_COMMS; i++)
        if (live_comms[i] == comm) return 1;
    return 0;
}

static inline void comm_unregister(ncclComm_t comm) {
    for (int i = 0; i < MAX_LIVE_COMMS; i++)
        if (live_comms[i] == comm) live_comms[i] = NULL;
}

// Ends the run: every communicator aborted (their kernels exit, the device can be left), then one line.
__attribute__((noreturn)) static inline void comm_fail(Comm *c, const char *what, const char *why) {
    for (int i = MAX_LIVE_COMMS - 1; i >= 0; i--)
        if (live_comms[i]) ncclCommAbort(live_comms[i]);
    if (c->comm && !comm_is_live(c->comm)) ncclCommAbort(c->comm); // one still being created
    memset(live_comms, 0, sizeof(live_comms));
    c->comm = NULL;
    char last[192] = "";
    if (collectives_issued)
        snprintf(last, sizeof(last), " (the last NCCL collective this rank issued: #%llu, %s)",
                 collectives_issued, last_collective);
    fail("rank %d: %s: %s%s; the communicator was aborted", c->rank, what, why, last);
}

// The outcome of an NCCL call on the non-blocking communicator: ncclInProgress is polled until it settles,
// at most --nccl_timeout_s. A collective's enqueue settles in microseconds (NCCL reports it in progress
// even so), creation in up to seconds: the first polls spin, later ones sleep a millisecond.
static inline void comm_settle(Comm *c, ncclResult_t result, const char *what) {
    double start = wall_time_ms();
    for (int polls = 0; result == ncclInProgress; polls++) {
        if (wall_time_ms() - start > 1e3 * c->timeout_s) {
            char why[96];
            snprintf(why, sizeof(why), "not complete after --nccl_timeout_s %d s", c->timeout_s);
            comm_fail(c, what, why);
        }
        if (polls >= 1000) usleep(1000);
        nccl_check(ncclCommGetAsyncError(c->comm, &result));
    }
    if (result != ncclSuccess) comm_fail(c, what, ncclGetErrorString(result));
}

// Returns once `event` has completed. One process: a plain synchronisation (nothing waits on a peer).
// Several: a poll that ends the run on an NCCL error or after --nccl_timeout_s.
static inline void comm_wait_event(Comm *c, cudaEvent_t event, const char *what) {
    if (!c->comm) {
        cuda_check(cudaEventSynchronize(event));
        return;
    }
    double start = wall_time_ms();
    for (;;) {
        cudaError_t status = cudaEventQuery(event);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) cuda_check(status);
        for (int i = 0; i < MAX_LIVE_COMMS; i++) {
            ncclResult_t async = ncclSuccess;
            if (live_comms[i]) nccl_check(ncclCommGetAsyncError(live_comms[i], &async));
            if (async != ncclSuccess && async != ncclInProgress)
                comm_fail(c, what, ncclGetErrorString(async));
        }
        if (wall_time_ms() - start > 1e3 * c->timeout_s) {
            char why[160];
            snprintf(why, sizeof(why),
                     "no progress in --nccl_timeout_s %d s: another process stopped answering (hung, killed "
                     "or cut off)",
                     c->timeout_s);
            comm_fail(c, what, why);
        }
        usleep(20);
    }
}

// Returns once everything enqueued on `stream` so far has run, as comm_wait_event.
static inline void comm_wait_stream(Comm *c, cudaStream_t stream, const char *what) {
    if (!c->comm) {
        cuda_check(cudaStreamSynchronize(stream));
        return;
    }
    cuda_check(cudaEventRecord(c->drained, stream));
    comm_wait_event(c, c->drained, what);
}

typedef struct {
    int magic, world_size;
    ncclUniqueId id;
} NcclIdFile;

static char nccl_id_file_path[CHECKPOINT_PATH_LEN]; // set on rank 0 while its file exists

static void remove_nccl_id_file(void) {
    if (*nccl_id_file_path) remove(nccl_id_file_path);
    *nccl_id_file_path = '\0';
}

// The values, unique to this launch, that name the id file ("" when the launcher gives none): torchrun's
// run id (random with --standalone, --rdzv-id otherwise; "none" when not given) and its restart count,
// Slurm's job and step ids and requeue count.
static inline void launch_nonce(char *nonce, size_t len) {
    static const char *const keys[] = {"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID",
                                       "SLURM_STEP_ID", "SLURM_RESTART_COUNT"};
    const char *run_id = getenv("TORCHELASTIC_RUN_ID"), *job = getenv("SLURM_JOB_ID");
    size_t n = 0;
    *nonce = '\0';
    if (!((run_id && *run_id && strcmp(run_id, "none")) || (job && *job))) return;
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]) && n < len; k++) {
        const char *value = getenv(keys[k]);
        if (!value || !*value) continue;
        size_t start = n;
        n += (size_t)snprintf(nonce + n, len - n, "_%s", value);
        for (size_t i = start + 1; i < n && i < len; i++) {
            char ch = nonce[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '.' || ch == '-'))
                nonce[i] = '-';
        }
    }
    if (n >= len) nonce[len - 1] = '\0';
}

// <dir>/nccl_id<nonce>.
static inline void nccl_id_path(char *path, size_t len, const char *dir) {
    char nonce[256];
    launch_nonce(nonce, sizeof(nonce));
    if ((size_t)snprintf(path, len, "%s/nccl_id%s", dir, nonce) >= len)
        fail("--output_dir: %s: path too long for the NCCL id file", dir);
}

static inline int comm_id_from_env(void) {
    const char *address = getenv("NCCL_COMM_ID");
    return address && *address;
}

// Before any CUDA call: a torchrun-style launch exchanges the id through --output_dir, so it needs one.
static inline void comm_check_bootstrap(const Dist *d, const char *output_dir) {
    if (d->world_size == 1 || d->mpi || comm_id_from_env()) return;
    if (!*output_dir)
        fail("WORLD_SIZE=%d without MPI: the processes exchange the NCCL id through a file in --output_dir, "
             "which is empty (give a directory every rank sees, set NCCL_COMM_ID=<rank 0 host>:<port>, or "
             "start with mpirun)",
             d->world_size);
    char nonce[256];
    launch_nonce(nonce, sizeof(nonce));
    if (!*nonce)
        fail("WORLD_SIZE=%d without MPI: the launcher gives no value unique to this launch (torchrun's "
             "--rdzv-id or --standalone, or a Slurm job), so the NCCL id file in --output_dir could be one "
             "an earlier launch left; set NCCL_COMM_ID=<rank 0 host>:<free port> instead",
             d->world_size);
}

// The unique id through a file in output_dir (torchrun-style launch without MPI; comm_check_bootstrap
// has checked there is one).
static inline ncclUniqueId nccl_id_through_file(const Dist *d, const char *output_dir, int timeout_s) {
    char path[CHECKPOINT_PATH_LEN];
    nccl_id_path(path, sizeof(path), output_dir);
    NcclIdFile msg;
    memset(&msg, 0, sizeof(msg));
    if (d->rank == 0) {
        msg.magic = NCCL_ID_FILE_MAGIC;
        msg.world_size = d->world_size;
        nccl_check(ncclGetUniqueId(&msg.id));
        char tmp[CHECKPOINT_PATH_LEN];
        snprintf(nccl_id_file_path, sizeof(nccl_id_file_path), "%s", path);
        atexit(remove_nccl_id_file);
        FILE *f = atomic_open(path, tmp, sizeof(tmp));
        fwrite_check(&msg, sizeof(msg), 1, f, tmp);
        atomic_commit(f, tmp, path);
        return msg.id;
    }
    for (int waited = 0;; waited++) { // every 100 ms
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(&msg, 1, sizeof(msg), f);
            fclose(f);
            if (got == sizeof(msg) && msg.magic == NCCL_ID_FILE_MAGIC) break;
        }
        if (waited >= timeout_s * 10)
            fail("rank %d: no NCCL id from rank 0 in %s after --nccl_timeout_s %d s: --output_dir must be a "
                 "directory every rank sees (a filesystem shared by the nodes), and rank 0 must have started",
                 d->rank, path, timeout_s);
        usleep(100000);
    }
    if (msg.world_size != d->world_size)
        fail("%s: written for WORLD_SIZE=%d but this run has %d (left by another run? delete it)", path,
             msg.world_size, d->world_size);
    return msg.id;
}

// The communicator of this run on the current device (cudaSetDevice first). One process: none.
static inline void comm_init(Comm *c, const Dist *d, const char *output_dir, int timeout_s) {
    memset(c, 0, sizeof(*c));
    c->rank = d->rank;
    c->world_size = d->world_size;
    c->timeout_s = timeout_s;
    if (d->world_size == 1) return;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (comm_id_from_env()) {
        nccl_check(ncclGetUniqueId(&id)); // NCCL makes it of NCCL_COMM_ID: the same on every rank
    } else if (d->mpi) {
#ifdef USE_MPI
        if (d->rank == 0) nccl_check(ncclGetUniqueId(&id));
        MPI_Request request;
        MPI_Ibcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD, &request);
        dist_wait(d, &request, "MPI_Bcast of the NCCL id", sizeof(id));
#endif
    } else {
        id = nccl_id_through_file(d, output_dir, timeout_s);
    }
    cuda_check(cudaEventCreateWithFlags(&c->drained, cudaEventDisableTiming));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; // a rank that never joins must not hold this one inside NCCL
    ncclResult_t result = ncclCommInitRankConfig(&c->comm, d->world_size, id, d->rank, &config);
    comm_settle(c, result, "joining the NCCL communicator");
    comm_register(c->comm);
    remove_nccl_id_file(); // every rank has joined, so every rank has read it
}

// The ranks of `parent` that pass the same color, in rank order: a shard group, or the replicas of one place
// across the groups (--shard_group_size). Every rank of parent calls it. One process: none.
static inline void comm_split(Comm *parent, int color, Comm *out) {
    memset(out, 0, sizeof(*out));
    out->timeout_s = parent->timeout_s;
    out->world_size = 1;
    if (!parent->comm) return;
    out->rank = parent->rank;
    cuda_check(cudaEventCreateWithFlags(&out->drained, cudaEventDisableTiming));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    // The split runs on the parent, and NCCL hands out the new communicator only once the parent settles.
    ncclResult_t result = ncclCommSplit(parent->comm, color, parent->rank, &out->comm, &config);
    comm_settle(parent, result, "splitting the NCCL communicator");
    if (!out->comm) comm_fail(parent, "splitting the NCCL communicator", "no communicator came back");
    nccl_check(ncclCommGetAsyncError(out->comm, &result));
    comm_settle(out, result, "joining the split NCCL communicator");
    comm_register(out->comm);
    nccl_check(ncclCommCount(out->comm, &out->world_size));
    nccl_check(ncclCommUserRank(out->comm, &out->rank));
}

static inline void comm_destroy(Comm *c) {
    if (!c->comm) return;
    comm_unregister(c->comm);
    comm_settle(c, ncclCommFinalize(c->comm), "ncclCommFinalize");
    nccl_check(ncclCommDestroy(c->comm));
    cuda_check(cudaEventDestroy(c->drained));
    c->comm = NULL;
}

// Names the collective about to be enqueued (for comm_fail's message).
static inline void comm_issue(Comm *c, const char *kind, size_t count) {
    collectives_issued++;
    snprintf(last_collective, sizeof(last_collective), "%s of %zu elements on %d ranks", kind, count,
             c->world_size);
}

// ncclGroupStart / End around several collectives: NCCL launches them as one operation.
static inline void comm_group_start(Comm *c) {
    if (c->comm) comm_settle(c, ncclGroupStart(), "ncclGroupStart");
}

static inline void comm_group_end(Comm *c) {
    if (c->comm) comm_settle(c, ncclGroupEnd(), "ncclGroupEnd");
}

// buf (count elements) = the reduction over the ranks of every rank's buf.
static inline void comm_all_reduce(Comm *c, void *buf, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                   cudaStream_t stream) {
    if (!c->comm) return;
    nvtx_push("all-reduce %zu", count);
    comm_issue(c, "ncclAllReduce", count);
    comm_settle(c, ncclAllReduce(buf, buf, count, type, op, c->comm, stream), "ncclAllReduce");
    nvtxRangePop();
}

// base holds world_size chunks of `chunk` elements of elem_bytes each; afterwards every chunk is its rank's.
static inline void comm_all_gather(Comm *c, void *base, size_t chunk, ncclDataType_t type, size_t elem_bytes,
                                   cudaStream_t stream) {
    if (!c->comm) return;
    const char *mine = (const char *)base + (size_t)c->rank * chunk * elem_bytes;
    nvtx_push("all-gather %zu", chunk);
    comm_issue(c, "ncclAllGather", chunk);
    comm_settle(c, ncclAllGather(mine, base, chunk, type, c->comm, stream), "ncclAllGather");
    nvtxRangePop();
}

// buf (count elements) on every rank = root's buf, in place.
static inline void comm_broadcast(Comm *c, void *buf, size_t count, ncclDataType_t type, int root,
                                  cudaStream_t stream) {
    if (!c->comm) return;
    nvtx_push("broadcast %zu", count);
    comm_issue(c, "ncclBroadcast", count);
    comm_settle(c, ncclBroadcast(buf, buf, count, type, root, c->comm, stream), "ncclBroadcast");
    nvtxRangePop();
}

// base holds world_size chunks of `chunk` elements of elem_bytes each; afterwards this rank's chunk is the
// sum over the ranks of theirs (the other chunks are left undefined).
static inline void comm_reduce_scatter_typed(Comm *c, void *base, size_t chunk, ncclDataType_t type,
                                             size_t elem_bytes, cudaStream_t stream) {
    if (!c->comm) return;
    char *mine = (char *)base + (size_t)c->rank * chunk * elem_bytes;
    nvtx_push("reduce-scatter %zu", chunk);
    comm_issue(c, "ncclReduceScatter", chunk);
    comm_settle(c, ncclReduceScatter(base, mine, chunk, type, ncclSum, c->comm, stream), "ncclReduceScatter");
    nvtxRangePop();
}

static inline void comm_reduce_scatter(Comm *c, float *base, size_t chunk, cudaStream_t stream) {
    comm_reduce_scatter_typed(c, base, chunk, ncclFloat32, sizeof(float), stream);
}

#endif // GPU_NCCL_CUH
