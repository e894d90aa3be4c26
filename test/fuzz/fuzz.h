// test/fuzz/fuzz.h: what the fuzz harnesses of the readers share. Each harness is built two ways
// (test/fuzz/fuzz.mk):
//  - with libFuzzer (-DFUZZING): LLVMFuzzerTestOneInput receives input after input in one process, and a
//    reader's refusal (fail(), common.h) jumps back here instead of ending the process; what the refused
//    reader still held is then released, so libFuzzer's leak check judges every input, refused or read;
//  - replay (no FUZZING): main() runs the harness on one input file and exits, as a trainer would (a
//    refusal exits 1 with its error line), so that AddressSanitizer, UBSan and LeakSanitizer judge every
//    input of the corpus the way the trainers meet it.
// Inputs reach the readers as files: a memfd, named by its /proc/self/fd path, is rewritten per input.
#ifndef FUZZ_H
#define FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../core/common.h"

// if (!FUZZ_REFUSED()) { read... } fuzz_release_held();  the reading, to which a refusal returns with
// FUZZ_REFUSED() true; then whatever a refused reader still held is closed and freed.
#ifdef FUZZING
jmp_buf fuzz_refused;
#define FUZZ_REFUSED() (setjmp(fuzz_refused) != 0)

// What the checked helpers handed out and free/fclose have not yet taken back (common.h). A reader holds a
// few things at a time; more than FUZZ_MAX_HELD at once would be a leak on its success path.
#define FUZZ_MAX_HELD 256
static struct {
    void *resource;
    int is_file;
} fuzz_held[FUZZ_MAX_HELD];
static int fuzz_held_count;

void fuzz_hold(void *resource, int is_file) {
    if (fuzz_held_count == FUZZ_MAX_HELD) {
        fprintf(stderr, "fuzz harness: more than %d allocations and files held at once\n", FUZZ_MAX_HELD);
        abort();
    }
    fuzz_held[fuzz_held_count].resource = resource;
    fuzz_held[fuzz_held_count++].is_file = is_file;
}

void fuzz_forget(void *resource) {
    for (int i = fuzz_held_count - 1; i >= 0; i--)
        if (fuzz_held[i].resource == resource) {
            fuzz_held[i] = fuzz_held[--fuzz_held_count];
            return;
        }
}

static inline void fuzz_release_held(void) {
    while (fuzz_held_count > 0) {
        fuzz_held_count--;
        if (fuzz_held[fuzz_held_count].is_file)
            fclose((FILE *)fuzz_held[fuzz_held_count].resource);
        else
            free(fuzz_held[fuzz_held_count].resource);
    }
}
#else
#define FUZZ_REFUSED() 0
static inline void fuzz_release_held(void) {}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// The path of a file holding exactly data (a memfd rewritten per input).
static inline const char *fuzz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz_input", 0);
        if (fd < 0) fail("memfd_create failed");
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        fail("cannot write the fuzz input");
    return path;
}

#ifndef FUZZING
int main(int argc, char **argv) {
    if (argc != 2) fail("usage: %s INPUT_FILE", argv[0]);
    FILE *f = fopen_regular(argv[1]);
    int64_t size = file_size_check(f, argv[1]);
    uint8_t *data = (uint8_t *)malloc_check((size_t)size, "fuzz input");
    fread_check(data, 1, (size_t)size, f, argv[1]);
    fclose(f);
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return 0;
}
#endif

#endif // FUZZ_H
