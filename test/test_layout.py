"""test_layout.py: the tree's layering (make check and make test).

The root holds what a user runs (the Makefile, the two trainers, README.md) and folders. Every quoted
#include names a file of the tree, and none reaches up a layer: core/ (the shared headers, one per concern)
includes only core/; gpu/ (the CUDA kernels) and emu/ (the CPU emulation of CUDA) include core/ and their
own folder (one exception, EXCEPTIONS); the trainers include core/ and gpu/; test/ and dev/ may include anything. core/'s headers
include each other without a cycle, and every header of core/ and gpu/ opens with its contract: a comment
that names the file by its path.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_FILES = {".clang-format", ".gitignore", "Makefile", "README.md", "train_gpt.c", "train_gpt_fp8.cu"}
# what each folder's files may include (the root: the trainers)
MAY_INCLUDE = {"core": {"core"}, "gpu": {"core", "gpu"}, "emu": {"core", "emu"}, "": {"core", "gpu"}}
# the one include across the layers, and why
EXCEPTIONS = {("emu/cublaslt.cpp", "gpu/gelu.cuh"): "the emulated cuBLASLt's GELU epilogue is the trainer's GELU"}
SOURCES = (".h", ".c", ".cu", ".cuh", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

failures = []
files = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True, check=True).stdout.split()
files = [f for f in files if os.path.exists(os.path.join(ROOT, f))]  # tracked, not deleted in the work tree

extra = sorted(f for f in files if "/" not in f and f not in ROOT_FILES)
if extra:
    failures.append(f"the root holds {', '.join(extra)}: shared code belongs in core/, tools in scripts/ or dev/")

graph = {}  # core header -> the core headers it includes
for f in files:
    if not f.endswith(SOURCES):
        continue
    folder = f.split("/")[0] if "/" in f else ""
    text = open(os.path.join(ROOT, f), errors="replace").read()
    for name in INCLUDE.findall(text):
        # a quoted include: the including file's folder first, then the root (-I.); the emulation's own
        # CUDA headers (-Iemu) stand in for the toolkit's
        here = os.path.normpath(os.path.join(os.path.dirname(f), name))
        target = here if os.path.exists(os.path.join(ROOT, here)) else os.path.normpath(name)
        if not os.path.exists(os.path.join(ROOT, target)):
            if os.path.exists(os.path.join(ROOT, "emu", name)):
                continue
            failures.append(f'{f}: #include "{name}" names no file of the tree')
            continue
        to = target.split("/")[0] if "/" in target else ""
        if folder in MAY_INCLUDE and to not in MAY_INCLUDE[folder] and (f, target) not in EXCEPTIONS:
            failures.append(f'{f}: #include "{name}" reaches {to or "the root"}/, above {folder or "the trainers"}')
        if folder == "core" and to == "core":
            graph.setdefault(f, set()).add(target)
    if folder in ("core", "gpu") and f.endswith((".h", ".cuh")) and not text.startswith(f"// {f}:"):
        failures.append(f"{f}: does not open with its contract (a first line '// {f}: ...')")

# a cycle among core's headers: depth-first search for a back edge
state = {}
def visit(node, path):
    state[node] = "open"
    for nxt in sorted(graph.get(node, ())):
        if state.get(nxt) == "open":
            failures.append("core/ include cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
        elif nxt not in state:
            visit(nxt, path + [nxt])
    state[node] = "done"
for node in sorted(graph):
    if node not in state:
        visit(node, [node])

for line in failures:
    print("FAIL", line)
headers = sum(1 for f in files if f.startswith("core/") and f.endswith(".h"))
print(f"{'FAIL' if failures else 'PASS'} layout: {len(files)} files, {headers} core/ headers, "
      f"{sum(len(v) for v in graph.values())} includes inside core/, {len(failures)} problem(s)")
sys.exit(1 if failures else 0)
