# c_tests.mk: the C unit tests, test/test_NAME.c, each registered by its NAME in one list below. For each,
#   make test_NAME    builds test/build/test_NAME (BASE_CFLAGS, -O2) and runs it, once
#                     per word of test_NAME_ARGS where that is set (the tests of both architectures), else once
# `make check` runs the quick list, `make test` both; each test's opening comment says what it checks. The
# header dependencies are the compiler's (-MMD: test/build/test_NAME.d).
# Included by the main Makefile (CC, BASE_CFLAGS, LDLIBS) before the fragments that use C_TESTS. This fragment
# leaves the including Makefile's default goal as it was.
_c_tests_saved_goal := $(.DEFAULT_GOAL)

C_TESTS_QUICK := cli gradcheck fp8_stats memory_plan
C_TESTS := $(C_TESTS_QUICK) recipe_grads
test_gradcheck_ARGS := gpt2 llama
test_recipe_grads_ARGS := gpt2 llama

$(C_TESTS:%=test/build/test_%): test/build/test_%: test/test_%.c
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -O2 -MMD -MP -o $@ $< $(LDLIBS)

-include $(C_TESTS:%=test/build/test_%.d)

.PHONY: $(C_TESTS:%=test_%)
$(C_TESTS:%=test_%): test_%: test/build/test_%
	$(if $($@_ARGS),for a in $($@_ARGS); do ./$< $$a || exit 1; done,./$<)

test_cpu: $(C_TESTS:%=test_%)

.DEFAULT_GOAL := $(_c_tests_saved_goal)
