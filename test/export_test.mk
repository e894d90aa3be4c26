# export_test.mk: the test of scripts/export_hf.py (llm.c model file -> Hugging Face GPT-2 or Llama directory, BF16
# or per-tensor-scaled FP8 E4M3) and of test/gpt2_reference.py and test/llama_reference.py (the numpy models it is
# checked with).
# Included by the main Makefile, which defines DATA and the target train_cpu.
#   make test_export    trains a tiny GPT-2 for 5 steps and a tiny Llama for 40, exports them, compares logits
#                       with train_cpu's float32 ones and E4M3/BF16 bytes with fp8_scaling.h, and loads them
#                       with stock transformers where make clients_deps installed it (about 15 s, 45 s with
#                       transformers; needs numpy for $(PYTHON): make python_deps, or apt-get install
#                       python3-numpy; and $(CC) for a small program compiled against fp8_scaling.h)
# This fragment leaves the including Makefile's default goal as it was.
_export_test_saved_goal := $(.DEFAULT_GOAL)

PYTHON ?= python3
CC ?= gcc

.PHONY: test_export
test_export: train_cpu python_deps test/test_export.sh scripts/export_hf.py test/gpt2_reference.py \
             test/llama_reference.py test/export_checks.py core/fp8_scaling.h
	DATA="$(DATA)" PYTHON=$(PYTHON) CC="$(CC)" bash test/test_export.sh

.DEFAULT_GOAL := $(_export_test_saved_goal)
