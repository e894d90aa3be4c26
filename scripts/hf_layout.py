"""How an llm.c model file's tensors are a Hugging Face checkpoint's: the one description export_hf.py (llm.c to
Hugging Face) and import_hf.py (Hugging Face to llm.c) share, so that each is the exact inverse of the other.

    from hf_layout import gpt2_file_slots, llama3_file_slots, GPT2_BLOCK, LLAMA_BLOCK, ...

- The model files' tensor slots in file order, as core/model_file.h lays them out: GPT-2's 16 tensors (wte with
  the padded vocabulary Vp), and Llama in llm.c's llama3-branch layout (GPT-2's 16 slots, the head in wpe's,
  zeros in the bias slots, fc holding each layer's SwiGLU up projection then its gate).
- Llama's SwiGLU width F as llm.c computes it from a header's multiple_of and ffn_dim_multiplier, and the pair
  model_file.h writes for a given F.
- The Hugging Face names: GPT2LMHeadModel's (Conv1D weights, stored (in, out): the transpose of ours) and
  LlamaForCausalLM's (nn.Linear weights, (out, in) as ours).
- The rotary row order: the trainers rotate the interleaved pairs (x[2i], x[2i+1]) of each query and key head
  (Meta's and llm.c's convention), transformers' Llama rotate_half's pairs (x[i], x[i + hs/2]); within each q
  and k head, HF row i < hs/2 is our row 2i and HF row hs/2 + i our row 2i + 1.
- Llama 3.1's rescaled rotary frequencies (llm.c's use_scaled_rope) in transformers' terms.
- BF16 as bit patterns (round to nearest even, as core/fp8_scaling.h's bf16_from_float).

Needs numpy.
"""
import numpy as np

MODEL_MAGIC = 20240326  # GPT-2 model file
LLAMA_MAGIC = 20240803  # Llama model file
HEADER_INTS = 256
LLAMA_NORM_EPS = np.float32(1e-5)  # model_file.h's LLAMA_NORM_EPS: the only RMSNorm epsilon the trainers compute with

# core/gpt_model.h's MODEL_MAX_*: the largest dimensions the trainers read from a model file
MAX_LAYERS, MAX_CHANNELS, MAX_HEADS, MAX_VOCAB, MAX_SEQ_LEN = 1024, 65536, 1024, 1 << 24, 1 << 20


def pad_vocab(V):
    """GPT-2 files pad the vocabulary to a multiple of 128 rows (Vp), as llm.c does."""
    return (V + 127) // 128 * 128


# ---------------------------------------------------------------------------------------------------------
# Model file slots, in file order: (name, shape). Per-layer tensors have the layer first.


def gpt2_file_slots(maxT, L, C, Vp):
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def llama3_file_slots(V, L, C, QKV, F):
    """llm.c's llama3-branch layout, what the trainers write: the head in wpe's slot, fc (L, 2F, C) each layer's
    up then gate rows, and GPT-2's bias slots kept as zeros (LLAMA3_ZERO_SLOTS)."""
    return [("wte", (V, C)), ("lmhead", (V, C)), ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, QKV, C)),
            ("qkvb", (L, QKV)), ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)),
            ("fc", (L, 2 * F, C)), ("fcb", (L, 2 * F)), ("fcprojw", (L, C, F)), ("fcprojb", (L, C)),
            ("lnfw", (C,)), ("lnfb", (C,))]


LLAMA3_ZERO_SLOTS = ["ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb"]
GLOBAL_SLOTS = ("wte", "wpe", "lmhead", "lnfw", "lnfb")  # one tensor; every other slot has one per layer


def llama_ffn_dim(C, multiple_of, multiplier):
    """llm.c's F: the product in float32 (as the C reader computes it), truncated, rounded up to multiple_of."""
    hidden = int(np.float32(multiplier) * np.float32(8 * C // 3))
    return multiple_of * -(-hidden // multiple_of)


def llama_header_ffn(C, F):
    """(multiple_of, ffn_dim_multiplier) of the header model_file.h's llama_file_header writes for F: multiple_of
    F, and a multiplier (1, or F / int(8C/3) in float32 when F is smaller) that gives F back through llm.c's
    formula; None when none does."""
    hidden = 8 * C // 3
    multiplier = np.float32(1.0) if hidden <= F else np.float32(F) / np.float32(hidden)
    return (F, multiplier) if llama_ffn_dim(C, F, multiplier) == F else None


# ---------------------------------------------------------------------------------------------------------
# Hugging Face names

# GPT2LMHeadModel: our global tensors, and each block's as (name inside transformer.h.{i}, ours, is a Conv1D weight
# stored (in, out), the transpose of ours) in file order. The head is tied to wte.
GPT2_GLOBAL = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight", "lnfw": "transformer.ln_f.weight",
               "lnfb": "transformer.ln_f.bias"}
GPT2_BLOCK = [
    ("ln_1.weight", "ln1w", False), ("ln_1.bias", "ln1b", False),
    ("attn.c_attn.weight", "qkvw", True), ("attn.c_attn.bias", "qkvb", False),
    ("attn.c_proj.weight", "attprojw", True), ("attn.c_proj.bias", "attprojb", False),
    ("ln_2.weight", "ln2w", False), ("ln_2.bias", "ln2b", False),
    ("mlp.c_fc.weight", "fcw", True), ("mlp.c_fc.bias", "fcb", False),
    ("mlp.c_proj.weight", "fcprojw", True), ("mlp.c_proj.bias", "fcprojb", False),
]


def gpt2_block_name(layer, name):
    return f"transformer.h.{layer}.{name}"


# LlamaForCausalLM: our global tensors, and each block's per-layer tensors as the modules whose weights fill its
# slice, back to back (qkv: q, k, v rows; fc: up, then gate rows). q and k are rotated (rotate_half_rows).
LLAMA_GLOBAL = {"wte": "model.embed_tokens.weight", "lmhead": "lm_head.weight", "lnfw": "model.norm.weight"}
LLAMA_BLOCK = {"ln1w": ["input_layernorm"], "qkvw": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
               "attprojw": ["self_attn.o_proj"], "ln2w": ["post_attention_layernorm"],
               "fc": ["mlp.up_proj", "mlp.gate_proj"], "fcprojw": ["mlp.down_proj"]}


def llama_block_name(layer, module):
    return f"model.layers.{layer}.{module}.weight"


def rotate_half_rows(w, heads, hs):
    """The rows of `heads` rotated heads of hs rows each, from our interleaved pairs (2i, 2i+1) to rotate_half's
    (i, i + hs/2): per head the even rows, then the odd rows (export)."""
    return w.reshape(heads, hs // 2, 2, -1).transpose(0, 2, 1, 3).reshape(heads * hs, -1)


def interleaved_rows(w, heads, hs):
    """The inverse of rotate_half_rows: rotate_half's rows (i, i + hs/2) of each head back to our interleaved
    pairs (2i, 2i+1) (import)."""
    return w.reshape(heads, 2, hs // 2, -1).transpose(0, 2, 1, 3).reshape(heads * hs, -1)


# llm.c's use_scaled_rope in transformers' terms, as Llama 3.1's own config.json writes it: pairs of wavelength
# below 8192/4 positions keep their frequency, above 8192/1 it is divided by 8, and between the two it is blended
# (core/gpt_model.h's LLAMA31_ROPE_* constants)
LLAMA31_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}


# ---------------------------------------------------------------------------------------------------------
# BF16 as uint16 bit patterns


def bf16_from_f32(x):
    """uint16 BF16 codes of float32 x: round to nearest even; any NaN -> 0x7FFF (bf16_from_float)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    # uint32 as in C: only NaN patterns (replaced below) can carry past 2^32
    out = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    out[(u & 0x7FFFFFFF) > 0x7F800000] = 0x7FFF
    return out


def bf16_to_f32(h):
    u = np.asarray(h, dtype=np.uint16).astype(np.uint32)
    u <<= 16  # in place: one float32-sized temporary
    return u.view(np.float32)
