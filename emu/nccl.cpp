// emu/nccl.cpp: NCCL for the CPU emulation build (emu/nccl.h has the contract). A communicator of several
// ranks is one of MPI_COMM_WORLD's processes each, on a duplicate of it; a collective is queued on its
// stream and, when the stream reaches it, first compares its description with every other rank's (the
// same sequence of collectives everywhere, with the same counts, types and operations, as NCCL
// requires) and then moves the data over MPI, both non-blocking (a collective whose peers have not joined
// leaves its stream waiting). Reductions gather every rank's contribution and add them in rank order, so
// that every rank gets the same bits, as NCCL's do. Ranks started without MPI (a torchrun-style launch:
// RANK, WORLD_SIZE and the unique id passed through a file) move the same descriptions and data through
// files instead: a directory named after the unique id in $TMPDIR (else /tmp), one file per collective and
// rank, written whole and renamed into place, read once every rank's is there (the stream waits until
// then); the last rank to destroy the communicator removes the directory.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "emu.h"
#include "nccl.h"

#ifdef USE_MPI
#include <mpi.h>
#endif

struct ncclComm {
    int rank, nranks;
    bool aborted;
    bool initializing;             // non-blocking creation not yet confirmed by ncclCommGetAsyncError
    ncclComm *split_result = NULL; // a non-blocking split of this communicator: handed out when it settles
    ncclComm_t *split_out = NULL;
    unsigned long long sequence; // collectives queued so far
    std::string dir;             // ranks started without MPI: the directory their collectives move through
#ifdef USE_MPI
    MPI_Comm mpi;
#endif
};

namespace {

const char ID_MAGIC[] = "cuda-emu nccl id";

enum CollectiveKind { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST };

// What every rank must agree on, compared before the data moves.
struct Description {
    unsigned long long sequence, count;
    int kind, type, op, root;
};

const char *kind_name(int kind) {
    static const char *const names[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                        "ncclBroadcast"};
    return names[kind];
}

size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    default:
        return 8;
    }
}

bool valid_type(ncclDataType_t t) {
    return (int)t >= 0 && (int)t <= 9 && t != ncclFloat16;
}

template <typename T> T combine(T a, T b, ncclRedOp_t op) {
    switch (op) {
    case ncclProd:
        return a * b;
    case ncclMax:
        return a > b ? a : b;
    case ncclMin:
        return a < b ? a : b;
    default:
        return a + b; // ncclSum, and ncclAvg before its division
    }
}

template <typename T>
void reduce_typed(T *out, const T *contributions, size_t count, int nranks, ncclRedOp_t op) {
    for (size_t i = 0; i < count; i++) {
        T acc = contributions[i];
        for (int r = 1; r < nranks; r++) acc = combine(acc, contributions[(size_t)r * count + i], op);
        if (op == ncclAvg) acc = (T)(acc / (T)nranks);
        out[i] = acc;
    }
}

// out (count) = the reduction over ranks 0, 1, ... of contributions (nranks x count), in that order. BF16
// rounds after every step, as a reduction that moves BF16 values between ranks does.
void reduce(void *out, const void *contributions, size_t count, int nranks, ncclDataType_t type,
            ncclRedOp_t op) {
    switch (type) {
    case ncclInt8:
        reduce_typed((int8_t *)out, (const int8_t *)contributions, count, nranks, op);
        break;
    case ncclUint8:
        reduce_typed((uint8_t *)out, (const uint8_t *)contributions, count, nranks, op);
        break;
    case ncclInt32:
        reduce_typed((int32_t *)out, (const int32_t *)contributions, count, nranks, op);
        break;
    case ncclUint32:
        reduce_typed((uint32_t *)out, (const uint32_t *)contributions, count, nranks, op);
        break;
    case ncclInt64:
        reduce_typed((int64_t *)out, (const int64_t *)contributions, count, nranks, op);
        break;
    case ncclUint64:
        reduce_typed((uint64_t *)out, (const uint64_t *)contributions, count, nranks, op);
        break;
    case ncclFloat32:
        reduce_typed((float *)out, (const float *)contributions, count, nranks, op);
        break;
    case ncclFloat64:
        reduce_typed((double *)out, (const double *)contributions, count, nranks, op);
        break;
    case ncclBfloat16: {
        const __nv_bfloat16 *in = (const __nv_bfloat16 *)contributions;
        __nv_bfloat16 *o = (__nv_bfloat16 *)out;
        for (size_t i = 0; i < count; i++) {
            __nv_bfloat16 acc = in[i];
            for (int r = 1; r < nranks; r++)
                acc = __float2bfloat16_rn(
                    combine(__bfloat162float(acc), __bfloat162float(in[(size_t)r * count + i]), op));
            if (op == ncclAvg) acc = __float2bfloat16_rn(__bfloat162float(acc) / (float)nranks);
            o[i] = acc;
        }
        break;
    }
    default:
        break;
    }
}

ncclResult_t usage(const char *fmt, const char *call) {
    emu::explain(fmt, call);
    return ncclInvalidUsage;
}

// A collective of several ranks in flight: first every rank's description is gathered and compared,
// then the data moves; both non-blocking (over MPI, or through the files of ranks started without it), so
// that the stream reports it waiting (emu::op_waits) while a peer has not joined, as a GPU's NCCL kernel
// spins, instead of blocking the host. The data moves as host copies: device memory is closed to the host
// between the emulator's drains, when a peer's MPI may still read or write it.
struct Collective {
    ncclComm *comm = NULL;
    Description desc = {};
    const void *send = NULL;
    void *recv = NULL;
    int stage = 0; // 0: not started, 1: descriptions moving, 2: data moving
#ifdef USE_MPI
    MPI_Request request = MPI_REQUEST_NULL;
#endif
    std::vector<Description> all;
    std::vector<char> outgoing, incoming; // this rank's contribution; what arrives (every rank's, or root's)
};

void check_descriptions(const Collective &c) {
    const Description &desc = c.desc;
    for (int r = 0; r < c.comm->nranks; r++) {
        const Description &o = c.all[r];
        if (memcmp(&o, &desc, sizeof(desc)) != 0)
            emu::fatal(
                "NCCL collective #%llu differs across ranks: this rank %d calls %s(count %llu, type %d, op "
                "%d, root %d), rank %d calls %s(count %llu, type %d, op %d, root %d) as its #%llu: every "
                "rank must issue the same collectives in the same order",
                desc.sequence, c.comm->rank, kind_name(desc.kind), desc.count, desc.type, desc.op, desc.root,
                r, kind_name(o.kind), o.count, o.type, o.op, o.root, o.sequence);
    }
}

size_t send_bytes_of(const Description &desc, int nranks) {
    const size_t bytes = (size_t)desc.count * type_size((ncclDataType_t)desc.type);
    return desc.kind == REDUCE_SCATTER ? bytes * nranks : bytes;
}

void finish_data(Collective &c) {
    const Description &desc = c.desc;
    if (desc.kind == ALL_REDUCE || desc.kind == REDUCE_SCATTER)
        reduce(c.recv, c.incoming.data(), desc.count, c.comm->nranks, (ncclDataType_t)desc.type,
               (ncclRedOp_t)desc.op);
    else
        memcpy(c.recv, c.incoming.data(), c.incoming.size());
}

// ---- through files (ranks started without MPI)

std::string collective_file(const ncclComm *comm, unsigned long long sequence, int rank) {
    return comm->dir + "/" + std::to_string(sequence) + "." + std::to_string(rank);
}

// Writes this rank's description and contribution, whole, under its final name.
void write_contribution(const Collective &c) {
    const std::string path = collective_file(c.comm, c.desc.sequence, c.comm->rank), tmp = path + ".tmp";
    FILE *f = fopen(tmp.c_str(), "wb");
    if (!f || fwrite(&c.desc, sizeof(c.desc), 1, f) != 1 ||
        (c.outgoing.size() && fwrite(c.outgoing.data(), c.outgoing.size(), 1, f) != 1) || fclose(f) != 0 ||
        rename(tmp.c_str(), path.c_str()) != 0)
        emu::fatal("NCCL emulation: cannot write %s", tmp.c_str());
}

// Rank r's description and contribution, once its file is there.
bool read_contribution(const Collective &c, int r, Description *desc, std::vector<char> *data) {
    FILE *f = fopen(collective_file(c.comm, c.desc.sequence, r).c_str(), "rb");
    if (!f) return false;
    const size_t bytes = send_bytes_of(c.desc, c.comm->nranks);
    data->resize(bytes);
    bool whole = fread(desc, sizeof(*desc), 1, f) == 1 && (!bytes || fread(data->data(), bytes, 1, f) == 1);
    fclose(f);
    if (!whole) emu::fatal("NCCL emulation: rank %d's collective #%llu is cut short", r, c.desc.sequence);
    return true;
}

bool advance_through_files(Collective &c) {
    const Description &desc = c.desc;
    const int n = c.comm->nranks;
    const size_t bytes = (size_t)desc.count * type_size((ncclDataType_t)desc.type);
    if (c.stage == 0) {
        const char *send = (const char *)c.send;
        c.outgoing.assign(send, send + send_bytes_of(desc, n));
        write_contribution(c);
        c.all.resize(n);
        c.stage = 1;
    }
    for (int r = 0; r < n;
         r++) // every rank's file first: a peer that has not joined leaves the stream waiting
        if (access(collective_file(c.comm, desc.sequence, r).c_str(), F_OK) != 0) return false;
    c.incoming.resize(desc.kind == BROADCAST ? bytes : bytes * n);
    std::vector<char> data;
    for (int r = 0; r < n; r++) {
        if (!read_contribution(c, r, &c.all[r], &data)) return false;
        if (memcmp(&c.all[r], &desc, sizeof(desc)) != 0) break; // check_descriptions names it
        if (desc.kind == REDUCE_SCATTER)                        // rank r's chunk for this rank
            memcpy(c.incoming.data() + r * bytes, data.data() + (size_t)c.comm->rank * bytes, bytes);
        else if (desc.kind != BROADCAST)
            memcpy(c.incoming.data() + r * bytes, data.data(), bytes);
        else if (r == desc.root)
            memcpy(c.incoming.data(), data.data(), bytes);
    }
    check_descriptions(c);
    finish_data(c);
    return true;
}

// The directory of the communicator of unique id `id`.
std::string transport_dir(const ncclUniqueId &id) {
    unsigned long long stamp;
    memcpy(&stamp, id.internal + sizeof(ID_MAGIC), sizeof(stamp));
    const char *tmp = getenv("TMPDIR");
    char name[64];
    snprintf(name, sizeof(name), "/cuda-emu-nccl-%016llx", stamp);
    return std::string(tmp && *tmp ? tmp : "/tmp") + name;
}

void mark(const ncclComm *comm, const char *what);
bool all_marked(const ncclComm *comm, const char *what);

// Marks this rank done with the directory; the last one removes it.
void close_transport(const ncclComm *comm) {
    mark(comm, "closed");
    if (!all_marked(comm, "closed")) return;
    DIR *d = opendir(comm->dir.c_str());
    if (!d) return;
    while (struct dirent *e = readdir(d))
        if (e->d_name[0] != '.') remove((comm->dir + "/" + e->d_name).c_str());
    closedir(d);
    rmdir(comm->dir.c_str());
}

#ifdef USE_MPI
// ---- over MPI

void start_data(Collective &c) {
    const Description &desc = c.desc;
    const size_t bytes = (size_t)desc.count * type_size((ncclDataType_t)desc.type);
    const int n = c.comm->nranks;
    MPI_Comm mpi = c.comm->mpi;
    if (bytes * (size_t)n > (size_t)INT_MAX)
        emu::fatal("NCCL emulation: %zu bytes per collective are too many for MPI counts", bytes * n);
    const char *send = (const char *)c.send;
    c.outgoing.assign(send, send + send_bytes_of(desc, n));
    c.incoming.resize(desc.kind == BROADCAST ? bytes : bytes * n);
    switch (desc.kind) {
    case ALL_REDUCE:
    case ALL_GATHER:
        MPI_Iallgather(c.outgoing.data(), (int)bytes, MPI_BYTE, c.incoming.data(), (int)bytes, MPI_BYTE, mpi,
                       &c.request);
        break;
    case REDUCE_SCATTER: // rank r's chunk r from every rank, then reduced
        MPI_Ialltoall(c.outgoing.data(), (int)bytes, MPI_BYTE, c.incoming.data(), (int)bytes, MPI_BYTE, mpi,
                      &c.request);
        break;
    case BROADCAST:
        if (c.comm->rank == desc.root) memcpy(c.incoming.data(), send, bytes);
        MPI_Ibcast(c.incoming.data(), (int)bytes, MPI_BYTE, desc.root, mpi, &c.request);
        break;
    }
}

// One step of the collective; true once it is complete (or its communicator aborted).
bool advance(Collective &c) {
    if (c.comm->aborted) return true;
    if (c.stage == 0) {
        c.all.resize(c.comm->nranks);
        MPI_Iallgather(&c.desc, (int)sizeof(c.desc), MPI_BYTE, c.all.data(), (int)sizeof(c.desc), MPI_BYTE,
                       c.comm->mpi, &c.request);
        c.stage = 1;
    }
    int done = 0;
    MPI_Test(&c.request, &done, MPI_STATUS_IGNORE);
    if (!done) return false;
    if (c.stage == 1) {
        check_descriptions(c);
        start_data(c);
        c.stage = 2;
        return advance(c);
    }
    finish_data(c);
    return true;
}
#endif

// Checks the buffers against device memory and NCCL's in-place rules, then queues the collective.
ncclResult_t enqueue_collective(CollectiveKind kind, const void *send, size_t send_bytes, void *recv,
                                size_t recv_bytes, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                int root, ncclComm_t comm, cudaStream_t stream) {
    const char *call = kind_name(kind);
    if (!comm) return usage("%s: no communicator", call);
    if (comm->aborted) return usage("%s: the communicator was aborted", call);
    if (comm->initializing)
        return usage("%s: the non-blocking communicator's creation is not confirmed yet (poll "
                     "ncclCommGetAsyncError until it is no longer ncclInProgress)",
                     call);
    if (!valid_type(type)) return usage("%s: a data type the emulation does not reduce", call);
    if ((int)op < 0 || (int)op > 4) return usage("%s: an unknown reduction operation", call);
    if (!emu::is_device_range(send, send_bytes) || !emu::is_device_range(recv, recv_bytes)) {
        emu::explain(
            "%s: the send buffer (%zu bytes at %s) or the receive buffer (%zu bytes at %s) is not device "
            "memory",
            call, send_bytes, emu::describe_address(send).c_str(), recv_bytes,
            emu::describe_address(recv).c_str());
        return ncclInvalidArgument;
    }
    // NCCL's in-place forms are exactly these; any other overlap of the two buffers is undefined.
    const char *s = (const char *)send, *r = (const char *)recv;
    const bool overlap = s < r + recv_bytes && r < s + send_bytes;
    const size_t offset = (size_t)comm->rank * count * type_size(type);
    bool in_place = kind == ALL_GATHER ? s == r + offset : kind == REDUCE_SCATTER ? r == s + offset : s == r;
    if (overlap && !in_place) {
        emu::explain(
            "%s on rank %d: the buffers overlap but not in NCCL's in-place form (all-gather: sendbuff == "
            "recvbuff + rank * sendcount; reduce-scatter: recvbuff == sendbuff + rank * recvcount)",
            call, comm->rank);
        return ncclInvalidArgument;
    }
    Description desc = {comm->sequence++, (unsigned long long)count, (int)kind, (int)type, (int)op, root};
    emu::count_collective_bytes(kind, kind == REDUCE_SCATTER ? send_bytes : recv_bytes);
    auto progress = std::make_shared<Collective>(); // kept across the runs of a collective that waits
    progress->comm = comm;
    progress->desc = desc;
    progress->send = send;
    progress->recv = recv;
    cudaError_t err = emu::enqueue(stream, emu::OP_COLLECTIVE, [=] {
        if (comm->aborted) return;
        if (comm->nranks == 1) {
            if (desc.kind == ALL_REDUCE || desc.kind == REDUCE_SCATTER)
                reduce(recv, send, desc.count, 1, (ncclDataType_t)desc.type, (ncclRedOp_t)desc.op);
            else if (send != recv)
                memmove(recv, send, std::min(send_bytes, recv_bytes));
            return;
        }
        if (!comm->dir.empty()) {
            if (!advance_through_files(*progress)) emu::op_waits();
            return;
        }
#ifdef USE_MPI
        if (!advance(*progress)) emu::op_waits();
#endif
    });
    return err == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

// Marks this rank `what` (joined, closed) in the communicator's directory.
void mark(const ncclComm *comm, const char *what) {
    FILE *f = fopen((comm->dir + "/" + what + "." + std::to_string(comm->rank)).c_str(), "wb");
    if (!f || fclose(f) != 0) emu::fatal("NCCL emulation: cannot write in %s", comm->dir.c_str());
}

bool all_marked(const ncclComm *comm, const char *what) {
    for (int r = 0; r < comm->nranks; r++)
        if (access((comm->dir + "/" + what + "." + std::to_string(r)).c_str(), F_OK) != 0) return false;
    return true;
}

// Whether every rank has joined: through files, once each has marked it; otherwise at creation.
bool all_joined(const ncclComm *comm) {
    return comm->dir.empty() || all_marked(comm, "joined");
}

ncclResult_t create_comm(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);

} // namespace

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error";
    case ncclSystemError:
        return "unhandled system error";
    case ncclInternalError:
        return "internal error";
    case ncclInvalidArgument:
        return "invalid argument";
    case ncclInvalidUsage:
        return "invalid usage";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    }
    return "unknown result code";
}

ncclResult_t ncclGetVersion(int *version) {
    *version = 22809;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, ID_MAGIC, sizeof(ID_MAGIC));
    unsigned long long stamp = (unsigned long long)getpid() ^ ((unsigned long long)time(NULL) << 20);
    memcpy(id->internal + sizeof(ID_MAGIC), &stamp, sizeof(stamp));
    return ncclSuccess;
}

// Non-blocking (config->blocking == 0): created before it returns, as the emulation's MPI_Allgather of
// the ids blocks, but reported ncclInProgress, as NCCL's may be, until ncclCommGetAsyncError is asked.
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
    if (!config || config->magic != NCCL_CONFIG_MAGIC) {
        emu::explain("ncclCommInitRankConfig: the config was not set from NCCL_CONFIG_INITIALIZER");
        return ncclInvalidArgument;
    }
    if (config->blocking != 0) return ncclCommInitRank(comm, nranks, id, rank);
    ncclResult_t result = create_comm(comm, nranks, id, rank);
    if (result != ncclSuccess) return result;
    (*comm)->initializing = true;
    return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    ncclResult_t result = create_comm(comm, nranks, id, rank);
    while (result == ncclSuccess && !all_joined(*comm)) usleep(1000);
    return result;
}

namespace {

// A communicator's creation: over MPI it gathers the ids (blocking); through files it marks this rank
// joined, and the others' marks are awaited by the caller (all_joined).
ncclResult_t create_comm(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        emu::explain("ncclCommInitRank: rank %d of %d", rank, nranks);
        return ncclInvalidArgument;
    }
    if (memcmp(id.internal, ID_MAGIC, sizeof(ID_MAGIC)) != 0) {
        emu::explain("ncclCommInitRank: the unique id did not come from ncclGetUniqueId");
        return ncclInvalidArgument;
    }
    ncclComm *c = new ncclComm();
    c->rank = rank;
    c->nranks = nranks;
    int mpi_initialized = 0;
#ifdef USE_MPI
    MPI_Initialized(&mpi_initialized);
#endif
    if (nranks > 1 &&
        !mpi_initialized) { // started without MPI: through files, created at the first collective
        c->dir = transport_dir(id);
        if (mkdir(c->dir.c_str(), 0700) != 0 && errno != EEXIST) {
            emu::explain("ncclCommInitRank: cannot create %s: %s", c->dir.c_str(), strerror(errno));
            delete c;
            return ncclSystemError;
        }
        mark(c, "joined");
    } else if (nranks > 1) {
#ifdef USE_MPI
        int size = 0, mpi_rank = -1;
        MPI_Comm_size(MPI_COMM_WORLD, &size), MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
        if (size != nranks || mpi_rank != rank) {
            emu::explain(
                "ncclCommInitRank: rank %d of %d, but the emulation runs MPI's ranks as MPI_COMM_WORLD's "
                "(rank %d of %d)",
                rank, nranks, mpi_rank, size);
            delete c;
            return ncclInvalidUsage;
        }
        std::vector<ncclUniqueId> ids(nranks);
        MPI_Allgather(&id, (int)sizeof(id), MPI_BYTE, ids.data(), (int)sizeof(id), MPI_BYTE, MPI_COMM_WORLD);
        for (int r = 0; r < nranks; r++)
            if (memcmp(&ids[r], &id, sizeof(id)) != 0) {
                emu::explain("ncclCommInitRank: rank %d passed another unique id than rank %d", r, rank);
                delete c;
                return ncclInvalidArgument;
            }
        MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
#endif
    }
    *comm = c;
    return ncclSuccess;
}

} // namespace

// The ranks of comm that pass the same color, ordered by key then rank, as MPI_Comm_split orders them
// (every rank of comm calls it; the emulation's split blocks in MPI). Non-blocking, the parent reports
// ncclInProgress and *newcomm stays NULL until ncclCommGetAsyncError on the parent, as NCCL's does.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
    if (!comm || comm->aborted || comm->initializing) return usage("%s: no usable parent", "ncclCommSplit");
    if (config && config->magic != NCCL_CONFIG_MAGIC)
        return usage("%s: the config was not set from NCCL_CONFIG_INITIALIZER", "ncclCommSplit");
    if (color < 0) return usage("%s: this emulation needs a color for every rank", "ncclCommSplit");
    if (!comm->dir.empty())
        return usage("%s: the emulation splits only communicators of MPI's ranks", "ncclCommSplit");
    ncclComm *c = new ncclComm();
    c->rank = 0;
    c->nranks = 1;
#ifdef USE_MPI
    if (comm->nranks > 1) {
        MPI_Comm_split(comm->mpi, color, key, &c->mpi);
        MPI_Comm_rank(c->mpi, &c->rank);
        MPI_Comm_size(c->mpi, &c->nranks);
        if (c->nranks == 1) MPI_Comm_free(&c->mpi);
    }
#else
    (void)key; // one process: the new communicator is this rank alone, whatever its key
#endif
    if (!config || config->blocking != 0) {
        *newcomm = c;
        return ncclSuccess;
    }
    *newcomm = NULL; // as NCCL: the new communicator comes out once the parent's split has settled
    comm->split_result = c;
    comm->split_out = newcomm;
    comm->initializing = true;
    return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    cudaDeviceSynchronize(); // its queued collectives complete first, as NCCL's do
    if (!comm->dir.empty()) close_transport(comm);
#ifdef USE_MPI
    if (comm->nranks > 1 && !comm->aborted && comm->dir.empty()) MPI_Comm_free(&comm->mpi);
#endif
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    return ncclSuccess; // ncclCommDestroy waits for its queued collectives
}

// Its collectives still queued, or waiting on their peers, end at once without moving data (NCCL's
// kernels exit), so that the process can exit. Its MPI communicator is left as it is: freeing it would
// wait for the peers.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    comm->aborted = true;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
    if (!comm) return ncclInvalidArgument;
    *async_error = ncclSuccess; // a failing peer ends its process; one that hangs leaves a collective waiting
    if (comm->initializing && !all_joined(comm)) {
        *async_error = ncclInProgress;
        return ncclSuccess;
    }
    comm->initializing = false;
    if (comm->split_out) *comm->split_out = comm->split_result;
    comm->split_out = NULL;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    *rank = comm->rank;
    return ncclSuccess;
}

// A group's collectives run as they were issued, in order on their streams: the order every rank issues.
ncclResult_t ncclGroupStart(void) {
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = count * type_size(type);
    return enqueue_collective(ALL_REDUCE, sendbuff, bytes, recvbuff, bytes, count, type, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = sendcount * type_size(type);
    return enqueue_collective(ALL_GATHER, sendbuff, bytes, recvbuff,
                              bytes * (size_t)(comm ? comm->nranks : 1), sendcount, type, ncclSum, 0, comm,
                              stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = recvcount * type_size(type);
    return enqueue_collective(REDUCE_SCATTER, sendbuff, bytes * (size_t)(comm ? comm->nranks : 1), recvbuff,
                              bytes, recvcount, type, op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = count * type_size(type);
    if (comm && (root < 0 || root >= comm->nranks))
        return usage("%s: root outside the communicator", "ncclBroadcast");
    return enqueue_collective(BROADCAST, sendbuff, bytes, recvbuff, bytes, count, type, ncclSum, root, comm,
                              stream);
}
