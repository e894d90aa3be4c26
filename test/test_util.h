// test/test_util.h: the pass/fail bookkeeping of the C unit tests. expect() counts a check and prints a
// failed one; test_summary() prints the closing "N passed, M failed" line and gives the exit status.
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <stdarg.h>
#include <stdio.h>

static int passed, failed;

__attribute__((format(printf, 2, 3))) static inline void expect(int ok, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

// A check whose failure message is fixed text.
static inline void check(int ok, const char *what) {
    expect(ok, "%s", what);
}

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif // TEST_UTIL_H
