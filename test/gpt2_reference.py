#!/usr/bin/env python3
"""A small numpy GPT-2 for checking exports (scripts/export_hf.py) against the trainers.

    import gpt2_reference as ref
    cfg, w = ref.load_export("out/hf")          # config.json + model.safetensors, F8_E4M3 dequantized
    cfg, w = ref.load_llmc("out/model.bin")      # an llm.c model file (version 3 or 5), as float32
    slices = ref.gemm_weight_slices("out/model.bin")   # where each block GEMM weight lies in the file
    logits = ref.forward(cfg, w, tokens)         # tokens (B,T) int -> logits (B,T,V) float32

Both loaders return the weights in Hugging Face GPT-2 naming and layout (Conv1D weights (in, out)), so
forward() runs either. The model: token + position embedding; per block x += attn(ln_1(x)),
x += mlp(ln_2(x)) with LayerNorm eps 1e-5, causal softmax attention scaled by 1/sqrt(head size), the tanh
GELU ("gelu_new"); ln_f; logits = x @ wte^T (the tied LM head).

Everything here is written independently of scripts/export_hf.py (its own safetensors parser, its own
file reader, table-based BF16/E4M3 rounding), so that the test compares two implementations.

    python3 test/gpt2_reference.py DIR_OR_MODEL.bin [token ...]   prints the logits' shape and argmax

Needs numpy.
"""
import json
import os
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------------------------------
# safetensors

ST_DTYPES = {"F32": (np.dtype("<f4"), 4), "F64": (np.dtype("<f8"), 8), "BF16": (np.dtype("<u2"), 2),
             "F16": (np.dtype("<f2"), 2), "F8_E4M3": (np.dtype("u1"), 1), "I32": (np.dtype("<i4"), 4),
             "I64": (np.dtype("<i8"), 8), "U8": (np.dtype("u1"), 1)}


def read_safetensors(path):
    """(tensors {name: (dtype string, shape tuple, raw numpy array of the stored elements)}, metadata).
    Checks the layout rules of the format: header JSON, offsets within and exactly covering the buffer,
    no gaps or overlaps, byte counts matching shapes."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for safetensors")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: header length {n} past the end of the file")
    text = data[8:8 + n]
    if not text.startswith(b"{"):
        raise ValueError(f"{path}: header does not start with '{{'")
    header = json.loads(text.decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    buf = memoryview(data)[8 + n:]
    spans, tensors = [], {}
    for name, info in header.items():
        dtype, shape, (start, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        if dtype not in ST_DTYPES:
            raise ValueError(f"{path}: {name}: dtype {dtype} not handled here")
        np_dtype, size = ST_DTYPES[dtype]
        count = int(np.prod(shape, dtype=np.int64))
        if end - start != count * size or start < 0 or end > len(buf):
            raise ValueError(f"{path}: {name}: offsets {start}..{end} do not fit shape {shape} {dtype}")
        tensors[name] = (dtype, shape, np.frombuffer(buf[start:end], dtype=np_dtype).reshape(shape))
        spans.append((start, end))
    position = 0
    for start, end in sorted(spans):
        if start != position:
            raise ValueError(f"{path}: data has a gap or an overlap at byte {position}")
        position = end
    if position != len(buf):
        raise ValueError(f"{path}: {len(buf) - position} bytes after the last tensor")
    return tensors, metadata


# ---------------------------------------------------------------------------------------------------------
# Number formats, done by value (float64 arithmetic and tables), not by bit tricks


def bf16_decode(codes):
    return (np.asarray(codes, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def e4m3_values():
    """float64 value of every E4M3 code 0..255 (NaN for 0x7F, 0xFF): sign, 4-bit exponent (bias 7), 3 bits."""
    out = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 7
        if code & 0x7F == 0x7F:
            out[code] = np.nan
        elif e == 0:
            out[code] = sign * m / 8.0 * 2.0**-6
        else:
            out[code] = sign * (1.0 + m / 8.0) * 2.0**(e - 7)
    return out


E4M3_VALUES = e4m3_values()


def e4m3_decode(codes):
    return E4M3_VALUES[np.asarray(codes, dtype=np.uint8)].astype(np.float32)


def nearest_even(x, grid_values, grid_codes):
    """Codes of the grid values nearest to x >= 0 (float64), ties to the even code; grid ascending."""
    hi = np.clip(np.searchsorted(grid_values, x), 1, len(grid_values) - 1)
    lo = hi - 1
    d_lo, d_hi = x - grid_values[lo], grid_values[hi] - x
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (grid_codes[hi] % 2 == 0))
    return np.where(take_hi, grid_codes[hi], grid_codes[lo])


def e4m3_round_codes(y):
    """E4M3 codes of float32 y: nearest of the finite values, ties to even, saturating at 448, NaN -> 0x7F."""
    y = np.asarray(y, dtype=np.float32)
    with np.errstate(invalid="ignore"):  # signalling NaN inputs
        mag = np.abs(y.astype(np.float64))
    grid_codes = np.arange(0x7F)  # 0x00..0x7E: the non-negative finite values, ascending
    grid = E4M3_VALUES[:0x7F]
    code = nearest_even(np.minimum(mag, 448.0), grid, grid_codes)
    code = code | np.where(np.signbit(y), 0x80, 0)
    return np.where(np.isnan(y), 0x7F, code).astype(np.uint8)


def bf16_round_codes(x):
    """BF16 codes of float32 x, round to nearest even, by value: the two neighbouring BF16 values of each
    element (its top 16 bits, and one step away from zero) and the nearer one, ties to the even code."""
    x = np.asarray(x, dtype=np.float32)
    lo = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation toward zero
    hi = lo + np.uint16(1)
    with np.errstate(invalid="ignore"):  # NaNs (signalling ones warn in the casts) are handled last
        v, vlo, vhi = (np.abs(a.astype(np.float64)) for a in (x, bf16_decode(lo), bf16_decode(hi)))
        vhi[np.isinf(vhi)] = 2.0**128  # past the largest bf16, IEEE rounds as if the next step were 2^128
        take_hi = (vhi - v < v - vlo) | ((vhi - v == v - vlo) & (hi % 2 == 0))
    out = np.where(take_hi & np.isfinite(x), hi, lo)
    return np.where(np.isnan(x), np.uint16(0x7FFF), out).astype(np.uint16)


def bf16_round(x):
    return bf16_decode(bf16_round_codes(x))


def e4m3_weight_quantize(w, margin=0):
    """The trainer's FP8 weight cast, by value: amax = max|w|, s = float32(448 / amax) * 2^-margin (float32),
    codes = e4m3(float32(w * s)). Returns (codes, s). For finite, not all-zero weights (what training makes)."""
    w = np.asarray(w, dtype=np.float32)
    amax = np.float32(np.max(np.abs(w)))
    if not (np.isfinite(amax) and amax > 0):
        raise ValueError("e4m3_weight_quantize: needs finite weights, not all zero")
    s = np.float32(np.float32(448.0) / amax) * np.float32(2.0**-margin)
    y = w * s
    codes = e4m3_round_codes(y)
    tiny = np.abs(w) < np.finfo(np.float32).tiny  # a float32 subnormal weight counts as a signed zero
    codes[tiny] = np.where(np.signbit(w[tiny]), 0x80, 0)
    return codes, np.float32(s)


# ---------------------------------------------------------------------------------------------------------
# Loading

# block tensors: (HF suffix, llm.c tensor, transposed to Conv1D)
BLOCK = [("ln_1.weight", "ln1w", False), ("ln_1.bias", "ln1b", False),
         ("attn.c_attn.weight", "qkvw", True), ("attn.c_attn.bias", "qkvb", False),
         ("attn.c_proj.weight", "attprojw", True), ("attn.c_proj.bias", "attprojb", False),
         ("ln_2.weight", "ln2w", False), ("ln_2.bias", "ln2b", False),
         ("mlp.c_fc.weight", "fcw", True), ("mlp.c_fc.bias", "fcb", False),
         ("mlp.c_proj.weight", "fcprojw", True), ("mlp.c_proj.bias", "fcprojb", False)]
MATMULS = [name for name, _, t in BLOCK if t]


def load_export(directory):
    """(cfg, weights) of an export directory; F8_E4M3 tensors come back as float32(e4m3) * NAME_scale_inv
    (float32). cfg: n_layer, n_head, n_embd, vocab_size, n_positions, layer_norm_epsilon."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    tensors, _ = read_safetensors(os.path.join(directory, "model.safetensors"))
    w = {}
    for name, (dtype, shape, raw) in tensors.items():
        if name.endswith("_scale_inv"):
            continue
        if dtype == "BF16":
            w[name] = bf16_decode(raw)
        elif dtype == "F32":
            w[name] = raw.astype(np.float32)
        elif dtype == "F8_E4M3":
            sdtype, sshape, sraw = tensors[name + "_scale_inv"]
            if sdtype != "F32" or sshape != ():
                raise ValueError(f"{name}_scale_inv: expected an F32 scalar, got {sdtype} {sshape}")
            w[name] = e4m3_decode(raw) * np.float32(sraw[()])
        else:
            raise ValueError(f"{name}: unexpected dtype {dtype}")
    return cfg, w


def llmc_layout(h):
    """[(name, shape)] of a GPT-2 llm.c file's tensors in file order, from its header ints h."""
    maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
    return [("wte", (Vp, C)), ("wpe", (maxT, C))] + [(n, (L,) + k) for n, k in [
        ("ln1w", (C,)), ("ln1b", (C,)), ("qkvw", (3 * C, C)), ("qkvb", (3 * C,)), ("attprojw", (C, C)),
        ("attprojb", (C,)), ("ln2w", (C,)), ("ln2b", (C,)), ("fcw", (4 * C, C)), ("fcb", (4 * C,)),
        ("fcprojw", (C, 4 * C)), ("fcprojb", (C,))]] + [("lnfw", (C,)), ("lnfb", (C,))]


def slices_of(layout, L, names):
    """(offset, count) in a file's values of every layer's slice of the tensors `names` of layout."""
    out, at = [], 0
    for name, shape in layout:
        n = int(np.prod(shape))
        if name in names:
            out += [(at + l * (n // L), n // L) for l in range(L)]
        at += n
    return out


def gemm_weight_slices(path):
    """(offset, count) in the file's values (after its 1024-byte header) of each block GEMM's weight, per layer."""
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
    return slices_of(llmc_layout(h), h[4], ["qkvw", "attprojw", "fcw", "fcprojw"])


def load_llmc(path):
    """(cfg, weights) of an llm.c model file (version 3 fp32 or 5 bf16), in the export's naming and layout,
    float32, plus cfg['padded_vocab_size'] and the full padded wte as weights['llmc.wte_padded']."""
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack("<256i", data[:1024])
    if h[0] != 20240326 or h[1] not in (3, 5):
        raise ValueError(f"{path}: not an llm.c model file")
    maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
    sizes = [(name, int(np.prod(shape))) for name, shape in llmc_layout(h)]
    total = sum(n for _, n in sizes)
    if h[1] == 3:
        flat = np.frombuffer(data, dtype="<f4", offset=1024).astype(np.float32)
    else:
        flat = bf16_decode(np.frombuffer(data, dtype="<u2", offset=1024))
    if flat.size != total:
        raise ValueError(f"{path}: {flat.size} values, header says {total}")
    p, at = {}, 0
    for name, n in sizes:
        p[name] = flat[at:at + n]
        at += n
    w = {"llmc.wte_padded": p["wte"].reshape(Vp, C), "transformer.wte.weight": p["wte"].reshape(Vp, C)[:V],
         "transformer.wpe.weight": p["wpe"].reshape(maxT, C),
         "transformer.ln_f.weight": p["lnfw"], "transformer.ln_f.bias": p["lnfb"]}
    for hf, ours, transposed in BLOCK:
        per_layer = p[ours].reshape(L, -1)
        for l in range(L):
            t = per_layer[l]
            if transposed:
                rows = {"qkvw": 3 * C, "attprojw": C, "fcw": 4 * C, "fcprojw": C}[ours]
                t = np.ascontiguousarray(t.reshape(rows, -1).T)  # (out, in) -> Conv1D (in, out)
            w[f"transformer.h.{l}.{hf}"] = t
    cfg = {"n_layer": L, "n_head": NH, "n_embd": C, "vocab_size": V, "n_positions": maxT,
           "layer_norm_epsilon": 1e-5, "padded_vocab_size": Vp}
    return cfg, w


# ---------------------------------------------------------------------------------------------------------
# Forward


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi).astype(x.dtype) * (x + 0.044715 * x * x * x)))


def forward(cfg, w, tokens, dtype=np.float32):
    """Logits (B,T,V) of tokens (B,T); computed in `dtype` (float32, or float64 for a tighter reference)."""
    tokens = np.asarray(tokens)
    B, T = tokens.shape
    L, NH, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    eps = dtype(cfg.get("layer_norm_epsilon", 1e-5))
    hs = C // NH
    g = {k: np.asarray(v, dtype=dtype) for k, v in w.items()}
    x = g["transformer.wte.weight"][tokens] + g["transformer.wpe.weight"][:T][None]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for l in range(L):
        p = f"transformer.h.{l}."
        h = layer_norm(x, g[p + "ln_1.weight"], g[p + "ln_1.bias"], eps)
        qkv = h @ g[p + "attn.c_attn.weight"] + g[p + "attn.c_attn.bias"]  # (B,T,3C)
        q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, NH, hs).transpose(0, 2, 1, 3) for i in range(3))
        att = (q @ k.transpose(0, 1, 3, 2)) * dtype(1.0 / np.sqrt(hs))
        att = np.where(mask, -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att = att / att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + (y @ g[p + "attn.c_proj.weight"] + g[p + "attn.c_proj.bias"])
        h = layer_norm(x, g[p + "ln_2.weight"], g[p + "ln_2.bias"], eps)
        h = gelu_tanh(h @ g[p + "mlp.c_fc.weight"] + g[p + "mlp.c_fc.bias"])
        x = x + (h @ g[p + "mlp.c_proj.weight"] + g[p + "mlp.c_proj.bias"])
    x = layer_norm(x, g["transformer.ln_f.weight"], g["transformer.ln_f.bias"], eps)
    return (x @ g["transformer.wte.weight"].T).astype(np.float32)


def main(usage, load_export, load_llmc, forward):
    """The command line of a reference: DIR_OR_MODEL.bin [token ...] -> the logits' shape and argmax."""
    if len(sys.argv) < 2:
        print(usage, file=sys.stderr)
        sys.exit(2)
    src = sys.argv[1]
    cfg, w = load_export(src) if os.path.isdir(src) else load_llmc(src)
    tokens = np.array([[int(t) for t in sys.argv[2:]] or [0]])
    logits = forward(cfg, w, tokens)
    print(f"logits {logits.shape}, argmax per position {logits[0].argmax(-1).tolist()}")


if __name__ == "__main__":
    main(__doc__.split("\n\n")[2], load_export, load_llmc, forward)
