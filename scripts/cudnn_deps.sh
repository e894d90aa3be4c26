#!/usr/bin/env bash
# cudnn_deps.sh [--headers-only] [DIR]: puts cuDNN (DIR/cudnn: include/cudnn*.h, lib/libcudnn*.so.9) and the
# header-only cudnn-frontend (DIR/cudnn_frontend/include) where the Makefile looks for them (DIR: build/),
# so that `make train` builds the fast attention (--attention fast, gpu/attention.cuh).
#   - a Python environment that has the nvidia-cudnn wheel (PyTorch's: the GPU machine's image) gives cuDNN,
#     linked, not copied; the nvidia-cudnn-frontend wheel, where installed, the frontend;
#   - what is still missing comes from PyPI (pip download, nothing installed into any environment):
#     nvidia-cudnn-cu13 (about 500 MB) and nvidia-cudnn-frontend, each at the version the code was checked
#     with (gpu/attention_cudnn.h's CUDNN_WHEEL_TESTED and CUDNN_FRONTEND_TESTED: the memory plan's
#     attention workspace is the frontend's formula of that version);
#   - --headers-only (CI, which has no GPU) keeps of the cuDNN wheel only its headers, libcudnn.so.9 (the
#     loader the trainer links against) and libcudnn_graph.so.9 (what answers the version and validates
#     graphs): enough to compile, link and validate the attention's graphs (make test_cudnn_graphs), not to
#     run them.
# Exits non-zero with one line when it cannot provide both.
set -euo pipefail
headers_only=0
if [ "${1:-}" = --headers-only ]; then
    headers_only=1
    shift
fi
dir=${1:-build}
py=${PYTHON:-python3}
tested() { # the version gpu/attention_cudnn.h names NAME
    sed -n "s/^#define $1 \"\(.*\)\"$/\1/p" "$(dirname "${BASH_SOURCE[0]}")/../gpu/attention_cudnn.h"
}
cudnn_version=$(tested CUDNN_WHEEL_TESTED)
frontend_version=$(tested CUDNN_FRONTEND_TESTED)
[ -n "$cudnn_version" ] && [ -n "$frontend_version" ] || { echo "cudnn_deps: gpu/attention_cudnn.h names no tested versions" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# The directory of an installed Python package whose files include REL ("" when none).
installed() {
    "$py" - "$1" "$2" <<'PY' 2>/dev/null || true
import importlib.util, os, sys
package, rel = sys.argv[1:]
try:
    spec = importlib.util.find_spec(package)
except (ImportError, ValueError):
    spec = None
for base in (list(spec.submodule_search_locations or []) if spec else []):
    if os.path.exists(os.path.join(base, rel)):
        print(base)
        break
PY
}

# Downloads the wheel PACKAGE into DIR/wheels (removed at the end; pip's own cache keeps it) and prints its
# path.
cache="$dir/wheels"
trap 'rm -rf "$cache"' EXIT
download() {
    mkdir -p "$cache"
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --dest "$cache" \
        "$1" >&2 || { echo "cudnn_deps: pip could not download $1 (no network?)" >&2; exit 1; }
    local name=${1%%==*}
    ls -t "$cache"/"${name//-/_}"-*.whl | head -n 1
}

# Extracts from the wheel WHEEL into DEST the members whose names start with one of the PREFIXes.
extract() {
    "$py" - "$@" <<'PY'
import os, sys, zipfile
wheel, dest, *prefixes = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    for member in archive.infolist():
        if member.filename.startswith(tuple(prefixes)):
            path = archive.extract(member, dest)
            if member.filename.endswith(".so.9"):
                os.chmod(path, 0o755)
PY
}

if [ ! -f "$dir/cudnn/include/cudnn.h" ]; then
    wheel_dir=$(installed nvidia.cudnn include/cudnn.h)
    if [ -n "$wheel_dir" ]; then
        ln -sfn "$wheel_dir" "$dir/cudnn"
        echo "cudnn_deps: cuDNN from $wheel_dir"
    else
        wheel=$(download "nvidia-cudnn-cu13==$cudnn_version")
        rm -rf "$dir/cudnn" "$dir/cudnn.tmp"
        if [ "$headers_only" = 1 ]; then
            extract "$wheel" "$dir/cudnn.tmp" nvidia/cudnn/include/ nvidia/cudnn/lib/libcudnn.so.9 \
                nvidia/cudnn/lib/libcudnn_graph.so.9
        else
            extract "$wheel" "$dir/cudnn.tmp" nvidia/cudnn/
        fi
        mv "$dir/cudnn.tmp/nvidia/cudnn" "$dir/cudnn"
        rm -rf "$dir/cudnn.tmp"
        echo "cudnn_deps: cuDNN from $(basename "$wheel")$([ "$headers_only" = 1 ] && echo ' (headers, loader and graph library only)')"
    fi
fi

if [ ! -f "$dir/cudnn_frontend/include/cudnn_frontend.h" ]; then
    wheel=$(download "nvidia-cudnn-frontend==$frontend_version")
    rm -rf "$dir/cudnn_frontend" "$dir/cudnn_frontend.tmp"
    extract "$wheel" "$dir/cudnn_frontend.tmp" include/
    [ -f "$dir/cudnn_frontend.tmp/include/cudnn_frontend.h" ] || {
        echo "cudnn_deps: $(basename "$wheel") has no include/cudnn_frontend.h" >&2
        exit 1
    }
    mkdir -p "$dir/cudnn_frontend"
    mv "$dir/cudnn_frontend.tmp/include" "$dir/cudnn_frontend/include"
    rm -rf "$dir/cudnn_frontend.tmp"
    echo "cudnn_deps: cudnn-frontend from $(basename "$wheel")"
fi
have=$(sed -n 's/^#define CUDNN_FRONTEND_\(MAJOR\|MINOR\|PATCH\)_VERSION \([0-9]*\)$/\2/p' \
    "$dir/cudnn_frontend/include/cudnn_frontend_version.h" 2>/dev/null | paste -sd.)
[ "$have" = "$frontend_version" ] || echo "cudnn_deps: note: $dir/cudnn_frontend is cudnn-frontend ${have:-of an unknown version}, not $frontend_version, whose attention workspace the memory plan computes (remove it and run this again to fetch $frontend_version)"
echo "cudnn_deps: CUDNN_HOME=$dir/cudnn CUDNN_FRONTEND_HOME=$dir/cudnn_frontend"
