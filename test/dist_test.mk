# dist_test.mk: the trainers as several processes (MPI), on the CPU.
#   make test_dist   N processes with batch B against one process with batch N*B (ZeRO 0, 1, 3; float32 and
#                    float8), amax agreement across ranks, bit-exact resume, refused resumes
# Included by the main Makefile (PYTHON, DATA, train_cpu). Skips with a message where MPI is missing.
.PHONY: test_dist
test_dist: train_cpu python_deps test/test_dist.sh test/compare_runs.py
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_dist.sh

test_cpu: test_dist
