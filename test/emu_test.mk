# emu_test.mk: the CUDA code on the CPU emulation of CUDA (emu/emu.mk builds it; docs/emulation.md).
#   make test_emu           the emulator against CUDA's documented semantics, and the planted faults it
#                           must catch (test/test_emu.sh), and the layers' kernels (gpu/) against the CPU
#                           reference (dev/bench_kernels.cu, emulated)
#   make test_gpu_emu       test/test_gpu.sh, the whole GPU test suite, with ./train_emu for ./train
#   make test_emu_trainer   what only the emulation can show of the trainer: ZeRO-3's stream schedule under
#                           adversarial stream and thread orders, each cross-stream wait needed, launches per
#                           step, device memory against --dry_run's plan, a run under the sanitizers
#   make test_dist_emu      ./train_emu under mpirun (2 and 4 processes, ZeRO 0/1/3) against ./train_cpu
#   make test_first_contact scripts/first_contact.sh (gpu_check.sh's first stage: every GEMM form, cuDNN's plans,
#                           NCCL, two-step runs, each against the CPU) on the emulation, and planted faults that
#                           its rows must fail (test/test_first_contact.sh)
#   make test_racecheck     the trainer under the emulation's race checker: every kernel, every recipe, both
#                           architectures, no race (test/test_racecheck.sh)
#   make test_preempt       runs that end early keep their work, ./train_cpu and ./train_emu, one process and two:
#                           stop signals (also during set-up, SIGHUP, scripts/launch.sh stopped while a slow
#                           checkpoint is written), --time_limit_s, a second signal, stdout's reader gone, a
#                           file-size limit, ranks with other flags, the guards' stops (test/test_preempt.sh)
#   make mutants            mutation testing, outside make test (about an hour on 2 cores): dev/mutants.py plants
#                           each GPU bug of its list in a copy of the tree and runs the targets that must fail
# Included by the main Makefile after emu/emu.mk. This fragment leaves the default goal as it was.
_emu_test_saved_goal := $(.DEFAULT_GOAL)

test/build/test_emu: test/test_emu.cu test/test_util.h $(GPU_HEADERS) core/fp8_scaling.h $(EMU_OBJS)
	@mkdir -p $(@D)
	$(call emu_link,test/test_emu.cu,$(EMU_OBJS),-O2 -g)

test/build/test_emu_sanitize: test/test_emu.cu test/test_util.h $(GPU_HEADERS) core/fp8_scaling.h $(EMU_SANITIZE_OBJS)
	@mkdir -p $(@D)
	$(call emu_link,test/test_emu.cu,$(EMU_SANITIZE_OBJS),$(EMU_SANITIZE_FLAGS))

test/build/first_contact_emu: test/first_contact.cu $(GPU_HEADERS) core/fp8_scaling.h core/memory_plan.h $(EMU_OBJS)
	@mkdir -p $(@D)
	$(call emu_link,test/first_contact.cu,$(EMU_OBJS),-O2 -g)

test/build/bench_kernels_emu: $(BENCH_KERNELS_DEPS) $(EMU_OBJS)
	@mkdir -p $(@D)
	$(call emu_link,dev/bench_kernels.cu,$(EMU_OBJS),-O2 -g)

test/build/train_emu_sanitize: train_gpt_fp8.cu $(HEADERS) $(GPU_HEADERS) $(EMU_SANITIZE_OBJS)
	@mkdir -p $(@D)
	$(call emu_link,train_gpt_fp8.cu,$(EMU_SANITIZE_OBJS),$(EMU_SANITIZE_FLAGS))

# The trainer built as against cuBLAS 12.8's headers, which lack Hopper's block scale modes (emu/cublasLt.h's
# CUDA_EMU_CUBLAS_HEADERS): it builds, and refuses the block recipes at start (test_emu_trainer.sh).
test/build/train_emu_cublas12.8: train_gpt_fp8.cu $(HEADERS) $(GPU_HEADERS) $(EMU_OBJS)
	@mkdir -p $(@D)
	$(call emu_link,train_gpt_fp8.cu,$(EMU_OBJS),-O1 -g -DCUDA_EMU_CUBLAS_HEADERS=120800)

test/build/train_emu_racecheck: train_gpt_fp8.cu $(HEADERS) $(GPU_HEADERS) $(EMU_OBJS)
	@mkdir -p $(@D)
	$(call emu_link_racecheck,train_gpt_fp8.cu,$(EMU_OBJS))

test/build/bench_kernels_racecheck: $(BENCH_KERNELS_DEPS) $(EMU_OBJS)
	@mkdir -p $(@D)
	$(call emu_link_racecheck,dev/bench_kernels.cu,$(EMU_OBJS))

test/build/test_emu_racecheck: test/test_emu.cu test/test_util.h $(GPU_HEADERS) core/fp8_scaling.h $(EMU_OBJS)
	@mkdir -p $(@D)
	$(call emu_link_racecheck,test/test_emu.cu,$(EMU_OBJS))

.PHONY: test_emu test_gpu_emu test_gpu_quick test_emu_trainer test_dist_emu test_racecheck test_preempt test_first_contact mutants
test_emu: test/build/test_emu test/build/test_emu_sanitize test/build/test_emu_racecheck test/build/bench_kernels_emu \
          test/build/bench_kernels_racecheck
	bash test/test_emu.sh

test_gpu_emu: train_emu train_cpu test/build/compare_debug_state test/build/check_state
	DATA="$(DATA)" TRAIN=./train_emu bash test/test_gpu.sh

# make check's part of it: the first step of bfloat16 and float8 (delayed, current) against the CPU reference
test_gpu_quick: train_emu train_cpu test/build/compare_debug_state test/build/check_state
	DATA="$(DATA)" TRAIN=./train_emu TEST_GPU_QUICK=1 bash test/test_gpu.sh

test_emu_trainer: train_emu train_cpu test/build/train_emu_sanitize test/build/train_emu_cublas12.8
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_emu_trainer.sh

test_dist_emu: train_emu train_cpu python_deps test/build/test_emu test/compare_runs.py
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_dist_emu.sh

# Preloaded into the trainers of test_preempt's launcher case: every fsync a second slower (a slow checkpoint).
test/build/slow_fsync_shim.so: test/slow_fsync_shim.c
	@mkdir -p $(@D)
	$(CC) -std=c11 $(WARN) -O2 -shared -fPIC -o $@ $< -ldl

test_preempt: train_emu train_cpu test/build/slow_fsync_shim.so
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_preempt.sh

test_first_contact: train_emu train_cpu test/build/compare_debug_state test/build/first_contact_emu
	DATA="$(DATA)" bash test/test_first_contact.sh

test_racecheck: test/build/train_emu_racecheck
	DATA="$(DATA)" bash test/test_racecheck.sh

mutants: python_deps
	$(PYTHON) dev/mutants.py

test_cpu: test_emu test_gpu_emu test_emu_trainer test_dist_emu test_racecheck test_preempt test_first_contact

.DEFAULT_GOAL := $(_emu_test_saved_goal)
