#!/usr/bin/env python3
"""A small numpy Llama, computing as transformers' LlamaForCausalLM does, for checking Llama exports
(scripts/export_hf.py) against the trainer.

    import llama_reference as ref
    cfg, w = ref.load_export("out/hf")          # config.json + model.safetensors, F8_E4M3 dequantized
    cfg, w = ref.load_llmc("out/model.bin")      # an llm.c Llama file (version 3 or 5), in HF's layout
    slices = ref.gemm_weight_slices("out/model.bin")   # where each GEMM weight lies in the file
    logits = ref.forward(cfg, w, tokens)         # tokens (B,T) int -> logits (B,T,V) float32

The model, with transformers' names: x = embed_tokens[tokens]; per layer
    h = input_layernorm(x)                RMSNorm: x / sqrt(mean(x^2) + rms_norm_eps) * weight
    q, k, v = q_proj(h), k_proj(h), v_proj(h)   NH query heads, KVH key and value heads, of hs = C/NH
    q, k = rope(q), rope(k)               x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[hs/2:], x[:hs/2]):
                                          the pair (x[i], x[i + hs/2]) at position t turns by t * theta^(-2i/hs)
                                          (rope_scaling of rope_type "llama3": that frequency rescaled by
                                          wavelength, as transformers' _compute_llama3_parameters does)
    k, v = repeat_kv(k), repeat_kv(v)     query head j reads key/value head j // (NH/KVH)
    x += o_proj(causal softmax(q k^T / sqrt(hs)) v)
    h = post_attention_layernorm(x)
    x += down_proj(silu(gate_proj(h)) * up_proj(h))
then logits = lm_head(norm(x)), lm_head its own matrix (tie_word_embeddings false).

load_llmc reads the trainer's file with its own reader and converts it here, apart from the export: the
trainer rotates interleaved pairs (x[2i], x[2i+1]), so each q and k head's rows are taken even rows first,
then odd rows (by index lists, where the export reshapes); its use_scaled_rope 1 becomes the rope_scaling
of Llama 3.1's config.json (LLAMA31_ROPE_SCALING). The safetensors parser and the number formats
are gpt2_reference.py's, written independently of the export.

    python3 test/llama_reference.py DIR_OR_MODEL.bin [token ...]   prints the logits' shape and argmax

Needs numpy.
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference  # noqa: E402  (beside this file)

LLAMA_MAGIC = 20240803
# what Llama 3.1's config.json holds for the rescaled rotary frequencies that llm.c's use_scaled_rope 1 selects
LLAMA31_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}


def load_export(directory):
    """(cfg, weights) of an export directory: config.json as written, float32 weights (F8_E4M3 tensors as
    float32(e4m3) * NAME_scale_inv)."""
    return gpt2_reference.load_export(directory)


def rotate_half_order(heads, hs):
    """Row indices, in the trainer's qkv rows of `heads` heads, of HF's rows: per head 0, 2, ..., hs-2,
    then 1, 3, ..., hs-1 (HF's pair (i, i + hs/2) is the trainer's (2i, 2i + 1))."""
    within = list(range(0, hs, 2)) + list(range(1, hs, 2))
    return np.array([head * hs + r for head in range(heads) for r in within])


def llmc_layout(path):
    """(header ints, header floats, [(name, shape)] in file order, data offset) of an llm.c Llama file in the
    layout of llm.c's train_llama3.cu (its llama3 branch's writer, and what the trainer writes): GPT-2's 16
    slots, the head in wpe's, the biases zeros, fc each layer's up then gate rows, the vocabulary unpadded."""
    with open(path, "rb") as f:
        data = f.read(2048)
    h = struct.unpack("<256i", data[:1024])
    if h[0] != LLAMA_MAGIC or h[1] not in (3, 5) or h[10] != 3 or any(h[12:]):
        raise ValueError(f"{path}: not an llm.c Llama model file in train_llama3.cu's layout")
    maxT, V, L, NH, KVH, C, multiple_of = h[2:9]
    floats = struct.unpack("<3f", data[1024:1036])
    # llm.c's F, the product in float32 as its C reader computes it
    hidden = int(np.float32(floats[0]) * np.float32(8 * C // 3))
    F = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
    QKV = (NH + 2 * KVH) * (C // NH)
    layout = [("wte", (V, C)), ("lmhead", (V, C)), ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, QKV, C)),
              ("qkvb", (L, QKV)), ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)),
              ("fc", (L, 2 * F, C)), ("fcb", (L, 2 * F)), ("fcprojw", (L, C, F)), ("fcprojb", (L, C)),
              ("lnfw", (C,)), ("lnfb", (C,))]
    return h, floats, layout, 2048


def gemm_weight_slices(path):
    """(offset, count) in the file's values (after the header) of each trainer GEMM's weight, per layer: qkv,
    attproj, fc (up and gate as one (2F, C) weight), fcproj."""
    h, _, layout, _ = llmc_layout(path)
    return gpt2_reference.slices_of(layout, h[4], ["qkvw", "attprojw", "fc", "fcprojw"])


def load_llmc(path, permute=True):
    """(cfg, weights) of an llm.c Llama model file (version 3 fp32 or 5 bf16), in transformers' names and
    layout, float32; cfg in config.json's keys. permute=False keeps q_proj and k_proj in the trainer's
    interleaved row order (what an export that forgot the reordering would hold; the test's negative control)."""
    h, (multiplier, eps, theta), layout, offset = llmc_layout(path)
    maxT, V, L, NH, KVH, C = h[2:8]
    scaled_rope = h[9]
    if scaled_rope not in (0, 1):
        raise ValueError(f"{path}: use_scaled_rope {scaled_rope} is neither 0 nor 1")
    with open(path, "rb") as f:
        data = f.read()
    if h[1] == 3:
        flat = np.frombuffer(data, dtype="<f4", offset=offset).astype(np.float32)
    else:
        flat = gpt2_reference.bf16_decode(np.frombuffer(data, dtype="<u2", offset=offset))
    total = sum(int(np.prod(s)) for _, s in layout)
    if flat.size != total:
        raise ValueError(f"{path}: {flat.size} values, header says {total}")
    p, at = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape))
        p[name] = flat[at:at + n].reshape(shape)
        at += n
    for name in ("ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb"):
        if np.any(p[name]):
            raise ValueError(f"{path}: {name}, a bias llm.c's Llama file keeps as zeros, is not zero")
    F = p["fcprojw"].shape[2]
    hs = C // NH
    q_rows = rotate_half_order(NH, hs) if permute else np.arange(NH * hs)
    k_rows = NH * hs + (rotate_half_order(KVH, hs) if permute else np.arange(KVH * hs))
    w = {"model.embed_tokens.weight": p["wte"], "model.norm.weight": p["lnfw"], "lm_head.weight": p["lmhead"]}
    for l in range(L):
        a = f"model.layers.{l}."
        w[a + "input_layernorm.weight"] = p["ln1w"][l]
        w[a + "self_attn.q_proj.weight"] = p["qkvw"][l][q_rows]
        w[a + "self_attn.k_proj.weight"] = p["qkvw"][l][k_rows]
        w[a + "self_attn.v_proj.weight"] = p["qkvw"][l][(NH + KVH) * hs:]
        w[a + "self_attn.o_proj.weight"] = p["attprojw"][l]
        w[a + "post_attention_layernorm.weight"] = p["ln2w"][l]
        w[a + "mlp.up_proj.weight"] = p["fc"][l][:F]
        w[a + "mlp.gate_proj.weight"] = p["fc"][l][F:]
        w[a + "mlp.down_proj.weight"] = p["fcprojw"][l]
    cfg = {"vocab_size": V, "max_position_embeddings": maxT, "hidden_size": C, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": KVH, "rms_norm_eps": eps,
           "rope_theta": theta, "rope_scaling": dict(LLAMA31_ROPE_SCALING) if scaled_rope else None}
    return cfg, w


def rope_inv_freq(cfg, hs):
    """The hs/2 rotary frequencies theta^(-2i/hs) in float64, rescaled by config.json's rope_scaling if it has one.
    rope_type "llama3" (transformers' _compute_llama3_parameters) works in wavelengths 2 pi / f: pairs shorter than
    original_max_position_embeddings / high_freq_factor keep f, pairs longer than original / low_freq_factor take
    f / factor, and between the two f is blended, (1 - smooth) f / factor + smooth f with smooth = (original /
    wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor), 0 at the long end, 1 at the short."""
    inv_freq = float(cfg["rope_theta"]) ** (-np.arange(0, hs, 2) / hs)
    scaling = cfg.get("rope_scaling")
    if scaling is None:
        return inv_freq
    if scaling.get("rope_type") != "llama3":
        raise ValueError(f"rope_scaling {scaling!r}: only rope_type \"llama3\" is implemented here")
    factor, low, high = (float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor"))
    original = float(scaling["original_max_position_embeddings"])
    wavelength = 2 * np.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    return np.where(wavelength < original / high, inv_freq,
                    np.where(wavelength > original / low, inv_freq / factor, blended))


def rms_norm(x, weight, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def forward(cfg, w, tokens, dtype=np.float32):
    """Logits (B,T,V) of tokens (B,T); computed in `dtype` (float32, or float64 for a tighter reference)."""
    tokens = np.asarray(tokens)
    B, T = tokens.shape
    L, NH, KVH, C = (cfg[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                      "hidden_size"))
    eps = dtype(cfg["rms_norm_eps"])
    hs = C // NH
    g = {k: np.asarray(v, dtype=dtype) for k, v in w.items()}
    # (T, hs) angles t * f_i for i < hs/2, repeated for the second half (HF's cat(freqs, freqs)); in float64,
    # then rounded, as the trainer's table is
    inv_freq = rope_inv_freq(cfg, hs)
    angles = np.arange(T)[:, None] * np.concatenate([inv_freq, inv_freq])[None]
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    x = g["model.embed_tokens.weight"][tokens]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms_norm(x, g[p + "input_layernorm.weight"], eps)
        q = (h @ g[p + "self_attn.q_proj.weight"].T).reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        k = (h @ g[p + "self_attn.k_proj.weight"].T).reshape(B, T, KVH, hs).transpose(0, 2, 1, 3)
        v = (h @ g[p + "self_attn.v_proj.weight"].T).reshape(B, T, KVH, hs).transpose(0, 2, 1, 3)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, NH // KVH, axis=1), np.repeat(v, NH // KVH, axis=1)  # repeat_kv
        att = (q @ k.transpose(0, 1, 3, 2)) * dtype(1.0 / np.sqrt(hs))
        att = np.where(mask, -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att = att / att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ g[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, g[p + "post_attention_layernorm.weight"], eps)
        gate = h @ g[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ g[p + "mlp.up_proj.weight"].T)) @ g[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, g["model.norm.weight"], eps)
    return (x @ g["lm_head.weight"].T).astype(np.float32)


if __name__ == "__main__":
    gpt2_reference.main(__doc__.split("\n\n")[4], load_export, load_llmc, forward)
