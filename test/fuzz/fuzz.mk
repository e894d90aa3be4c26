# fuzz.mk: coverage-guided fuzzing of every reader (test/fuzz/fuzz_*.c: token shard, model file, state file,
# tokenizer, command line, eval file) with clang's libFuzzer under AddressSanitizer and UBSan, then a replay of the
# whole corpus through the same harnesses built without libFuzzer, where LeakSanitizer also checks.
#   make test_fuzz                 a few seconds per reader from a fresh seed corpus (in make test)
#   make fuzz FUZZ_SECONDS=3600    longer runs; the corpus grows in build/fuzz/corpus/ across runs
# Needs clang with its libFuzzer runtime (Debian: clang libclang-rt-14-dev); skipped with a line otherwise.
# Included by the main Makefile (HEADERS, DATA). This fragment leaves the default goal as it was.
_fuzz_saved_goal := $(.DEFAULT_GOAL)

FUZZ_CC ?= clang
FUZZ_TARGETS := shard model state tokenizer cli eval
# -Wno-unknown-pragmas: the shared headers' OpenMP loops, compiled here without OpenMP
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined \
              -fno-omit-frame-pointer $(WARN) -Wno-unknown-pragmas -I.
HAVE_LIBFUZZER := $(shell echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d[0] && n; }' | \
    $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null 2>/dev/null && echo 1)
FUZZ_SECONDS ?= 8

test/build/fuzz/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/fuzz.h $(HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZING -fsanitize=fuzzer -o $@ $< -lm

test/build/fuzz/replay_%: test/fuzz/fuzz_%.c test/fuzz/fuzz.h $(HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< -lm

FUZZ_PROGRAMS := $(FUZZ_TARGETS:%=test/build/fuzz/fuzz_%) $(FUZZ_TARGETS:%=test/build/fuzz/replay_%)

.PHONY: test_fuzz fuzz
ifeq ($(HAVE_LIBFUZZER),1)
test_fuzz: train_cpu $(FUZZ_PROGRAMS)
	DATA="$(DATA)" PYTHON=$(PYTHON) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_CORPUS= bash test/test_fuzz.sh

fuzz: train_cpu $(FUZZ_PROGRAMS)
	DATA="$(DATA)" PYTHON=$(PYTHON) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_CORPUS=build/fuzz/corpus bash test/test_fuzz.sh
else
test_fuzz fuzz:
	@echo "SKIPPED test_fuzz: $(FUZZ_CC) with libFuzzer not found (apt-get install clang libclang-rt-14-dev)"
endif

test_cpu: test_fuzz

.DEFAULT_GOAL := $(_fuzz_saved_goal)
