# launch_test.mk: the test of scripts/launch.sh (the mpirun wrapper) and scripts/slurm_train.sbatch.
# Included by the main Makefile, which defines DATA, PYTHON and the target train_cpu.
#   make test_launch    the printed mpirun commands and the refusals; with mpirun, real 2-process runs (a shell
#                       command, and train_cpu when it is built with MPI)
#   make test_slurm     scripts/slurm_train.sbatch on a one-node Slurm cluster the test starts and stops: the
#                       warning signal, the requeue and the resumed job byte-identical to an uninterrupted one;
#                       a plain scancel and the time limit during a slow checkpoint (test/slow_fsync_shim.so)
#                       (test/test_slurm.sh; 35 to 75 s: the time limit waits for slurmctld's 30 s check)
# This fragment leaves the including Makefile's default goal as it was.
_launch_test_saved_goal := $(.DEFAULT_GOAL)

PYTHON ?= python3

.PHONY: test_launch test_slurm
test_launch: train_cpu test/test_launch.sh scripts/launch.sh scripts/slurm_train.sbatch
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_launch.sh

test_slurm: train_cpu test/build/slow_fsync_shim.so test/test_slurm.sh scripts/slurm_train.sbatch
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_slurm.sh

.DEFAULT_GOAL := $(_launch_test_saved_goal)
