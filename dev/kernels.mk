# dev/kernels.mk: builds the kernel checks and benchmarks of dev/ against the CPU reference.
# Include it from the main Makefile or use it alone: make -f dev/kernels.mk build/bench_kernels
# Needs nvcc; running the result needs a GPU. Another architecture: GPU_ARCH='-gencode arch=compute_89,code=sm_89'
# (Ada) or GPU_ARCH='-gencode arch=compute_100a,code=sm_100a' (Blackwell).

NVCC ?= nvcc
GPU_ARCH ?= -gencode arch=compute_90a,code=sm_90a
NVCC_FLAGS ?= -O3 -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fopenmp -I.

# train_gpt.c is the oracle the benchmark includes; the headers are what it and the kernels include.
BENCH_KERNELS_DEPS := dev/bench_kernels.cu train_gpt.c $(wildcard gpu/*.cuh gpu/*.h core/*.h)

build/bench_kernels: $(BENCH_KERNELS_DEPS) $(CUDNN_OBJ)
	mkdir -p build
	$(if $(nvcc_build),$(call nvcc_build,$(NVCC_FLAGS) $(CUDNN_FLAGS) $(GPU_ARCH) -o $@ dev/bench_kernels.cu $(CUDNN_LIBS) -lm),$(NVCC) $(NVCC_FLAGS) $(CUDNN_FLAGS) $(GPU_ARCH) -o $@ dev/bench_kernels.cu $(CUDNN_LIBS) -lm)

.PHONY: bench_kernels
bench_kernels: build/bench_kernels
	./build/bench_kernels
