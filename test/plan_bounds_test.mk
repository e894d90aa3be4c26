# plan_bounds_test.mk: the CUDA trainer's buffers against its memory plan (test/test_plan_bounds.cu).
# Included by the main Makefile, which defines NVCC, NVCC_FLAGS, GPU_ARCH, CUDA_LIBS, HEADERS and GPU_HEADERS.
#   make test_plan_bounds   every pointer train_gpt_fp8.cu carves and derives, with its extent, inside the
#                           plan buffer it comes from, over small models (layers 1-4, bfloat16/float8,
#                           ZeRO 0/1/3, 1-8 ranks, recompute 0/1) and 70B on 32 ranks. Needs nvcc to build
#                           (it compiles the trainer); runs on the CPU: no GPU, no CUDA call.
# Include it after GPU_HEADERS and CUDA_LIBS are defined (prerequisites expand as the rule is read).
# This fragment leaves the including Makefile's default goal as it was.
_plan_bounds_test_saved_goal := $(.DEFAULT_GOAL)

test/build/test_plan_bounds: test/test_plan_bounds.cu test/test_util.h train_gpt_fp8.cu $(HEADERS) $(GPU_HEADERS)
	mkdir -p test/build
	$(NVCC) $(NVCC_FLAGS) $(GPU_ARCH) -o $@ test/test_plan_bounds.cu $(CUDA_LIBS)

.PHONY: test_plan_bounds
test_plan_bounds: test/build/test_plan_bounds
	./test/build/test_plan_bounds

.DEFAULT_GOAL := $(_plan_bounds_test_saved_goal)
