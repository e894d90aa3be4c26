# Builds the CPU reference trainer (train_cpu), the CUDA trainer (train), and runs the tests.
#   make train_cpu   gcc, OpenMP; OpenBLAS for the GEMMs when its headers and library are installed
#   make train       nvcc for GPU_ARCH (default sm_90a: H100/H200)
#   make demo        prepare tinyshakespeare and compare float32 / bfloat16 / float8 on a small model
#   make test        every test that needs no GPU
#   make test_gpu    the CUDA trainer against the CPU reference (needs a GPU)

CC ?= gcc
NVCC ?= nvcc
PYTHON ?= python3
CFLAGS ?= -O3 -march=native
WARN := -Wall -Wextra -Werror
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -fopenmp -I.
LDLIBS := -lm

# OpenBLAS when present: Debian's libopenblas-dev provides both the header and the library.
HAVE_OPENBLAS := $(shell printf '\#include <cblas.h>\nint main(void){return 0;}' | \
    $(CC) -x c - -o /dev/null -lopenblas 2>/dev/null && echo 1)
ifeq ($(HAVE_OPENBLAS),1)
  BLAS_FLAGS := -DUSE_BLAS
  BLAS_LIBS := -lopenblas
endif

HEADERS := common.h fp8_scaling.h gpt_model.h cli.h dataloader.h tokenizer.h checkpoint.h train_log.h

.PHONY: all train_cpu demo test test_cpu clean check_blas
all: train_cpu

train_cpu: train_gpt.c $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(BLAS_FLAGS) -o $@ train_gpt.c $(BLAS_LIBS) $(LDLIBS)

check_blas:
	@if [ "$(HAVE_OPENBLAS)" != 1 ]; then echo "note: OpenBLAS not found (apt-get install libopenblas-dev): using the plain-C GEMM, slower"; fi

# Sanitized build for the bad-input tests: every error path must end cleanly, never crash.
test/build/train_cpu_asan: train_gpt.c $(HEADERS)
	mkdir -p test/build
	$(CC) $(BASE_CFLAGS) -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -o $@ train_gpt.c $(LDLIBS)

DATA ?= ../shared/data/tinyshakespeare.txt
demo: check_blas train_cpu
	bash scripts/demo.sh "$(DATA)"

include test/fp8_test.mk
include test/data_test.mk
include test/train_test.mk

test: test_cpu
	@echo "all CPU tests passed"

clean:
	rm -rf train_cpu train test/build out
