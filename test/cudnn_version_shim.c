// cudnn_version_shim.c: preloaded (LD_PRELOAD) into test_cudnn_graphs, cudnnGetVersion answers
// CUDNN_SHIM_VERSION, an older cuDNN's number (major * 10000 + minor * 100 + patch), so that cudnn-frontend's
// version-gated support rules, which it reads from there, can be checked without that library.
#include <stddef.h>
#include <stdlib.h>

size_t cudnnGetVersion(void) {
    const char *version = getenv("CUDNN_SHIM_VERSION");
    return version ? (size_t)strtoull(version, NULL, 10) : 0;
}
