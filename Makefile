# Builds the CPU reference trainer (train_cpu), the CUDA trainer (train), and runs the tests.
#   make train_cpu   gcc, OpenMP; OpenBLAS for the GEMMs when its headers and library are installed
#   make train       nvcc for GPU_ARCH (default sm_90a and sm_100a: H100/H200 and B200)
#   make demo        prepare tinyshakespeare and compare float32 / bfloat16 / float8 on a small model
#   make check       the quick tier for the edit-compile-test loop (the first run also builds the emulated trainer)
#   make test        every test that needs no GPU (CI's)
#   make test_gpu    the CUDA trainer against the CPU reference (needs a GPU)
#   make train_emu   the CUDA trainer compiled for the CPU emulation of CUDA (emu/; `make test` runs the GPU
#                    test suite against it)

CC ?= gcc
NVCC ?= nvcc
PYTHON ?= python3
CFLAGS ?= -O3 -march=native
WARN := -Wall -Wextra -Werror
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -fopenmp -I.
LDLIBS := -lm

# OpenBLAS when present: Debian's libopenblas-dev provides both the header and the library.
HAVE_OPENBLAS := $(shell echo 'int main(void){return 0;}' | \
    $(CC) -include cblas.h -x c - -o /dev/null -lopenblas 2>/dev/null && echo 1)
ifeq ($(HAVE_OPENBLAS),1)
  BLAS_FLAGS := -DUSE_BLAS
  BLAS_LIBS := -lopenblas
endif

# MPI when present (Debian: libopenmpi-dev openmpi-bin): the trainers then also run as several processes
# under mpirun or srun. Without it they build and run as one process.
MPI_COMPILE := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LINK := $(shell mpicc --showme:link 2>/dev/null)
ifneq ($(MPI_LINK),)
  MPI_CFLAGS := -DUSE_MPI $(MPI_COMPILE)
  MPI_LIBS := $(MPI_LINK)
endif

HEADERS := $(wildcard core/*.h)

.PHONY: all demo test test_cpu clean check_blas
all: train_cpu

# build/command/NAME holds what builds the program NAME and is rewritten only when that changes (other CFLAGS,
# MPI or OpenBLAS installed or removed, cuDNN found or not, another emulator variant): a program is rebuilt
# when its sources or its build command changed, and only then. A target sets COMMAND for its file.
.PHONY: FORCE
build/command/%: FORCE
	@mkdir -p $(@D)
	@[ "$$(cat $@ 2>/dev/null)" = "$(COMMAND)" ] || echo "$(COMMAND)" >$@

TRAIN_CPU_BUILD = $(CC) $(BASE_CFLAGS) $(CFLAGS) $(BLAS_FLAGS) $(MPI_CFLAGS) -o train_cpu train_gpt.c $(BLAS_LIBS) $(MPI_LIBS) $(LDLIBS)
build/command/train_cpu: COMMAND = $(TRAIN_CPU_BUILD)
train_cpu: train_gpt.c $(HEADERS) build/command/train_cpu
	$(TRAIN_CPU_BUILD)

check_blas:
	@if [ "$(HAVE_OPENBLAS)" != 1 ]; then echo "note: OpenBLAS not found (apt-get install libopenblas-dev): the CPU trainer uses its plain-C GEMM"; fi

# Sanitized build for the bad-input tests: every error path must end cleanly, never crash.
test/build/train_cpu_asan: train_gpt.c $(HEADERS)
	mkdir -p test/build
	$(CC) $(BASE_CFLAGS) -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -o $@ train_gpt.c $(LDLIBS)

# numpy and matplotlib for the Python tools and tests: the interpreter's own, else pip-installed into
# build/python/ (scripts/python_deps.sh), which every command make runs finds on PYTHONPATH. clients_deps adds
# the real clients the tests check against where they are installed: torch, transformers, accelerate and torchao
# from PyPI (about 2 minutes and 5.7 GB; CI installs them).
PYTHON_DEPS_DIR := $(CURDIR)/build/python
export PYTHONPATH := $(PYTHON_DEPS_DIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
.PHONY: python_deps clients_deps
python_deps: $(PYTHON_DEPS_DIR)/.ready
$(PYTHON_DEPS_DIR)/.ready: scripts/python_deps.sh
	@PYTHON=$(PYTHON) bash scripts/python_deps.sh $(PYTHON_DEPS_DIR)
clients_deps: $(PYTHON_DEPS_DIR)/.clients_ready
$(PYTHON_DEPS_DIR)/.clients_ready: scripts/python_deps.sh
	@PYTHON=$(PYTHON) bash scripts/python_deps.sh $(PYTHON_DEPS_DIR) clients

DATA ?= ../shared/data/tinyshakespeare.txt
demo: check_blas train_cpu
	bash scripts/demo.sh "$(DATA)"

include test/c_tests.mk
include test/fp8_test.mk
include test/data_test.mk
include test/train_test.mk
include test/export_test.mk
include test/compare_test.mk
include test/dist_test.mk
include test/dry_run_test.mk
include test/launch_test.mk
include test/torch_peer_test.mk
include test/fuzz/fuzz.mk

test/build/train_cpu_noblas: train_gpt.c $(HEADERS)
	mkdir -p test/build
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ train_gpt.c $(LDLIBS)

.PHONY: test_compare_debug_state
test_compare_debug_state: train_cpu test/build/train_cpu_noblas test/build/compare_debug_state
	DATA="$(DATA)" bash test/test_compare_debug_state.sh

.PHONY: test_gpu_host skip_nvcc_tests
test_gpu_host: train train_cpu
	DATA="$(DATA)" bash test/test_gpu_host.sh

# The tests that compile CUDA code (on the CPU) need nvcc; without it they are reported as skipped.
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
ifeq ($(HAVE_NVCC),1)
NVCC_TESTS := test_fp8_convert test_gpu_host test_plan_bounds test_cudnn_graphs
else
NVCC_TESTS := skip_nvcc_tests
endif
skip_nvcc_tests:
	@echo "SKIPPED test_fp8_convert, test_gpu_host and test_plan_bounds: nvcc not found (install the CUDA toolkit to run them)"

.PHONY: test_health test_cpu_kernels

# The fast kernels with the trainer's own optimisation flags: the plain-C GEMM, and OpenBLAS's when present.
test/build/test_cpu_kernels: test/test_cpu_kernels.c test/test_util.h train_gpt.c $(HEADERS)
	mkdir -p test/build
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ test/test_cpu_kernels.c $(LDLIBS)

test/build/test_cpu_kernels_blas: test/test_cpu_kernels.c test/test_util.h train_gpt.c $(HEADERS)
	mkdir -p test/build
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(BLAS_FLAGS) -o $@ test/test_cpu_kernels.c $(BLAS_LIBS) $(LDLIBS)

test_cpu_kernels: test/build/test_cpu_kernels $(if $(BLAS_FLAGS),test/build/test_cpu_kernels_blas)
	./test/build/test_cpu_kernels
	$(if $(BLAS_FLAGS),./test/build/test_cpu_kernels_blas,@echo "SKIPPED the OpenBLAS GEMM: OpenBLAS not found")

test_health: train_cpu
	DATA="$(DATA)" bash test/test_health.sh

# scripts/study_report.py, the FP8 recipe study's tables (scripts/study_recipes.sh), on a miniature study
.PHONY: test_study_report
test_study_report: train_cpu python_deps
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_study_report.sh


test_cpu: $(NVCC_TESTS) test_layout test_doc_links test_dataloader test_prepare_data test_prepare_corpus test_dry_run test_launch test_slurm test_compare_debug_state \
          test_cpu_kernels test_health test_study_report test_export test_import test_compare test_follow_log test_torch_peer

test: test_cpu
	@echo "all CPU tests passed"

# The quick tier: the tree's layering and the docs' links, the CPU trainer's layers against finite differences, its kernels, flags,
# data and plans, and the first steps of bfloat16 and float8 on the emulated CUDA trainer against the CPU
# reference (test_gpu_quick). Every part is also in make test.
check: test_layout test_doc_links $(C_TESTS_QUICK:%=test_%) test_cpu_kernels test_dataloader test_gpu_quick
	@echo "quick checks passed (make test runs the whole suite)"

.PHONY: check test_layout test_doc_links
test_layout:
	$(PYTHON) test/test_layout.py
test_doc_links:
	bash test/test_doc_links.sh

clean:
	rm -rf train_cpu train train_emu build test/build out

# ---------------------------------------------------------------------------------------------------
# CUDA: the trainer, the GPU test, the benchmarks. GPU_ARCH picks the targets: by default one binary for Hopper
# (sm_90a: H100/H200) and Blackwell (sm_100a: B200/GB200), each an "a" target that runs on its architecture
# alone (the trainer refuses another GPU at start); -gencode arch=compute_89,code=sm_89 for Ada.
GPU_ARCH ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_100a,code=sm_100a
NVCC_FLAGS ?= -O3 -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fopenmp -I.
# WERROR: what a warning does to the GPU programs a user builds (train, build/first_contact, build/bench_gemm,
# build/bench_kernels). auto (the default): they build with -Werror first; where this machine's compilers warn
# (a host compiler newer than the one the code was checked with), one line says so and they build again
# without it. 1 (CI's .ci/run): a warning fails the build. compile_gpu and the tests always build with -Werror.
WERROR ?= auto
comma := ,
# $(call without_werror,FLAGS): FLAGS without nvcc's and the host compiler's -Werror
without_werror = $(subst $(comma)-Werror,,$(filter-out -Werror all-warnings,$(1)))
# $(call nvcc_build,ARGS): $(NVCC) ARGS, and under WERROR=auto, on failure, again without -Werror
nvcc_build = $(NVCC) $(1)$(if $(filter auto,$(WERROR)), || { echo "note: $@: the build failed with warnings as errors; building it again without -Werror (WERROR=1 insists)"; $(NVCC) $(call without_werror,$(1)); })
# nvcc takes MPI's -I, -L and -l flags as they are. NCCL (the GPU collectives) is the CUDA toolkit's or the
# system's, or NCCL_HOME's (a directory with include/nccl.h and lib/libnccl.so: scripts/gpu_check.sh links
# one from the nvidia-nccl wheel where the toolkit has none).
CUDA_LIBS := -lcublasLt -lnccl -ldl $(MPI_LIBS)
ifneq ($(NCCL_HOME),)
  NVCC_FLAGS += -I$(NCCL_HOME)/include
  CUDA_LIBS := -L$(NCCL_HOME)/lib -Xlinker -rpath=$(abspath $(NCCL_HOME))/lib $(CUDA_LIBS)
endif
NVCC_FLAGS += $(MPI_CFLAGS) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX # the C API only: its C++ bindings do not build warning-free
# cuDNN's fused attention (--attention fast, gpu/attention.cuh) when its headers are there: CUDNN_HOME (include/
# cudnn.h and lib/libcudnn.so.9, as the nvidia-cudnn wheel's nvidia/cudnn has them) and CUDNN_FRONTEND_HOME
# (include/cudnn_frontend.h, the header-only cudnn-frontend), by default where scripts/cudnn_deps.sh puts
# them. USE_CUDNN=0 builds without (the exact attention only), USE_CUDNN=1 insists. -isystem: the
# frontend's headers are not built warning-free under -Wextra.
CUDNN_HOME ?= $(CURDIR)/build/cudnn
CUDNN_FRONTEND_HOME ?= $(CURDIR)/build/cudnn_frontend
USE_CUDNN ?= $(if $(and $(wildcard $(CUDNN_HOME)/include/cudnn.h),$(wildcard $(CUDNN_FRONTEND_HOME)/include/cudnn_frontend.h)),1,0)
# gpu/attention_cudnn.cpp, host code, is compiled once and linked into every build (its NVRTC use is the
# frontend's).
ifeq ($(USE_CUDNN),1)
  CUDNN_FLAGS := -DUSE_CUDNN -isystem $(CUDNN_FRONTEND_HOME)/include -isystem $(CUDNN_HOME)/include
  CUDNN_OBJ := build/attention_cudnn.o
  CUDNN_LIBS := $(CUDNN_OBJ) -L$(CUDNN_HOME)/lib -l:libcudnn.so.9 -Xlinker -rpath=$(abspath $(CUDNN_HOME))/lib -lnvrtc
endif
GPU_HEADERS := $(wildcard gpu/*.cuh gpu/*.h)

.PHONY: test_gpu compile_gpu
build/attention_cudnn.o: gpu/attention_cudnn.cpp gpu/attention_cudnn.h gpu/common.cuh core/common.h
	mkdir -p build
	$(call nvcc_build,-O2 -std=c++17 -Xcompiler -Wall$(comma)-Wextra$(comma)-Werror $(CUDNN_FLAGS) -c gpu/attention_cudnn.cpp -o $@)

# The fast attention's graphs against cudnn-frontend's support rules, without a GPU (test/test_cudnn_graphs.cpp)
.PHONY: test_cudnn_graphs
ifeq ($(USE_CUDNN),1)
test/build/test_cudnn_graphs: test/test_cudnn_graphs.cpp test/test_util.h gpu/attention_cudnn.h core/gpt_model.h $(CUDNN_OBJ)
	mkdir -p test/build
	$(NVCC) -O1 -std=c++17 -Xcompiler -Wall,-Wextra,-Werror,-fopenmp -I. -o $@ test/test_cudnn_graphs.cpp $(CUDNN_LIBS)
# and again as cuDNN 9.17 (test/cudnn_version_shim.c answers cudnnGetVersion): Blackwell's deterministic
# backward refused
test/build/cudnn_version_shim.so: test/cudnn_version_shim.c
	mkdir -p test/build
	$(CC) -std=c11 $(WARN) -O2 -shared -fPIC -o $@ $<
test_cudnn_graphs: test/build/test_cudnn_graphs test/build/cudnn_version_shim.so
	./test/build/test_cudnn_graphs
	CUDNN_SHIM_VERSION=91700 LD_PRELOAD=$(CURDIR)/test/build/cudnn_version_shim.so ./test/build/test_cudnn_graphs
else
test_cudnn_graphs:
	@echo "SKIPPED test_cudnn_graphs: no cuDNN headers (bash scripts/cudnn_deps.sh --headers-only fetches them)"
endif

TRAIN_NVCC_ARGS = $(NVCC_FLAGS) $(CUDNN_FLAGS) $(GPU_ARCH) -o train train_gpt_fp8.cu $(CUDA_LIBS) $(CUDNN_LIBS)
build/command/train: COMMAND = $(NVCC) $(TRAIN_NVCC_ARGS) WERROR=$(WERROR)
train: train_gpt_fp8.cu $(HEADERS) $(GPU_HEADERS) $(CUDNN_OBJ) build/command/train
	$(call nvcc_build,$(TRAIN_NVCC_ARGS))

# The first-contact checks (test/first_contact.cu; scripts/first_contact.sh runs them): every GEMM form, cuDNN's
# plans and an NCCL communicator against CPU references, the first stage of scripts/gpu_check.sh.
build/first_contact: test/first_contact.cu $(GPU_HEADERS) core/fp8_scaling.h core/memory_plan.h $(CUDNN_OBJ)
	mkdir -p build
	$(call nvcc_build,$(NVCC_FLAGS) $(CUDNN_FLAGS) $(GPU_ARCH) -o $@ test/first_contact.cu $(CUDA_LIBS) $(CUDNN_LIBS))

build/bench_gemm: dev/bench_gemm.cu $(GPU_HEADERS) core/fp8_scaling.h core/gpt_model.h
	mkdir -p build
	$(call nvcc_build,$(NVCC_FLAGS) $(GPU_ARCH) -o $@ dev/bench_gemm.cu $(CUDA_LIBS))

include dev/kernels.mk
include test/plan_bounds_test.mk
include emu/emu.mk
include test/emu_test.mk

test/build/compare_debug_state: test/compare_debug_state.c core/debug_state.h core/atomic_file.h core/gpt_model.h
	mkdir -p test/build
	$(CC) $(BASE_CFLAGS) -O2 -o $@ test/compare_debug_state.c $(LDLIBS)

# -ffp-contract=off: AdamW recomputed in the trainers' float arithmetic, no fused multiply-add
test/build/check_state: test/check_state.c $(HEADERS)
	mkdir -p test/build
	$(CC) $(BASE_CFLAGS) -O2 -ffp-contract=off -o $@ test/check_state.c $(LDLIBS)

test_gpu: train train_cpu test/build/compare_debug_state test/build/check_state
	bash test/test_gpu.sh

# CI has no GPU: it compiles every CUDA program for each supported architecture, with cuDNN where found,
# and the trainer once without MPI and cuDNN.
GPU_ARCHS := sm_90a:-gencode=arch=compute_90a,code=sm_90a sm_89:-gencode=arch=compute_89,code=sm_89 \
             sm_100a:-gencode=arch=compute_100a,code=sm_100a
compile_gpu: $(CUDNN_OBJ)
	@set -e; for entry in $(GPU_ARCHS); do \
	    name=$${entry%%:*}; arch=$${entry#*:}; mkdir -p build/$$name; echo "nvcc $$name (cuDNN: $(USE_CUDNN))"; \
	    $(NVCC) $(NVCC_FLAGS) $(CUDNN_FLAGS) $$arch -o build/$$name/train train_gpt_fp8.cu $(CUDA_LIBS) $(CUDNN_LIBS); \
	    $(NVCC) $(NVCC_FLAGS) $$arch -o build/$$name/bench_gemm dev/bench_gemm.cu $(CUDA_LIBS); \
	    $(NVCC) $(NVCC_FLAGS) $(CUDNN_FLAGS) $$arch -o build/$$name/first_contact test/first_contact.cu $(CUDA_LIBS) \
	        $(CUDNN_LIBS); \
	    $(NVCC) $(NVCC_FLAGS) $(CUDNN_FLAGS) $$arch -o build/$$name/bench_kernels dev/bench_kernels.cu $(CUDA_LIBS) \
	        $(CUDNN_LIBS) -lm; \
	done
	@echo "nvcc sm_90a without MPI or cuDNN"; mkdir -p build/sm_90a # a machine without either still builds it
	$(NVCC) $(filter-out -DUSE_MPI,$(NVCC_FLAGS)) $(GPU_ARCH) -o build/sm_90a/train_without_mpi train_gpt_fp8.cu \
	    $(filter-out $(MPI_LIBS),$(CUDA_LIBS))
