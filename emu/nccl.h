// emu/nccl.h: the NCCL collectives the project uses, for the CPU emulation build (emu/nccl.cpp). With MPI
// (a build with USE_MPI, started by mpirun) each rank is a process and the collectives run over MPI when
// the stream reaches them; ranks started without MPI (torchrun-style) move them through files in $TMPDIR.
// NCCL's rules are checked: the
// same collective sequence on every rank (kind, count, type, operation), in-place offsets
// (all-gather: sendbuff == recvbuff + rank * sendcount; reduce-scatter: recvbuff == sendbuff + rank *
// recvcount), buffers inside device allocations.
#ifndef EMU_NCCL_H
#define EMU_NCCL_H

#include <stddef.h>

#include "cuda_runtime.h"

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ncclComm *ncclComm_t;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
} ncclDataType_t;

// The one field the project sets: blocking = 0 makes creation return ncclInProgress until confirmed.
#define NCCL_CONFIG_MAGIC 0xcafebeef
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                              \
    { sizeof(ncclConfig_t), NCCL_CONFIG_MAGIC, 0, 1 }

const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetVersion(int *version); // 22809: NCCL 2.28.9, the version the CUDA 13.0 toolkit here ships
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream);

#endif // EMU_NCCL_H
