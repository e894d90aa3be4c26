# dry_run_test.mk: the tests of --dry_run, the per-process memory plan (dry_run.h over memory_plan.h).
# Included by the main Makefile, which defines the targets train_cpu and test/build/test_memory_plan (c_tests.mk).
#   make test_dry_run    the plan's ZeRO / recompute sizes against first-principles expectations and the
#                        report's verdicts (test_memory_plan), then `train_cpu --dry_run 1` end to end
#                        (test_dry_run.sh; it says SKIPPED while train_cpu does not call dry_run_report), then
#                        the time plan against published runs (test_plan_vs_published.sh, also alone:
#   make test_plan_vs_published)
# This fragment leaves the including Makefile's default goal as it was.
_dry_run_test_saved_goal := $(.DEFAULT_GOAL)

.PHONY: test_dry_run test_plan_vs_published
test_dry_run: train_cpu test/build/test_memory_plan test/test_dry_run.sh test_plan_vs_published
	./test/build/test_memory_plan
	bash test/test_dry_run.sh

test_plan_vs_published: train_cpu test/test_plan_vs_published.sh test/plan_vs_published.tsv
	bash test/test_plan_vs_published.sh

.DEFAULT_GOAL := $(_dry_run_test_saved_goal)
