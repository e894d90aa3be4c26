# train_test.mk: tests of the CPU reference trainer (train_gpt.c) and its host-side headers.
# Included by the main Makefile, which defines DATA, PYTHON, C_TESTS (test/c_tests.mk: the C unit tests) and
# the targets train_cpu and test/build/train_cpu_asan.
#   make test_train        learning on tinyshakespeare; bfloat16 / float8 against the float32 seed spread (GPT-2
#                          and Llama)
#   make test_resume       stop + resume is bit-identical, for every dtype; refusals of foreign checkpoints
#   make test_verify_resume a damaged latest checkpoint falls back to the newest intact one (1 and 2
#                          processes, train_cpu and train_emu); a model of another step, a directory without
#                          its pointer refused
#   make test_recompute    --recompute 1 is bit-identical to --recompute 0 in every dtype
#   make test_bad_inputs   every bad input of test/bad_inputs.tsv gives one clean error line (also under ASan)
#   make test_run_files    an output directory belongs to one run: two runs at once, node-local directories
#                          (mpirun), stale RANK / WORLD_SIZE, a log that cannot grow, a long step's progress
#                          (train_cpu and train_emu)
#   make test_eval         --eval_data (llm.c's multiple-choice eval files) on llm.c-written fixtures (test/llmc_hellaswag):
#                          PyTorch's count, prepare_eval.py's file, --eval_every, processes, train_emu, bad files
#   make test_llmc_llama   llm.c's Llama files as its own Python writers made them (test/llmc_llama) load with
#                          llm.c's first loss, and what train_cpu writes is the llama3 branch's file
# This fragment leaves the including Makefile's default goal as it was.
_train_test_saved_goal := $(.DEFAULT_GOAL)

.PHONY: test_train test_resume test_recompute test_bad_inputs test_llmc_llama test_eval \
        test_run_files test_verify_resume test_trainer
test_train: train_cpu test/test_train.sh
	ARCH=gpt2 DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_train.sh
	ARCH=llama DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_train.sh

test_resume: train_cpu test/test_resume.sh
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_resume.sh

test_verify_resume: train_cpu train_emu test/test_verify_resume.sh
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_verify_resume.sh

test_recompute: train_cpu test/test_recompute.sh
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_recompute.sh

test_bad_inputs: train_cpu train_emu test/build/train_cpu_asan test/test_bad_inputs.sh test/bad_inputs.tsv
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_bad_inputs.sh

test_run_files: train_cpu train_emu test/test_run_files.sh
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_run_files.sh

test_eval: train_cpu train_emu test/test_eval.sh
	PYTHON=$(PYTHON) bash test/test_eval.sh

test_llmc_llama: train_cpu test/test_llmc_llama.sh
	PYTHON=$(PYTHON) bash test/test_llmc_llama.sh

# all of the above, and the C unit tests
test_trainer: $(C_TESTS:%=test_%) test_train test_resume test_recompute test_bad_inputs \
              test_run_files test_verify_resume test_llmc_llama test_eval

test_cpu: test_trainer

.DEFAULT_GOAL := $(_train_test_saved_goal)
