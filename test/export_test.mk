# export_test.mk: the tests of scripts/export_hf.py (llm.c model file -> Hugging Face GPT-2 or Llama directory, BF16
# or per-tensor-scaled FP8 E4M3) and of test/gpt2_reference.py and test/llama_reference.py (the numpy models it is
# checked with), and of scripts/import_hf.py (Hugging Face checkpoint -> llm.c model and tokenizer files).
# Included by the main Makefile, which defines DATA and the targets train_cpu, train_emu and
# test/build/compare_debug_state.
#   make test_export    trains a tiny GPT-2 for 5 steps and a tiny Llama for 40, exports them, compares logits
#                       with train_cpu's float32 ones and E4M3/BF16 bytes with fp8_scaling.h, and loads them
#                       with stock transformers where make clients_deps installed it (about 15 s, 45 s with
#                       transformers; needs numpy for $(PYTHON): make python_deps, or apt-get install
#                       python3-numpy; and $(CC) for a small program compiled against fp8_scaling.h)
#   make test_import    Hugging Face checkpoints of GPT-2, Llama 2 and Llama 3.1 that transformers writes, imported:
#                       train_cpu's float32 logits and loss equal transformers', the emulated CUDA trainer matches
#                       train_cpu, import then export is bit-exact, the tokenizer files give the text back, and
#                       the refusals (about 65 s of CPU time; needs make clients_deps, else one SKIPPED line)
# This fragment leaves the including Makefile's default goal as it was.
_export_test_saved_goal := $(.DEFAULT_GOAL)

PYTHON ?= python3
CC ?= gcc

.PHONY: test_export test_import
test_export: train_cpu python_deps test/test_export.sh scripts/export_hf.py scripts/hf_layout.py scripts/hf_tokenizer.py \
             test/gpt2_reference.py test/llama_reference.py test/export_checks.py core/fp8_scaling.h
	DATA="$(DATA)" PYTHON=$(PYTHON) CC="$(CC)" bash test/test_export.sh

test_import: train_cpu train_emu test/build/compare_debug_state python_deps test/test_import.sh test/import_checks.py \
             scripts/import_hf.py scripts/hf_layout.py scripts/hf_tokenizer.py scripts/export_hf.py
	DATA="$(DATA)" PYTHON=$(PYTHON) bash test/test_import.sh

.DEFAULT_GOAL := $(_export_test_saved_goal)
