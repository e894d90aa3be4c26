"""A checkpoint's manifest made to match its files after a test edits them by hand.

The digests are docs/formats.md's (core/manifest.h computes them; written here again from that page, so a
test can build a checkpoint whose files were changed on purpose and whose manifest still agrees: the checks
behind the digests, for a checkpoint a build with a bug or a hand could write).

    python3 test/checkpoint_manifest.py DIR STEP    rewrites DIR/manifest_<STEP>.txt and the state files'
                                                    record of their model file's digest
"""
import os
import struct
import sys

MASK, FNV_START, FNV_PRIME, CHUNK = (1 << 64) - 1, 0xCBF29CE484222325, 0x100000001B3, 64 << 20


def fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def fnv1a_words(h, data):
    n = len(data) // 8 * 8
    for (w,) in struct.iter_unpack("<Q", data[:n]):
        h = ((h ^ w) * FNV_PRIME) & MASK
        h ^= h >> 32
    return fnv1a(h, data[n:])


def file_digest(path):
    """(size, digest): the sum mod 2^64 of each 64 MiB chunk's FNV hash, seeded with the size and the chunk's index."""
    data = open(path, "rb").read()
    total = 0
    for c in range(0, len(data), CHUNK):
        seed = fnv1a(fnv1a(FNV_START, struct.pack("<q", len(data))), struct.pack("<q", c // CHUNK))
        total = (total + fnv1a_words(seed, data[c:c + CHUNK])) & MASK
    return len(data), total


def remanifest(directory, step):
    """Rewrites manifest_<step>.txt from the files as they are, and each state file's header slot that holds
    its model file's digest (SH_MODEL_DIGEST, found by its old value among the header's first 64 int64s)."""
    name = os.path.join(directory, "manifest_%08d.txt" % step)
    words = [line.split() for line in open(name).read().splitlines()]
    model_path = os.path.join(directory, "model_%08d.bin" % step)
    new_model_digest = None
    if os.path.isfile(model_path):
        size, new_model_digest = file_digest(model_path)
        old = struct.pack("<Q", int(words[0][-1], 16))
        words[0][-2:] = [str(size), "%016x" % new_model_digest]
    for w in words[1:]:
        if w[0] != "state":
            continue
        state_path = os.path.join(directory, "state_%08d_%05d.bin" % (step, int(w[1])))
        if not os.path.isfile(state_path):
            continue
        if new_model_digest is not None:
            h = bytearray(open(state_path, "rb").read())
            slot = next((i for i in range(0, min(512, len(h)), 8) if h[i:i + 8] == old), None)
            if slot is not None:
                h[slot:slot + 8] = struct.pack("<Q", new_model_digest)
                open(state_path, "wb").write(h)
        size, digest = file_digest(state_path)
        w[-2:] = [str(size), "%016x" % digest]
    open(name, "w").write("\n".join(" ".join(w) for w in words) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: checkpoint_manifest.py DIR STEP")
    remanifest(sys.argv[1], int(sys.argv[2]))
