#!/usr/bin/env bash
# python_deps.sh DIR: makes numpy and matplotlib importable by ${PYTHON:-python3} with DIR on PYTHONPATH
# (make does this for the tests: `make python_deps`). They serve the numpy reference GPT-2 and the run
# comparisons of the tests, export_hf.py, and compare.sh's plot.
#   - the interpreter has them already: nothing is installed;
#   - else pip installs them into DIR, for this project only: no system or user site-packages is touched
#     (pip's --target also leaves Debian's externally managed python3 alone);
#   - without pip or a network it says what to install and exits 0: the tests that need a module then
#     print a SKIPPED line.
# DIR/.ready records that DIR is complete, so that make does not run pip again.
set -uo pipefail
dir=${1:?usage: python_deps.sh DIR}
py=${PYTHON:-python3}
mkdir -p "$dir"
if PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" "$py" -c 'import numpy, matplotlib' 2>/dev/null; then
    touch "$dir/.ready"
    exit 0
fi
echo "python_deps: installing numpy and matplotlib into $dir for $py ($(command -v "$py"))"
if ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "python_deps: $py has no pip (Debian: apt-get install python3-pip, or python3-numpy python3-matplotlib):" \
        "the tests that need numpy or matplotlib will be skipped"
    exit 0
fi
if ! "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --timeout 20 --retries 1 --target "$dir" \
    numpy matplotlib; then
    echo "python_deps: pip could not install numpy and matplotlib (no network?):" \
        "the tests that need them will be skipped"
    exit 0
fi
touch "$dir/.ready"
