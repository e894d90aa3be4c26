# fp8_test.mk: build and run the host-only check of fp8_scaling.h against CUDA's conversions.
# Included by the main Makefile; also usable alone: make -f test/fp8_test.mk test_fp8_convert
# Needs nvcc (for cuda_fp8.h / cuda_bf16.h) but no GPU. OpenMP spreads the 2^32-float sweep over the cores.

NVCC ?= nvcc
NVCC_HOST_FLAGS ?= -O2 -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror

test/build/test_fp8_convert: test/test_fp8_convert.cu core/fp8_scaling.h
	mkdir -p test/build
	$(NVCC) $(NVCC_HOST_FLAGS) -o $@ $< -Xcompiler -fopenmp

.PHONY: test_fp8_convert
test_fp8_convert: test/build/test_fp8_convert
	./test/build/test_fp8_convert
