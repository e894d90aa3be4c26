// emu/library_types.h: CUDA's data-type tags (library_types.h) for the CPU emulation build, the values
// CUDA gives them.
#ifndef EMU_LIBRARY_TYPES_H
#define EMU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_R_8U = 8,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14,
    CUDA_R_8F_E4M3 = 28,
    CUDA_R_8F_E5M2 = 29,
} cudaDataType_t;

typedef cudaDataType_t cudaDataType;

#endif // EMU_LIBRARY_TYPES_H
