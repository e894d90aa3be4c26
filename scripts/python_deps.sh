#!/usr/bin/env bash
# python_deps.sh DIR [clients]: makes Python modules importable by ${PYTHON:-python3} with DIR on PYTHONPATH (make
# does this for the tests: `make python_deps`, `make clients_deps`).
#   - without `clients`: numpy and matplotlib, for the numpy reference models and the run comparisons of the
#     tests, export_hf.py, and compare.sh's plot;
#   - with `clients`: those and the real clients the tests check against, torch, transformers and accelerate
#     (test_export's transformers checks), torchao (the PyTorch peer's float8 run; test_torch_peer), and the
#     readers and tokenizers of users' checkpoints and corpora: safetensors, tokenizers, sentencepiece,
#     tiktoken and pyarrow, and protobuf, with which transformers converts a sentencepiece tokenizer.model to
#     tokenizer.json (test_import's and test_prepare_corpus's Llama 2 tokenizers). torch's PyPI wheel brings its
#     CUDA libraries and runs on the CPU: about 2 minutes and 5.7 GB.
# The interpreter has them already: nothing is installed. Else pip installs them into DIR, for this project only:
# no system or user site-packages is touched (pip's --target also leaves Debian's externally managed python3
# alone). Without pip or a network the first set says what to install and exits 0 (the tests that need a module
# then print a SKIPPED line); the clients, asked for by name, exit 1.
# DIR/.ready (DIR/.clients_ready) records that DIR is complete, so that make does not run pip again.
set -uo pipefail
dir=${1:?usage: python_deps.sh DIR [clients]}
py=${PYTHON:-python3}
modules=(numpy matplotlib)
marker=.ready
missing_status=0
if [ "${2:-}" = clients ]; then
    modules+=(torch transformers accelerate torchao safetensors tokenizers sentencepiece tiktoken pyarrow protobuf)
    marker=.clients_ready
    missing_status=1
fi
mkdir -p "$dir"
importable() { # PACKAGE...: all of them import with DIR on PYTHONPATH (protobuf's module is google.protobuf)
    local names=("${@/#protobuf/google.protobuf}")
    PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" "$py" -c "import $(IFS=,; echo "${names[*]}")" 2>/dev/null
}
missing=()
for module in "${modules[@]}"; do importable "$module" || missing+=("$module"); done
if [ ${#missing[@]} = 0 ]; then
    touch "$dir/$marker"
    exit 0
fi
echo "python_deps: installing ${missing[*]} into $dir for $py ($(command -v "$py"))"
if ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "python_deps: $py has no pip (Debian: apt-get install python3-pip):" \
        "the tests that need ${missing[*]} will be skipped"
    exit $missing_status
fi
# --upgrade: what a package brings that DIR holds already (numpy, for transformers) replaces it rather than
# leaving pip to warn about every such folder; --no-warn-conflicts: the interpreter's own packages are not ours
start=$SECONDS
if ! "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-warn-conflicts \
    --timeout 20 --retries 1 --upgrade --target "$dir" "${missing[@]}" || ! importable "${modules[@]}"; then
    echo "python_deps: pip could not install ${missing[*]} (no network?): the tests that need them will be skipped"
    exit $missing_status
fi
echo "python_deps: installed in $((SECONDS - start)) s; $dir holds $(du -sh "$dir" | cut -f1)"
touch "$dir/$marker"
