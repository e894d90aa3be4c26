// gpu/layers.cuh: the non-GEMM layers of the CUDA trainer, one header per concern.
#ifndef GPU_LAYERS_CUH
#define GPU_LAYERS_CUH

#include "activations.cuh"
#include "crossentropy.cuh"
#include "encoder.cuh"
#include "layer_common.cuh"
#include "norms.cuh"
#include "reductions.cuh"

#endif // GPU_LAYERS_CUH
