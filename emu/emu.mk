# emu/emu.mk: the CPU emulation build of the CUDA code (docs/emulation.md). The .cu files compile as C++ with
# the host compiler and emu/ first on the include path, against emu/'s stand-ins for the CUDA runtime,
# cuBLASLt and NCCL; no nvcc, no GPU.
#   make train_emu              ./train_emu, the CUDA trainer on the CPU (with MPI when mpicc is present)
#   make train_emu SANITIZE=1   the same under AddressSanitizer and UBSan (slower; kernels' out-of-bounds
#                               accesses and undefined behaviour are reported)
#   make train_emu RACECHECK=1  the same with the race checker (emu/racecheck.cpp; slower still): the
#                               trainer's code compiled with -fsanitize=thread calls the checker at every
#                               access, and races in shared and device memory are reported
# Included by the main Makefile, which defines WARN, HEADERS, GPU_HEADERS, MPI_CFLAGS and MPI_LIBS.
# -ffp-contract=off: the kernels' _rn intrinsics promise unfused IEEE operations, so the host compiler
# must not fuse a product and a sum into an FMA either. -Wno-unknown-pragmas: nvcc's `#pragma unroll`
# hints have no meaning to the host compiler. This fragment leaves the default goal as it was.
_emu_saved_goal := $(.DEFAULT_GOAL)

EMU_CXX ?= g++
EMU_SANITIZE_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
EMU_BASE_FLAGS := -std=c++17 -ffp-contract=off -fopenmp $(WARN) -Wno-unknown-pragmas -Iemu -I. \
                  $(MPI_CFLAGS) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX
EMU_LIBS := $(MPI_LIBS) -ldl -lpthread -lm
EMU_HEADERS := emu/cuda_runtime.h emu/cuda_bf16.h emu/library_types.h emu/cublasLt.h emu/nccl.h \
               emu/nvtx3/nvToolsExt.h emu/emu.h
# The runtime's files share emu/runtime_internal.h (its opening comment says which file has what).
EMU_RUNTIME_SOURCES := diagnostics symbols memory threads launch streams report
EMU_SOURCES := $(EMU_RUNTIME_SOURCES) cublaslt nccl racecheck

# Two variants of the emulator's objects: plain (-O2) and sanitized.
build/emu/%.o: emu/%.cpp $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_BASE_FLAGS) -O2 -g -c $< -o $@

build/emu-sanitize/%.o: emu/%.cpp $(EMU_HEADERS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_BASE_FLAGS) $(EMU_SANITIZE_FLAGS) -c $< -o $@

$(EMU_RUNTIME_SOURCES:%=build/emu/%.o) $(EMU_RUNTIME_SOURCES:%=build/emu-sanitize/%.o): emu/runtime_internal.h

# The emulated cuBLASLt's GELU epilogues share the trainer's GELU (gpu/gelu.cuh).
build/emu/cublaslt.o build/emu-sanitize/cublaslt.o: gpu/gelu.cuh

EMU_OBJS := $(EMU_SOURCES:%=build/emu/%.o)
EMU_SANITIZE_OBJS := $(EMU_SOURCES:%=build/emu-sanitize/%.o)

# An emulated program: $(call emu_link,sources,objects,extra flags)
emu_link = $(EMU_CXX) $(EMU_BASE_FLAGS) $(3) -x c++ $(1) -x none $(2) -o $@ $(EMU_LIBS)
# The race-check variant: the program's own code instrumented (-fsanitize=thread compiles a call to the race
# checker into every access), linked against the plain objects without ThreadSanitizer's runtime, whose
# hooks emu/racecheck.cpp provides: $(call emu_link_racecheck,source,objects)
EMU_RACECHECK_FLAGS := -O2 -g -fsanitize=thread
emu_link_racecheck = $(EMU_CXX) $(EMU_BASE_FLAGS) $(EMU_RACECHECK_FLAGS) -x c++ -c $(1) -o $@.o && \
                     $(EMU_CXX) $(EMU_BASE_FLAGS) $@.o $(2) -o $@ $(EMU_LIBS) && rm -f $@.o

# ./train_emu is one file for every variant: build/command/train_emu names the one it holds, so that switching
# SANITIZE or RACECHECK rebuilds it.
ifeq ($(SANITIZE),1)
TRAIN_EMU_VARIANT := sanitize
TRAIN_EMU_OBJS := $(EMU_SANITIZE_OBJS)
TRAIN_EMU_FLAGS := $(EMU_SANITIZE_FLAGS)
else ifeq ($(RACECHECK),1)
TRAIN_EMU_VARIANT := racecheck
TRAIN_EMU_OBJS := $(EMU_OBJS)
else
TRAIN_EMU_VARIANT := plain
TRAIN_EMU_OBJS := $(EMU_OBJS)
TRAIN_EMU_FLAGS := -O2 -g
endif

build/command/train_emu: COMMAND = $(TRAIN_EMU_VARIANT)
train_emu: train_gpt_fp8.cu $(HEADERS) $(GPU_HEADERS) $(TRAIN_EMU_OBJS) build/command/train_emu
ifeq ($(TRAIN_EMU_VARIANT),racecheck)
	$(call emu_link_racecheck,train_gpt_fp8.cu,$(TRAIN_EMU_OBJS))
else
	$(call emu_link,train_gpt_fp8.cu,$(TRAIN_EMU_OBJS),$(TRAIN_EMU_FLAGS))
endif

.DEFAULT_GOAL := $(_emu_saved_goal)
