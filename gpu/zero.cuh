// gpu/zero.cuh: ZeRO on the device: the kernels around the collectives, over dist.h's layout (ShardMap,
// which kernels evaluate as the host does):
//  - the amax of every linear weight over the shard (the max over ranks is the exact amax);
//  - the E4M3 cast of a shard chunk in parameter layout, ready for an in-place all-gather;
//  - W^T of a gathered FP8 weight (the data-gradient GEMM's operand);
//  - the accumulation of reduce-scattered gradients into the gradient shard;
//  - --grad_reduce_dtype bfloat16: the gradients' sums in BF16, a piece at a time through the plan's
//    grads_bf16 (memory_plan.h's grad_bf16_staging_elements): each rank's FP32 values rounded to BF16 (RNE,
//    as the CPU trainer rounds them), summed by NCCL in BF16, the sum widened back into the FP32 buffer,
//    where the sums over the micro-steps stay FP32.
#ifndef GPU_ZERO_CUH
#define GPU_ZERO_CUH

#include "../core/dist.h"
#include "../core/fp8_scaling.h"
#include "../core/gpt_model.h"
#include "cast_common.cuh"
#include "common.cuh"
#include "nccl.cuh"

// Offset of linear `linear`'s weight within one layer's parameters.
GPT_HD static inline size_t linear_weight_in_layer(const GPTConfig *cfg, int linear) {
    size_t offset = 0;
    for (int t = PT_ATTN_NORM_W; t < linear_weight_tensor(linear); t++) offset += param_tensor_size(cfg, t);
    return offset;
}

// Index layer * 4 + linear of the linear weight holding element `offset` of the parameter vector, or -1.
// Llama's gate (fcgatew) is the second half of the fc linear's weight.
GPT_HD static inline int linear_weight_at(const GPTConfig *cfg, size_t offset) {
    int tensor = param_tensor_at(cfg, offset);
    if (!param_is_per_layer(tensor)) return -1;
    if (tensor == PT_MLP_GATE_W) tensor = PT_MLP_UP_W;
    int layer = (int)((offset - param_global_size(cfg)) / param_layer_size(cfg));
    for (int linear = 0; linear < NUM_BLOCK_LINEARS; linear++)
        if (linear_weight_tensor(linear) == tensor) return layer * NUM_BLOCK_LINEARS + linear;
    return -1;
}

// amax[w] = max(amax[w], max |x| over the elements of linear weight w that lie in this rank's shard).
// Grid (any, L * 4): blockIdx.y is the weight. The caller zeroes amax; the max over ranks of the result
// is the weight's exact amax, the value a single process measures.
__global__ void shard_weight_amax_kernel(float *amax, const float *shard, ShardMap map) {
    int w = blockIdx.y, layer = w / NUM_BLOCK_LINEARS, linear = w % NUM_BLOCK_LINEARS;
    const GPTConfig *cfg = &map.cfg;
    ShardUnit u = shard_map_unit(&map, map.zero_stage == 3 ? 1 + layer : 0);
    size_t first = param_global_size(cfg) + (size_t)layer * param_layer_size(cfg) +
                   linear_weight_in_layer(cfg, linear),
           last = first + linear_weight_size(cfg, linear);
    size_t lo = shard_unit_begin(&map, &u), hi = lo + u.owned;
    size_t a = first > lo ? first : lo, b = last < hi ? last : hi;
    float local = 0.0f;
    if (a < b) {
        const float *x = shard + u.shard + (a - lo);
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < b - a;
             i += (size_t)gridDim.x * blockDim.x)
            local = fmaxf(local, fabsf(x[i]));
    }
    float block = block_max(local); // every thread takes part: block_max synchronises
    if (threadIdx.x == 0) atomic_max_nonneg(&amax[w], block);
}

// Blocks per weight of shard_weight_amax_kernel: enough to stream the largest weight's share.
static inline int shard_weight_amax_blocks(const GPTConfig *cfg, int ways) {
    size_t largest = 0;
    for (int linear = 0; linear < NUM_BLOCK_LINEARS; linear++)
        if (linear_weight_size(cfg, linear) > largest) largest = linear_weight_size(cfg, linear);
    largest = largest / (size_t)ways + 1;
    size_t blocks = largest / (256 * 16) + 1;
    return blocks > 128 ? 128 : (int)blocks;
}

// out[j], j < chunk of unit `unit`: the E4M3 code of element j of this rank's chunk when it belongs to a
// linear weight w, scaled by weight_scale[w] (fp8_quantize, as the single-process cast), else 0 (biases,
// LayerNorm, padding: never read as FP8). out may be NULL (counting only). counts (optional): the values
// saturated and flushed, added at counts[2 * (num_tensors + w)] and the next (Fp8DeviceState's order).
__global__ void shard_weight_cast_kernel(fp8 *out, unsigned long long *counts, const float *shard,
                                         ShardMap map, int unit, const float *weight_scale, int num_tensors) {
    ShardUnit u = shard_map_unit(&map, unit);
    size_t begin = shard_unit_begin(&map, &u);
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < u.chunk;
         j += (size_t)gridDim.x * blockDim.x) {
        int w = j < u.owned ? linear_weight_at(&map.cfg, begin + j) : -1;
        fp8 q = 0;
        if (w >= 0) {
            float x = shard[u.shard + j], s = weight_scale[w];
            q = fp8_quantize(x, s, FP8_E4M3);
            if (counts && fp8_is_saturated(__fmul_rn(x, s), FP8_E4M3))
                atomicAdd(&counts[2 * (num_tensors + w)], 1ull);
            if (counts && fp8_is_flushed(__fmul_rn(x, s), FP8_E4M3))
                atomicAdd(&counts[2 * (num_tensors + w) + 1], 1ull);
        }
        if (out) out[j] = q;
    }
}

// out_t (cols, rows) = in (rows, cols), bytes: one 32x32 tile per block through shared memory, so that
// reads and writes are both coalesced.
__global__ void transpose_bytes_kernel(fp8 *out_t, const fp8 *in, int rows, int cols) {
    __shared__ fp8 tile[CAST_TILE][CAST_TILE + 4];
    int tile_row = blockIdx.y * CAST_TILE, tile_col = blockIdx.x * CAST_TILE;
    for (int r = threadIdx.y; r < CAST_TILE; r += blockDim.y) {
        int row = tile_row + r, col = tile_col + threadIdx.x;
        if (row < rows && col < cols) tile[r][threadIdx.x] = in[(size_t)row * cols + col];
    }
    __syncthreads();
    for (int c = threadIdx.y; c < CAST_TILE; c += blockDim.y) {
        int col = tile_col + c, row = tile_row + threadIdx.x;
        if (row < rows && col < cols) out_t[(size_t)col * rows + row] = tile[threadIdx.x][c];
    }
}

static inline void transpose_bytes(fp8 *out_t, const fp8 *in, int rows, int cols, cudaStream_t stream) {
    if (ceil_div(rows, CAST_TILE) > 65535)
        fail("transpose: %d rows exceed the grid limit (%d)", rows, 65535 * CAST_TILE);
    dim3 grid(ceil_div(cols, CAST_TILE), ceil_div(rows, CAST_TILE)), block(CAST_TILE, 8);
    launch<transpose_bytes_kernel>({grid, block, 0, stream}, out_t, in, rows, cols);
}

// dst += src: a reduce-scattered gradient chunk into the gradient shard; a bias gradient cuBLASLt's BGRADB
// epilogue wrote (it overwrites) into the one the micro-steps accumulate.
__global__ void add_kernel(float *dst, const float *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __fadd_rn(dst[i], src[i]);
}

// out[r * piece + i] = BF16(in[r * stride + i]) for the `ways` ranks' parts r and i < piece.
__global__ void gather_bf16_kernel(bf16 *out, const float *in, size_t stride, size_t piece, int ways) {
    size_t n = piece * ways;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x)
        out[k] = __float2bfloat16_rn(in[k / piece * stride + k % piece]);
}

__global__ void widen_bf16_kernel(float *out, const bf16 *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __bfloat162float(in[i]);
}

// buf (n floats) = the sum over the ranks, in BF16, through staging (staging_elems BF16 elements).
static inline void comm_all_reduce_bf16(Comm *c, float *buf, size_t n, bf16 *staging, size_t staging_elems,
                                        cudaStream_t stream) {
    if (!c->comm) return;
    for (size_t done = 0; done < n; done += staging_elems) {
        size_t piece = n - done < staging_elems ? n - done : staging_elems;
        launch<gather_bf16_kernel>({elementwise_blocks(piece), 256, 0, stream}, staging, buf + done, piece,
                                   piece, 1);
        comm_all_reduce(c, staging, piece, ncclBfloat16, ncclSum, stream);
        launch<widen_bf16_kernel>({elementwise_blocks(piece), 256, 0, stream}, buf + done, staging, piece);
    }
}

// comm_reduce_scatter in BF16: base holds world_size chunks of `chunk` floats; this rank's chunk becomes the
// sum, each piece of the chunks gathered into staging as world_size parts.
static inline void comm_reduce_scatter_bf16(Comm *c, float *base, size_t chunk, bf16 *staging,
                                            size_t staging_elems, cudaStream_t stream) {
    if (!c->comm) return;
    size_t ways = (size_t)c->world_size, most = staging_elems / ways;
    for (size_t done = 0; done < chunk; done += most) {
        size_t piece = chunk - done < most ? chunk - done : most;
        launch<gather_bf16_kernel>({elementwise_blocks(piece * ways), 256, 0, stream}, staging, base + done,
                                   chunk, piece, c->world_size);
        comm_reduce_scatter_typed(c, staging, piece, ncclBfloat16, sizeof(bf16), stream);
        launch<widen_bf16_kernel>({elementwise_blocks(piece), 256, 0, stream},
                                  base + (size_t)c->rank * chunk + done, staging + (size_t)c->rank * piece,
                                  piece);
    }
}

#endif // GPU_ZERO_CUH
