// gpu/nccl.cuh: the NCCL communicator of a run of several processes (one GPU each) and the collectives the
// trainer uses, each the identity when the run is one process (no communicator, no NCCL call at all).
// The communicator needs one unique id that rank 0 draws and every rank learns before ncclCommInitRank:
//  - started by MPI (mpirun, srun): rank 0 broadcasts it with MPI_Bcast;
//  - started torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, no MPI): rank 0 writes it to a file in
//    --output_dir (temp file + rename, so nobody reads half of it) and the others poll for it, which needs
//    a directory every rank sees: one node, or a filesystem the nodes share. The file's name carries the
//    launcher's per-launch values so a file left by an earlier run is not mistaken for this run's, and
//    rank 0 removes it once every rank has joined (or at exit).
// Collectives are in place, as NCCL defines it: all-gather when sendbuff == recvbuff + rank * sendcount,
// reduce-scatter when recvbuff == sendbuff + rank * recvcount.
#ifndef GPU_NCCL_CUH
#define GPU_NCCL_CUH

#include <nccl.h>
#include <unistd.h>

#include "../checkpoint.h"
#include "../dist.h"
#include "common.cuh"

#define nccl_check(call) nccl_check_at((call), #call, __FILE__, __LINE__)
static inline void nccl_check_at(ncclResult_t result, const char *what, const char *file, int line) {
    if (result != ncclSuccess) fail("NCCL: %s: %s (%s:%d)", what, ncclGetErrorString(result), file, line);
}

typedef struct {
    ncclComm_t comm; // NULL when the run is one process
    int rank, world_size;
} Comm;

#define NCCL_ID_FILE_MAGIC 20261202
#define NCCL_ID_WAIT_SECONDS 300

typedef struct {
    int magic, world_size;
    ncclUniqueId id;
} NcclIdFile;

static char nccl_id_file_path[CHECKPOINT_PATH_LEN]; // set on rank 0 while its file exists

static void remove_nccl_id_file(void) {
    if (*nccl_id_file_path) remove(nccl_id_file_path);
    *nccl_id_file_path = '\0';
}

// <dir>/nccl_id[_value...] with the values of the launcher's per-launch variables that are set (torchrun's
// run id, Slurm's job id, the rendezvous address and port), characters other than [A-Za-z0-9.-] as '-'.
static inline void nccl_id_path(char *path, size_t len, const char *dir) {
    static const char *const keys[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR", "MASTER_PORT"};
    size_t n = (size_t)snprintf(path, len, "%s/nccl_id", dir);
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]) && n < len; k++) {
        const char *value = getenv(keys[k]);
        if (!value || !*value) continue;
        size_t start = n + 1;
        n += (size_t)snprintf(path + n, len - n, "_%s", value);
        for (size_t i = start; i < n && i < len; i++) {
            char c = path[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '-'))
                path[i] = '-';
        }
    }
    if (n >= len) fail("--output_dir: %s: path too long for the NCCL id file", dir);
}

// Before any CUDA call: a torchrun-style launch exchanges the id through --output_dir, so it needs one.
static inline void comm_check_bootstrap(const Dist *d, const char *output_dir) {
    if (d->world_size > 1 && !d->mpi && !*output_dir)
        fail("WORLD_SIZE=%d without MPI: the processes exchange the NCCL id through a file in --output_dir, "
             "which is empty (give a directory every rank sees, or start with mpirun)",
             d->world_size);
}

// The unique id through a file in output_dir (torchrun-style launch without MPI; comm_check_bootstrap
// has checked there is one).
static inline ncclUniqueId nccl_id_through_file(const Dist *d, const char *output_dir) {
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
        if (waited == NCCL_ID_WAIT_SECONDS * 10)
            fail("rank %d: no NCCL id from rank 0 in %s after %d s: --output_dir must be a directory every "
                 "rank "
                 "sees (a filesystem shared by the nodes), and rank 0 must have started",
                 d->rank, path, NCCL_ID_WAIT_SECONDS);
        usleep(100000);
    }
    if (msg.world_size != d->world_size)
        fail("%s: written for WORLD_SIZE=%d but this run has %d (left by another run? delete it)", path,
             msg.world_size, d->world_size);
    return msg.id;
}

// The communicator of this run on the current device (cudaSetDevice first). One process: none.
static inline void comm_init(Comm *c, const Dist *d, const char *output_dir) {
    c->comm = NULL;
    c->rank = d->rank;
    c->world_size = d->world_size;
    if (d->world_size == 1) return;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (d->mpi) {
#ifdef USE_MPI
        if (d->rank == 0) nccl_check(ncclGetUniqueId(&id));
        MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
    } else {
        id = nccl_id_through_file(d, output_dir);
    }
    nccl_check(ncclCommInitRank(&c->comm, d->world_size, id, d->rank));
    remove_nccl_id_file(); // every rank has joined, so every rank has read it
}

static inline void comm_destroy(Comm *c) {
    if (c->comm) nccl_check(ncclCommDestroy(c->comm));
    c->comm = NULL;
}

// ncclGroupStart / End around several collectives: NCCL launches them as one operation.
static inline void comm_group_start(const Comm *c) {
    if (c->comm) nccl_check(ncclGroupStart());
}

static inline void comm_group_end(const Comm *c) {
    if (c->comm) nccl_check(ncclGroupEnd());
}

// buf (count elements) = the reduction over the ranks of every rank's buf.
static inline void comm_all_reduce(const Comm *c, void *buf, size_t count, ncclDataType_t type,
                                   ncclRedOp_t op, cudaStream_t stream) {
    if (!c->comm) return;
    nvtx_push("all-reduce %zu", count);
    nccl_check(ncclAllReduce(buf, buf, count, type, op, c->comm, stream));
    nvtxRangePop();
}

// base holds world_size chunks of `chunk` elements of elem_bytes each; afterwards every chunk is its rank's.
static inline void comm_all_gather(const Comm *c, void *base, size_t chunk, ncclDataType_t type,
                                   size_t elem_bytes, cudaStream_t stream) {
    if (!c->comm) return;
    const char *mine = (const char *)base + (size_t)c->rank * chunk * elem_bytes;
    nvtx_push("all-gather %zu", chunk);
    nccl_check(ncclAllGather(mine, base, chunk, type, c->comm, stream));
    nvtxRangePop();
}

// base holds world_size chunks of `chunk` floats; afterwards this rank's chunk is the sum over the ranks of
// theirs (the other chunks are left undefined).
static inline void comm_reduce_scatter(const Comm *c, float *base, size_t chunk, cudaStream_t stream) {
    if (!c->comm) return;
    nvtx_push("reduce-scatter %zu", chunk);
    nccl_check(ncclReduceScatter(base, base + (size_t)c->rank * chunk, chunk, ncclFloat32, ncclSum, c->comm,
                                 stream));
    nvtxRangePop();
}

#endif // GPU_NCCL_CUH
