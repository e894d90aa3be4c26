#!/usr/bin/env python3
"""Exports an llm.c model file (what train_cpu / train write) as a Hugging Face directory: a GPT-2 file
as GPT2LMHeadModel, a Llama file as LlamaForCausalLM.

    python3 scripts/export_hf.py MODEL.bin OUT_DIR [--fp8] [--fp8_margin M] [--tokenizer HF_DIR|tokenizer.json]

The mapping below is scripts/hf_layout.py's, which scripts/import_hf.py (Hugging Face to llm.c) shares: an import
then an export gives back a checkpoint's tensors bit for bit.

Input: an llm.c model file, version 3 (fp32) or 5 (bf16), of either architecture; the magic says which.
A bad header or a size that does not match it ends the script with one line "error: MODEL.bin: ..." on
stderr and exit status 1, writing nothing.

GPT-2 (magic 20240326): a 256 x int32 header [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp, then the 16
tensors in llm.c order (wte (Vp,C), wpe (maxT,C), ln1w, ln1b, qkvw (L,3C,C), qkvb, attprojw (L,C,C),
attprojb, ln2w, ln2b, fcw (L,4C,C), fcb, fcprojw (L,C,4C), fcprojb, lnfw, lnfb). Output for
transformers' GPT2LMHeadModel:
  transformer.wte.weight          (V, C)      the first V rows of wte (llm.c's padding rows dropped)
  transformer.wpe.weight          (maxT, C)
  transformer.h.{i}.ln_1.weight / .bias        (C)
  transformer.h.{i}.attn.c_attn.weight  (C, 3C)  Conv1D, y = x @ W + b: the transpose of qkvw (3C, C)
  transformer.h.{i}.attn.c_attn.bias    (3C)
  transformer.h.{i}.attn.c_proj.weight  (C, C)   transpose of attprojw
  transformer.h.{i}.attn.c_proj.bias    (C)
  transformer.h.{i}.ln_2.weight / .bias        (C)
  transformer.h.{i}.mlp.c_fc.weight     (C, 4C)  transpose of fcw (4C, C)
  transformer.h.{i}.mlp.c_fc.bias       (4C)
  transformer.h.{i}.mlp.c_proj.weight   (4C, C)  transpose of fcprojw (C, 4C)
  transformer.h.{i}.mlp.c_proj.bias     (C)
  transformer.ln_f.weight / .bias              (C)
The LM head is tied to wte (tie_word_embeddings), so there is no lm_head.weight.

Llama (magic 20240803): llm.c's Llama 3 files in either layout llm.c writes, told apart by the header as
model_file.h tells them. The layout of llm.c's train_llama3.cu (its llama3 branch's train_llama3.py writes it,
and the trainers do): 256 x int32 [2]=maxT [3]=V [4]=L [5]=NH [6]=KVH [7]=C [8]=multiple_of [9]=use_scaled_rope
(0 or 1) [10,11]=Llama version 3.x, then 256 x float32 [0]=ffn_dim_multiplier [1]=norm_eps [2]=rope_theta, then
GPT-2's 16 slots: wte (V,C), lmhead (V,C), ln1w (L,C), zeros (L,C), qkvw (L,(NH+2KVH)hs,C), zeros, attprojw
(L,C,C), zeros, ln2w (L,C), zeros, fc (L,2F,C) each layer's SwiGLU up projection then its gate, zeros (L,2F),
fcprojw (L,C,F), zeros, lnfw (C), zeros (C); the zeros are GPT-2's biases, which must be zero (Llama has
none). hs = C/NH, F = multiple_of * ceil(int(ffn_dim_multiplier * int(8C/3)) / multiple_of) with a float32
product, as train_llama3.cu computes it. The layout of llm.c master's train_llama3.py: one 256 x int32
header, [2..7] as above, [8]=ffn_dim_multiplier [9]=multiple_of [10]=norm_eps [11]=rope_theta
[12]=use_scaled_rope [13]=max_gen_batch_size [14,15]=Llama version, each truncated to an int by its writer
(so F is what the file's size leaves for the SwiGLU weights, and the epsilon is llm.c's 1e-5), then wte,
ln1w, qkvw, attprojw, ln2w, fcw (up), fcgatew (gate), fcprojw, lnfw, lmhead. Output for LlamaForCausalLM
(nn.Linear weights are (out, in), the trainer's layout, so nothing is transposed):
  model.embed_tokens.weight                        (V, C)
  model.layers.{i}.input_layernorm.weight          (C)      ln1w
  model.layers.{i}.self_attn.q_proj.weight         (NH hs, C)   qkvw's first NH hs rows, permuted (below)
  model.layers.{i}.self_attn.k_proj.weight         (KVH hs, C)  its next KVH hs rows, permuted
  model.layers.{i}.self_attn.v_proj.weight         (KVH hs, C)  its last KVH hs rows
  model.layers.{i}.self_attn.o_proj.weight         (C, C)   attprojw
  model.layers.{i}.post_attention_layernorm.weight (C)      ln2w
  model.layers.{i}.mlp.up_proj.weight              (F, C)   fcw
  model.layers.{i}.mlp.gate_proj.weight            (F, C)   fcgatew
  model.layers.{i}.mlp.down_proj.weight            (C, F)   fcprojw
  model.norm.weight                                (C)      lnfw
  lm_head.weight                                   (V, C)   lmhead (untied)
The trainer rotates the interleaved pairs (x[2i], x[2i+1]) of each query and key head (Meta's and llm.c's
convention); transformers' Llama rotates (x[i], x[i + hs/2]) (rotate_half), both by the angle
t * theta^(-2i/hs). So within each q and k head the rows are reordered, even rows first, then odd rows:
HF row i < hs/2 is our row 2i and HF row hs/2 + i our row 2i + 1. A query and its key are permuted alike,
so their dot products, and everything after them, are unchanged. v_proj is not rotated and keeps its order.
use_scaled_rope 1 (Llama 3.1's rescaled frequencies) is written as config.json's rope_scaling {"rope_type":
"llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings":
8192}, transformers' name for the same rescaling; use_scaled_rope 0 as rope_scaling null.

Every tensor is BF16, rounded to nearest even from the fp32 values (a NaN becomes 0x7FFF), bit for bit as
fp8_scaling.h's bf16_from_float.

--fp8: the block matmul weights (GPT-2: c_attn, attn.c_proj, c_fc, mlp.c_proj; Llama: q/k/v/o_proj,
gate/up/down_proj) are stored as F8_E4M3 with one float32 scale per tensor, by the trainer's weight rule
(fp8_scaling.h, train_gpt.c's refresh_compute_weights): amax = max |w| over the trainer's fp32 weight
(NaNs ignored), s = (448 / amax) * 2^-M in float32 (fp8_compute_scale: 1 if amax is 0 or not finite,
clamped to [FLT_MIN, FLT_MAX]), and the code of each element is e4m3(w * s), the product rounded to
float32 then to E4M3 by round-to-nearest-even, saturating at +-448, NaN -> 0x7F, a float32-subnormal w ->
a zero of its sign. Beside each such tensor NAME (e.g. transformer.h.0.attn.c_attn.weight) is NAME +
"_scale_inv", an F32 scalar (shape []) holding float32(1 / s):

    weight ~= float32(e4m3 value) * NAME_scale_inv

The scale is the trainer's, of the weight of one of its GEMMs, so the codes are exactly the FP8 weights
the trainer computes with: Llama's q_proj, k_proj and v_proj are parts of the one qkv weight and share its
scale, and up_proj and gate_proj are the two halves of the one (2F, C) fc weight and share its scale.
Transposing, splitting and permuting rows move elements without changing any. Everything else stays BF16.
This is the layout of transformers' own "fp8" quantization (FineGrainedFP8Config, its per-tensor case), which
config.json names: quantization_config {"quant_method": "fp8", "activation_scheme": "dynamic",
"weight_block_size": null, "fmt": "e4m3", "modules_to_not_convert": ["lm_head"]}, and for GPT-2 also
"dequantize": true. Stock transformers (checked with 5.25.0, torch 2.15.0, accelerate 1.16.0; test_export.sh)
loads it with accelerate installed and, without an FP8 GPU, dequantizes each weight to float32(e4m3 value) *
weight_scale_inv, exactly these values. On an FP8 GPU it would replace nn.Linear by its FP8Linear instead;
GPT-2's Conv1D layers are not nn.Linear, so GPT-2 exports ask for dequantization on every device. The
safetensors metadata records the margin and the scale rule (fp8_margin, fp8_scales).

The safetensors file is written here, without the safetensors package: an 8-byte little-endian header
length, a JSON header (dtype, shape, data_offsets per tensor; __metadata__ {"format": "pt", ...}) padded
with spaces to a multiple of 8 bytes, then the tensors' little-endian bytes back to back (no gaps, as the
format requires), largest element size first so every tensor is aligned to its element size.

--tokenizer: the run's tokenizer, which the model file does not record: the Hugging Face directory it came from
(what import_hf.py read; its tokenizer.json, and its tokenizer_config.json and special_tokens_map.json where it
has them) or a tokenizer.json (a tokenizer_config.json is then written: PreTrainedTokenizerFast, and BOS and EOS
<|endoftext|> where the vocabulary has it, GPT-2's convention). They are written beside the weights, with a
special_tokens_map.json, and config.json's bos_token_id and eos_token_id are the tokenizer's where it names them,
so that transformers' AutoTokenizer loads the directory at once. A tokenizer with more tokens
than the model's vocabulary is refused.

Files are written to temporary names, fsync'ed and renamed: a new OUT_DIR appears only when complete;
into an existing OUT_DIR model.safetensors is renamed into place first, then the tokenizer files and config.json.

Needs Python 3 and numpy; tokenizers for --tokenizer.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("error: export_hf.py needs numpy (python3 -m pip install numpy, or make python_deps and run with "
          "PYTHONPATH=build/python)", file=sys.stderr)
    sys.exit(1)

from hf_layout import (GPT2_BLOCK, GPT2_GLOBAL, HEADER_INTS, LLAMA31_ROPE_SCALING, LLAMA3_ZERO_SLOTS, LLAMA_BLOCK,
                       LLAMA_GLOBAL, LLAMA_MAGIC, MODEL_MAGIC, bf16_from_f32, bf16_to_f32, gpt2_block_name,
                       gpt2_file_slots, llama3_file_slots, llama_block_name, llama_ffn_dim, rotate_half_rows)
from hf_tokenizer import TokenizerRefused, hf_tokenizer_files

E4M3_MAX = 448.0
CHUNK = 1 << 22  # elements converted at a time


class ExportError(Exception):
    """A one-line reason the export cannot be done."""


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        die(f"export_hf.py: {message} (usage: export_hf.py MODEL.bin OUT_DIR [--fp8] [--fp8_margin M] "
            "[--tokenizer HF_DIR|tokenizer.json])")


# ---------------------------------------------------------------------------------------------------------
# Conversions on bit patterns, as fp8_scaling.h writes them.


def f32_bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def e4m3_from_f32(x):
    """uint8 E4M3 codes of float32 x: fp8_from_float(x, FP8_E4M3), vectorized."""
    u = f32_bits(x).astype(np.int64)
    sign = ((u >> 24) & 0x80).astype(np.uint8)
    a = u & 0x7FFFFFFF
    mbits, bias = 3, 7
    emin = 1 - bias  # -6
    e = (a >> 23) - 127
    m = (a & 0x7FFFFF) | 0x800000
    e_eff = np.maximum(e, emin)
    # shift is 20..24 where it is used; clip elsewhere so the shifts stay defined
    shift = np.clip(23 - mbits + (e_eff - e), 20, 24)
    r = m >> shift
    rem = m & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    r = r + ((rem > half) | ((rem == half) & ((r & 1) == 1)))
    code = np.minimum(((e_eff + bias - 1) << mbits) + r, 0x7E)
    out = sign | code.astype(np.uint8)
    out = np.where(e < emin - mbits - 1, sign, out)  # below half the smallest subnormal (and f32 subnormals)
    out = np.where(e > bias + 1, sign | np.uint8(0x7E), out)  # past the top binade, infinities: saturate
    out = np.where(a > 0x7F800000, np.uint8(0x7F), out)  # NaN, sign dropped
    return out.astype(np.uint8)


def fp8_weight_scale(amax, margin):
    """fp8_compute_scale(amax, FP8_E4M3, margin) in float32."""
    amax = np.float32(amax)
    ub = int(f32_bits(np.array([amax]))[0])
    if ub == 0 or ub & 0x80000000 or ub >= 0x7F800000:
        return np.float32(1.0)
    margin = max(-126, min(126, int(margin)))
    flt_max = np.finfo(np.float32).max
    with np.errstate(over="ignore"):
        q = np.float32(E4M3_MAX) / amax
        if not q <= flt_max:
            q = flt_max
        s = np.float32(q * np.float32(2.0**-margin))
    if not s <= flt_max:
        return flt_max
    if s < np.finfo(np.float32).tiny:
        return np.float32(np.finfo(np.float32).tiny)
    return s


def fp8_amax(w):
    """max |w| as the trainer's abs_max takes it (fmaxf: NaNs skipped)."""
    return np.float32(np.fmax.reduce(np.abs(w), axis=None, initial=np.float32(0.0)))


def fp8_codes(w, s):
    """E4M3 codes of w * s, as fp8_quantize computes them."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    codes = np.empty(w.shape, dtype=np.uint8)
    flat_w, flat_c = w.reshape(-1), codes.reshape(-1)
    for i in range(0, flat_w.size, CHUNK):  # in pieces: the conversion's temporaries are 8 bytes an element
        with np.errstate(over="ignore", invalid="ignore"):
            flat_c[i:i + CHUNK] = e4m3_from_f32(flat_w[i:i + CHUNK] * s)  # one float32 product, as fp8_quantize
    u = f32_bits(w)
    subnormal = (u & 0x7F800000) == 0  # a zero or a float32 subnormal: a zero of its sign
    codes[subnormal] = ((u[subnormal] >> 24) & 0x80).astype(np.uint8)
    return codes


def fp8_quantize_weight(w, margin):
    """(E4M3 codes of w * s, s) with the trainer's exact-amax weight scale."""
    s = fp8_weight_scale(fp8_amax(w), margin)
    return fp8_codes(w, s), s


# ---------------------------------------------------------------------------------------------------------
# llm.c model file


def read_model(path):
    """(config dict, dict of float32 arrays in llm.c shapes) of a version 3 or 5 model file of either
    architecture, in any layout model_file.h reads; config["arch"] is "gpt2" or "llama"."""
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except OSError as e:
        raise ExportError(f"{path}: cannot open: {e.strerror}")
    with f:
        if size < 4 * HEADER_INTS:
            raise ExportError(f"{path}: too short for a model file header ({size} bytes)")
        h = np.frombuffer(f.read(4 * HEADER_INTS), dtype="<i4")
        if h[0] not in (MODEL_MAGIC, LLAMA_MAGIC):
            raise ExportError(f"{path}: not an llm.c model file (magic {h[0]}, expected {MODEL_MAGIC} for GPT-2 "
                              f"or {LLAMA_MAGIC} for Llama)")
        version = int(h[1])
        if version not in (3, 5):
            raise ExportError(f"{path}: unsupported model file version {version} (expected 3 fp32 or 5 bf16)")
        header_bytes = 4 * HEADER_INTS
        if h[0] == MODEL_MAGIC:
            cfg, slots = gpt2_header(path, h)
        elif llama_layout(path, h) == "llama3":
            if size < 8 * HEADER_INTS:
                raise ExportError(f"{path}: too short for a Llama model file header ({size} bytes)")
            header_bytes *= 2
            cfg, slots = llama3_header(path, h, np.frombuffer(f.read(4 * HEADER_INTS), dtype="<f4"))
        else:
            cfg, slots = llama3_master_header(path, h, (size - header_bytes) // (4 if version == 3 else 2))
    count = sum(math.prod(s) for _, s in slots)
    expected = header_bytes + count * (4 if version == 3 else 2)
    if size != expected:
        raise ExportError(f"{path}: size {size} does not match its header (expected {expected} bytes): "
                          "truncated or corrupt")
    raw = np.memmap(path, dtype="<f4" if version == 3 else "<u2", mode="r", offset=header_bytes, shape=(count,))
    params, offset = {}, 0
    for name, shape in slots:
        n = math.prod(shape)
        chunk = raw[offset:offset + n]
        params[name] = (np.asarray(chunk, dtype=np.float32) if version == 3 else bf16_to_f32(chunk)).reshape(shape)
        offset += n
    if "fc" in params:  # the llama3 branch's: its biases are zeros, fc each layer's up then gate rows
        for name in LLAMA3_ZERO_SLOTS:
            nonzero = np.flatnonzero(params.pop(name).reshape(cfg["L"] if name != "lnfb" else 1, -1))
            if nonzero.size:
                raise ExportError(f"{path}: {name} has a value that is not 0: llm.c's Llama layout keeps GPT-2's "
                                  "biases as zeros, and Llama has none")
        fc = params.pop("fc")
        params["fcw"], params["fcgatew"] = fc[:, :cfg["F"]], fc[:, cfg["F"]:]
    cfg["version"] = version
    return cfg, params


def gpt2_header(path, h):
    """(config, tensor shapes in file order) of a GPT-2 file's header h."""
    maxT, V, L, NH, C, Vp = (int(v) for v in (h[2], h[3], h[4], h[5], h[6], h[7]))
    if maxT <= 0 or V <= 1 or L <= 0 or NH <= 0 or C <= 0 or C % NH != 0 or Vp < V:
        raise ExportError(
            f"{path}: header describes an invalid model (maxT {maxT} V {V} L {L} NH {NH} C {C} Vp {Vp})")
    return {"arch": "gpt2", "maxT": maxT, "V": V, "L": L, "NH": NH, "C": C, "Vp": Vp}, gpt2_file_slots(maxT, L, C, Vp)


def llama_layout(path, h):
    """Which of llm.c's Llama layouts the integer header h has (model_file.h's llama_file_layout): the llama3
    branch's ends at [11], the Llama version at [10, 11]; master's at [15], [10] its epsilon truncated to 0."""
    if h[10] == 3 and not h[12:].any():
        return "llama3"
    if h[10] == 0 and h[14] == 3 and not h[16:].any():
        return "llama3_master"
    raise ExportError(f"{path}: a Llama header of neither layout llm.c writes (ints [10..15] = "
                      f"{' '.join(str(int(v)) for v in h[10:16])})")


def llama_dims(path, h, F, eps, theta, scaled_rope):
    """The config dict of a Llama header's dimensions (h[2:8]) and the rest, checked as model_file.h does."""
    maxT, V, L, NH, KVH, C = (int(v) for v in h[2:8])
    if scaled_rope not in (0, 1):
        raise ExportError(f"{path}: use_scaled_rope {scaled_rope} in the header is neither 0 nor 1")
    if not (maxT > 0 and V > 1 and L > 0 and NH > 0 and KVH > 0 and NH % KVH == 0 and C > 0 and C % NH == 0 and
            (C // NH) % 2 == 0 and F > 0 and 0 < eps < 1 and 0 < theta <= 1e9):
        raise ExportError(f"{path}: header describes an invalid Llama model (maxT {maxT} V {V} L {L} NH {NH} "
                          f"KVH {KVH} C {C} F {F} norm_eps {eps!s} rope_theta {theta!s})")
    return {"arch": "llama", "maxT": maxT, "V": V, "L": L, "NH": NH, "KVH": KVH, "C": C, "F": F,
            "norm_eps": eps, "rope_theta": theta, "scaled_rope": bool(scaled_rope)}


def llama3_header(path, h, floats):
    """(config, tensor shapes in file order) of a llama3-branch header (integers h, floats): what
    train_llama3.cu reads, GPT-2's 16 slots with the head in wpe's, zeros for the biases, fc (L, 2F, C)."""
    C, multiple_of = int(h[7]), int(h[8])
    multiplier, eps, theta = (np.float32(v) for v in floats[:3])
    F = llama_ffn_dim(C, multiple_of, multiplier) if C > 0 and multiple_of > 0 and 0 < multiplier <= 16 else 0
    cfg = llama_dims(path, h, F, eps, theta, int(h[9]))
    QKV = (cfg["NH"] + 2 * cfg["KVH"]) * (C // cfg["NH"])
    return cfg, llama3_file_slots(cfg["V"], cfg["L"], C, QKV, F)


def llama3_master_shapes(V, L, QKV, C, F):
    return [("wte", (V, C)), ("ln1w", (L, C)), ("qkvw", (L, QKV, C)), ("attprojw", (L, C, C)), ("ln2w", (L, C)),
            ("fcw", (L, F, C)), ("fcgatew", (L, F, C)), ("fcprojw", (L, C, F)), ("lnfw", (C,)), ("lmhead", (V, C))]


def llama3_master_header(path, h, values):
    """(config, tensor shapes) of a header of llm.c master's train_llama3.py, all ints as its writer truncated
    them ([8] ffn_dim_multiplier, [9] multiple_of, [10] norm_eps, [11] rope_theta, [12] use_scaled_rope): F is
    what the file's `values` leave for the three SwiGLU weights, a width llm.c's formula gives with multiple_of
    and a multiplier in [h[8], h[8] + 1); the epsilon is llm.c's 1e-5 (model_file.h's llama3_master_ffn_dim)."""
    cfg = llama_dims(path, h, 1, np.float32(1e-5), np.float32(h[11]), int(h[12]))
    V, L, C, k, multiple_of = cfg["V"], cfg["L"], cfg["C"], int(h[8]), int(h[9])
    QKV = (cfg["NH"] + 2 * cfg["KVH"]) * (C // cfg["NH"])
    rest = values - sum(math.prod(s) for _, s in llama3_master_shapes(V, L, QKV, C, 0))
    F, hidden = rest // (3 * L * C), 8 * C // 3
    if not (rest > 0 and rest % (3 * L * C) == 0 and multiple_of > 0 and 0 <= k <= 16 and F % multiple_of == 0 and
            -(-k * hidden // multiple_of) * multiple_of <= F <= -(-(k * hidden + hidden - 1) // multiple_of) * multiple_of):
        raise ExportError(f"{path}: size fits no SwiGLU width of llm.c master's layout (multiple_of {multiple_of}, "
                          f"ffn_dim_multiplier in [{k}, {k + 1})): truncated or corrupt")
    cfg["F"] = F
    return cfg, llama3_master_shapes(V, L, QKV, C, F)


# ---------------------------------------------------------------------------------------------------------
# Hugging Face layout

def scale_inv_array(s):
    return np.array(np.float32(1.0) / s, dtype=np.float32)


def gpt2_tensors(cfg, params, fp8, margin):
    """Yields (name, safetensors dtype, array to write: float32 for BF16/F32, uint8 codes for F8_E4M3)."""
    V = cfg["V"]
    yield GPT2_GLOBAL["wte"], "BF16", params["wte"][:V]
    yield GPT2_GLOBAL["wpe"], "BF16", params["wpe"]
    for layer in range(cfg["L"]):
        for hf_name, ours, is_matmul in GPT2_BLOCK:
            name = gpt2_block_name(layer, hf_name)
            w = params[ours][layer]
            if is_matmul:
                w = w.T  # ours (out, in) -> Conv1D (in, out)
                if fp8:
                    codes, s = fp8_quantize_weight(w, margin)
                    yield name, "F8_E4M3", codes
                    yield name + "_scale_inv", "F32", scale_inv_array(s)
                    continue
            yield name, "BF16", w
    yield GPT2_GLOBAL["lnfw"], "BF16", params["lnfw"]
    yield GPT2_GLOBAL["lnfb"], "BF16", params["lnfb"]


def llama_gemms(cfg, params, layer):
    """The trainer's four GEMM weights of a block, each as the HF modules it is cut into: one list of
    (module, weight (out, in)) per GEMM, which has one FP8 scale."""
    NH, KVH = cfg["NH"], cfg["KVH"]
    hs = cfg["C"] // NH
    qkv = params["qkvw"][layer]
    q, k, v = LLAMA_BLOCK["qkvw"]
    up, gate = LLAMA_BLOCK["fc"]
    return [[(q, rotate_half_rows(qkv[:NH * hs], NH, hs)),
             (k, rotate_half_rows(qkv[NH * hs:(NH + KVH) * hs], KVH, hs)),
             (v, qkv[(NH + KVH) * hs:])],
            [(LLAMA_BLOCK["attprojw"][0], params["attprojw"][layer])],
            # the trainer's fc GEMM reads fcw and fcgatew, adjacent in its memory, as one (2F, C) weight
            [(up, params["fcw"][layer]), (gate, params["fcgatew"][layer])],
            [(LLAMA_BLOCK["fcprojw"][0], params["fcprojw"][layer])]]


def llama_tensors(cfg, params, fp8, margin):
    """As gpt2_tensors, for a Llama model."""
    yield LLAMA_GLOBAL["wte"], "BF16", params["wte"]
    for layer in range(cfg["L"]):
        yield llama_block_name(layer, LLAMA_BLOCK["ln1w"][0]), "BF16", params["ln1w"][layer]
        yield llama_block_name(layer, LLAMA_BLOCK["ln2w"][0]), "BF16", params["ln2w"][layer]
        for gemm in llama_gemms(cfg, params, layer):
            if fp8:
                s = fp8_weight_scale(max(fp8_amax(w) for _, w in gemm), margin)  # shared by the GEMM's parts
            for module, w in gemm:
                name = llama_block_name(layer, module)
                if fp8:
                    yield name, "F8_E4M3", fp8_codes(w, s)
                    yield name + "_scale_inv", "F32", scale_inv_array(s)
                else:
                    yield name, "BF16", w
    yield LLAMA_GLOBAL["lnfw"], "BF16", params["lnfw"]
    yield LLAMA_GLOBAL["lmhead"], "BF16", params["lmhead"]


SAFETENSORS_ITEMSIZE = {"F32": 4, "BF16": 2, "F8_E4M3": 1}


def write_tensor(f, dtype, value):
    """The little-endian bytes of value (row-major), converted and written a chunk at a time."""
    flat = np.ascontiguousarray(value).reshape(-1)
    for i in range(0, flat.size, CHUNK):
        part = flat[i:i + CHUNK]
        if dtype == "BF16":
            f.write(bf16_from_f32(part).astype("<u2").tobytes())
        elif dtype == "F32":
            f.write(part.astype("<f4").tobytes())
        else:
            f.write(part.astype(np.uint8).tobytes())


def write_safetensors(f, tensors, metadata):
    """tensors: list of (name, dtype, array). Largest element size first, then file order."""
    order = sorted(range(len(tensors)), key=lambda i: -SAFETENSORS_ITEMSIZE[tensors[i][1]])
    header, offset = {"__metadata__": metadata}, 0
    for i in order:
        name, dtype, value = tensors[i]
        n = math.prod(value.shape) * SAFETENSORS_ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": [int(d) for d in value.shape], "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    f.write(len(text).to_bytes(8, "little"))
    f.write(text)
    for i in order:
        _, dtype, value = tensors[i]
        write_tensor(f, dtype, value)


# the safetensors metadata's record of how the scales were chosen (config.json has only what a loader reads)
FP8_SCALE_RULE = ("one per trainer GEMM weight (Llama: q/k/v_proj share qkv's, up/gate_proj fc's): s = float32(448 / "
                  "amax(|w|)) * 2^-fp8_margin, code = e4m3(float32(w * s)) to nearest even saturating at 448, "
                  "weight_scale_inv = float32(1 / s)")


def fp8_quantization_config(dequantize):
    """config.json's quantization_config: transformers' "fp8" quantization (FineGrainedFP8Config) with one scale
    per tensor (weight_block_size null), the scale of NAME.weight in NAME.weight_scale_inv. dequantize: transformers
    then dequantizes on any device, not only where it has no FP8 GPU (GPT-2's Conv1D layers are not the nn.Linear
    its FP8Linear replaces, so on an FP8 GPU their codes would load as weights undequantized)."""
    q = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": None, "fmt": "e4m3",
         "modules_to_not_convert": ["lm_head"]}
    if dequantize:
        q["dequantize"] = True
    return q


def gpt2_config(cfg, fp8):
    V, C = cfg["V"], cfg["C"]
    eot = 50256 if V == 50257 else None  # GPT-2's <|endoftext|>; a byte vocabulary has none
    config = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": V,
        "n_positions": cfg["maxT"],
        "n_ctx": cfg["maxT"],
        "n_embd": C,
        "n_layer": cfg["L"],
        "n_head": cfg["NH"],
        "n_inner": 4 * C,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "use_cache": True,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    if fp8:
        config["quantization_config"] = fp8_quantization_config(dequantize=True)
    return config


# the special tokens of the Llama tokenizers the presets name, by vocabulary size: (bos, eos)
LLAMA_SPECIAL_TOKENS = {32000: (1, 2), 128256: (128000, 128001)}


def float32_json(x):
    """The shortest decimal that reads back as the float32 x (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(x)))


def llama_config(cfg, fp8):
    bos, eos = LLAMA_SPECIAL_TOKENS.get(cfg["V"], (None, None))  # a byte vocabulary has none
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": cfg["V"],
        "max_position_embeddings": cfg["maxT"],
        "hidden_size": cfg["C"],
        "intermediate_size": cfg["F"],
        "num_hidden_layers": cfg["L"],
        "num_attention_heads": cfg["NH"],
        "num_key_value_heads": cfg["KVH"],
        "head_dim": cfg["C"] // cfg["NH"],
        "hidden_act": "silu",
        "rms_norm_eps": float32_json(cfg["norm_eps"]),
        "rope_theta": float32_json(cfg["rope_theta"]),
        "rope_scaling": LLAMA31_ROPE_SCALING if cfg["scaled_rope"] else None,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if fp8:
        config["quantization_config"] = fp8_quantization_config(dequantize=False)
    return config


# ---------------------------------------------------------------------------------------------------------
# Atomic output


def write_durable(path, writer):
    with open(path, "wb") as f:
        writer(f)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # a directory that cannot be fsync'ed still got the rename
    finally:
        os.close(fd)


def export(model_path, out_dir, fp8=False, margin=0, tokenizer=None):
    cfg, params = read_model(model_path)
    llama = cfg["arch"] == "llama"
    tensors = list((llama_tensors if llama else gpt2_tensors)(cfg, params, fp8, margin))
    metadata = {"format": "pt", "source": "llm.c model file (fp8gpt scripts/export_hf.py)",
                "llmc_version": str(cfg["version"]), "quantization": "fp8_e4m3_per_tensor" if fp8 else "none"}
    if fp8:
        metadata["fp8_margin"] = str(int(margin))
        metadata["fp8_scales"] = FP8_SCALE_RULE
    config = (llama_config if llama else gpt2_config)(cfg, fp8)
    files = {}  # besides model.safetensors, in the order they are renamed into an existing OUT_DIR
    if tokenizer:
        try:
            files, bos, eos = hf_tokenizer_files(tokenizer, cfg["maxT"], cfg["V"])
        except TokenizerRefused as e:
            raise ExportError(str(e))
        for key, token in (("bos_token_id", bos), ("eos_token_id", eos)):
            if token is not None:  # the tokenizer's own, else the default above
                config[key] = token
    files["config.json"] = (json.dumps(config, indent=2) + "\n").encode("utf-8")

    out_dir = os.path.normpath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"{out_dir}: exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise ExportError(f"{out_dir}: parent directory {parent} does not exist")
    fresh = not os.path.exists(out_dir)
    try:
        work = tempfile.mkdtemp(prefix="." + os.path.basename(out_dir) + ".tmp-", dir=parent if fresh else out_dir)
    except OSError as e:
        raise ExportError(f"{out_dir}: cannot write: {e.strerror}")
    try:
        write_durable(os.path.join(work, "model.safetensors"), lambda f: write_safetensors(f, tensors, metadata))
        for name, data in files.items():
            write_durable(os.path.join(work, name), lambda f: f.write(data))
        if fresh:
            os.chmod(work, 0o755)
            fsync_dir(work)
            os.rename(work, out_dir)
            fsync_dir(parent)
        else:
            for name in ["model.safetensors", *files]:
                os.replace(os.path.join(work, name), os.path.join(out_dir, name))
            fsync_dir(out_dir)
            os.rmdir(work)
    except OSError as e:
        shutil.rmtree(work, ignore_errors=True)
        raise ExportError(f"{out_dir}: write failed: {e.strerror or e}")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return cfg, tensors


def main(argv=None):
    p = OneLineParser(description="Export an llm.c model file as a Hugging Face GPT-2 or Llama directory.")
    p.add_argument("model", help="llm.c model file (version 3 fp32 or 5 bf16)")
    p.add_argument("out_dir", help="output directory (created; config.json and model.safetensors)")
    p.add_argument("--fp8", action="store_true", help="block matmul weights as per-tensor-scaled F8_E4M3")
    p.add_argument("--fp8_margin", type=int, default=0, help="FP8 scale headroom: s = 448/amax/2^M (default 0)")
    p.add_argument("--tokenizer", help="the run's tokenizer, a directory with tokenizer.json (the imported "
                   "checkpoint's) or a tokenizer.json: its files are written beside the weights")
    args = p.parse_args(argv)
    if not -126 <= args.fp8_margin <= 126:
        die(f"--fp8_margin {args.fp8_margin}: out of range [-126, 126]")
    try:
        cfg, tensors = export(args.model, args.out_dir, args.fp8, args.fp8_margin, args.tokenizer)
    except ExportError as e:
        die(str(e))
    kind = f"fp8 e4m3 block weights (margin {args.fp8_margin}) + bf16" if args.fp8 else "bf16"
    shape = f"llama L={cfg['L']} C={cfg['C']} NH={cfg['NH']} KVH={cfg['KVH']} F={cfg['F']}" \
        if cfg["arch"] == "llama" else f"gpt2 L={cfg['L']} C={cfg['C']} NH={cfg['NH']}"
    print(f"exported {args.model} ({shape} V={cfg['V']} maxT={cfg['maxT']}, {len(tensors)} tensors, {kind}"
          f"{', the tokenizer of ' + args.tokenizer if args.tokenizer else ''}) to {args.out_dir}")


if __name__ == "__main__":
    main()
