#!/usr/bin/env bash
# test_doc_links.sh: every relative link of README.md and docs/**/*.md resolves. A link [text](path#anchor) or
# ![alt](path) outside code names a file or folder of the tree (relative to the page), and its anchor, if any, a
# heading of the page it names (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens, -1 -2 for
# repeats). Backticked paths under core/ and docs/ (`core/cli.h`, `docs/emulation.md`) must exist too. No link,
# and no backticked page (`../x.md`), may leave the repository: a clone has nothing beside it.
# Links to http(s) and mailto are not followed. Needs python3 only; under a second.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
"$PY" - <<'EOF'
import glob, os, re, sys
pages = ["README.md"] + sorted(glob.glob("docs/**/*.md", recursive=True))
def prose(text):  # the page without fenced code blocks and code spans, and its code spans
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"\[[^\]]*\]\([a-z]+:[^)]*\)", "", text))  # not another repo's
    return re.sub(r"`[^`\n]+`", "", text), spans
def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for line in re.sub(r"^```.*?^```", "", open(path, encoding="utf-8").read(), flags=re.S | re.M).splitlines():
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "").replace("*", "")
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else "%s-%d" % (slug, n))
        cache[path] = found
    return cache[path]
broken, checked = [], 0
for page in pages:
    text, spans = prose(open(page, encoding="utf-8").read())
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        checked += 1
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if dest == ".." or dest.startswith("../"):  # a clone has only the tree
            broken.append("%s: %s: leaves the repository" % (page, target))
        elif not os.path.exists(dest):
            broken.append("%s: %s: no such file" % (page, target))
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            broken.append("%s: %s: no heading with that anchor in %s" % (page, target, dest))
    for span in spans:
        if re.match(r"(\.\./)+[\w./-]*\.md$", span):  # a page named outside the tree
            checked += 1
            broken.append("%s: `%s`: outside the repository" % (page, span))
        m = re.match(r"((?:core|docs)/[\w./-]*\w)", span)
        if m and "*" not in span:
            checked += 1
            if not os.path.exists(m.group(1)):
                broken.append("%s: `%s`: no such file" % (page, m.group(1)))
for line in broken:
    print("broken: " + line)
print("%d links in %d pages, %d broken" % (checked, len(pages), len(broken)))
sys.exit(1 if broken else 0)
EOF
result $? "every relative link of README.md and docs/ resolves"
finish
