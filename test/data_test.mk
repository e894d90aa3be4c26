# data_test.mk: tests of the data side (dataloader.h, tokenizer.h, scripts/prepare_data.py).
# Included by the main Makefile; also usable alone from the repository root:
#   make -f test/data_test.mk test_dataloader test_prepare_data test_dataloader_asan
#   make test_prepare_corpus    a corpus directory of .jsonl, .jsonl.gz, .parquet and .txt with a tokenizer.json:
#                               exact tokens, 1 and 2 workers alike, resume, bad inputs (about 30 s of CPU; one
#                               SKIPPED line without what make clients_deps installs: tokenizers, pyarrow,
#                               transformers, sentencepiece, protobuf)
# This fragment leaves the including Makefile's default goal as it was.
_data_test_saved_goal := $(.DEFAULT_GOAL)

CC ?= gcc
PYTHON ?= python3
TEST_CFLAGS ?= -std=c11 -O1 -g -Wall -Wextra -Werror -I.
TEST_SANITIZE_FLAGS ?= -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

test/build/test_dataloader: test/test_dataloader.c core/dataloader.h core/tokenizer.h core/common.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $< -o $@

# the same test under AddressSanitizer and UndefinedBehaviorSanitizer
test/build/test_dataloader_asan: test/test_dataloader.c core/dataloader.h core/tokenizer.h core/common.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_SANITIZE_FLAGS) $< -o $@

.PHONY: test_dataloader test_dataloader_asan test_prepare_data test_prepare_corpus
test_dataloader: test/build/test_dataloader
	./test/build/test_dataloader

test_dataloader_asan: test/build/test_dataloader_asan
	./test/build/test_dataloader_asan

test_prepare_data: test/test_prepare_data.sh test/shard_files.py scripts/prepare_data.py scripts/hf_tokenizer.py
	PYTHON=$(PYTHON) CC=$(CC) bash test/test_prepare_data.sh

test_prepare_corpus: test/test_prepare_corpus.sh test/corpus_checks.py test/shard_files.py \
                     scripts/prepare_data.py scripts/hf_tokenizer.py
	PYTHON=$(PYTHON) CC=$(CC) bash test/test_prepare_corpus.sh

.DEFAULT_GOAL := $(_data_test_saved_goal)
