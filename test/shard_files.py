"""Readers of the files scripts/prepare_data.py writes, and its shard sizes restated from its docstring, for
the checks of test_prepare_data.sh and test_prepare_corpus.sh (written from the formats, not from the script)."""

import struct

FORMATS = {"uint16": (20240520, 1, 2, "H"), "uint32": (20240801, 7, 4, "I")}  # magic, version, width


def read_shard(path, fmt="uint16"):
    """The tokens of a shard, checked to be of the format expected."""
    magic, version, width, code = FORMATS[fmt]
    raw = open(path, "rb").read()
    assert len(raw) >= 1024, f"{path}: short header"
    header = struct.unpack("<3i", raw[:12])
    assert header[:2] == (magic, version), f"{path}: header {header[:2]}, expected {fmt}'s ({magic}, {version})"
    n = header[2]
    assert len(raw) == 1024 + width * n, f"{path}: size {len(raw)} != 1024 + {width}*{n}"
    return list(struct.unpack(f"<{n}{code}", raw[1024:]))


def read_tokenizer(path):
    """(eot, the bytes of each token) of a tokenizer file."""
    raw = open(path, "rb").read()
    magic, version, V, eot = struct.unpack("<4I", raw[:16])
    assert (magic, version) == (20240328, 2), f"{path}: tokenizer header {magic} {version}"
    body, i, vocab = raw[1024:], 0, []
    while i < len(body):
        vocab.append(body[i + 1:i + 1 + body[i]])
        i += 1 + body[i]
    assert len(vocab) == V, f"{path}: {len(vocab)} tokens, the header says {V}"
    return eot, vocab


def evenly(n, most):
    """ceil(n / most) sizes, nearly equal, summing to n."""
    pieces = max(1, -(-n // most))
    return [n * (k + 1) // pieces - n * k // pieces for k in range(pieces)]


def expected_sizes(n, shard_tokens, val_fraction=None, val_tokens=None):
    """{"val": sizes, "train": sizes} of a stream of n tokens: validation is the first val_tokens, or
    val_fraction of the first min(n, shard_tokens); it is cut evenly into shards of at most shard_tokens;
    train shards hold shard_tokens each but the last two, which share the remainder."""
    n_val = val_tokens if val_tokens is not None else int(val_fraction * min(n, shard_tokens))
    full, rest = divmod(n - n_val, shard_tokens)
    if full and rest:
        train = [shard_tokens] * (full - 1) + [(shard_tokens + rest) // 2, shard_tokens + rest - (shard_tokens + rest) // 2]
    else:
        train = [shard_tokens] * full + ([rest] if rest else [])
    return {"val": evenly(n_val, shard_tokens), "train": train}
