// slow_fsync_shim.c: preloaded (LD_PRELOAD) into a trainer, every fsync takes SLOW_FSYNC_S seconds more, so
// that a checkpoint takes as long as a large model's does on a slow filesystem: the stops under the launchers
// must wait for it (test/test_preempt.sh).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

int fsync(int fd) {
    const char *seconds = getenv("SLOW_FSYNC_S");
    struct timespec left = {0, 0};
    if (seconds) {
        double s = atof(seconds);
        left.tv_sec = (time_t)s;
        left.tv_nsec = (long)((s - (double)left.tv_sec) * 1e9);
    }
    // the whole delay, whatever signal arrives meanwhile (nanosleep is not restarted by SA_RESTART)
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    int (*real_fsync)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real_fsync(fd);
}
