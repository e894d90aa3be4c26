# compare_test.mk: the test of scripts/compare.sh and scripts/plot_compare.py (float8 vs bfloat16 table and plot).
# Included by the main Makefile, which defines DATA, PYTHON and the target train_cpu.
#   make test_compare    a tiny comparison on the CPU trainer, its table checked against its logs (needs matplotlib
#                        for $(PYTHON): python3 -m pip install matplotlib)
#   make test_follow_log scripts/follow_log.py: a run's log into TensorBoard (read back) and W&B offline (needs
#                        torch; installs tensorboard and wandb into build/python/ when missing)
# This fragment leaves the including Makefile's default goal as it was.
_compare_test_saved_goal := $(.DEFAULT_GOAL)

PYTHON ?= python3

.PHONY: test_compare test_follow_log
test_compare: train_cpu python_deps test/test_compare.sh scripts/compare.sh scripts/plot_compare.py
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_compare.sh

test_follow_log: train_cpu python_deps test/test_follow_log.sh scripts/follow_log.py
	PYTHON=$(PYTHON) bash test/test_follow_log.sh

.DEFAULT_GOAL := $(_compare_test_saved_goal)
