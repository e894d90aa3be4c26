#!/usr/bin/env python3
"""Imports a Hugging Face checkpoint directory as the llm.c model file both trainers start from (--init_from), and
its tokenizer as an llm.c tokenizer file, so that a published model can be trained on.

    python3 scripts/import_hf.py HF_DIR OUT_MODEL.bin [--dtype exact|float32|bfloat16]
                                 [--tokenizer_out TOKENIZER.bin] [--doc_token TOKEN]

HF_DIR holds config.json and the weights as one model.safetensors or as shards named by
model.safetensors.index.json, each tensor F32, BF16 or F16 (what save_pretrained and the hub's checkpoints have).
  - GPT2LMHeadModel (model_type gpt2): the GPT-2 model file (magic 20240326): the Conv1D weights, stored (in, out),
    transposed to ours (out, in); wte padded with zero rows to Vp, a multiple of 128; the head is tied to wte
    (an lm_head.weight in the checkpoint must equal it).
  - LlamaForCausalLM (model_type llama: Llama 2, Llama 3 and 3.1, and others of that shape): the Llama file in
    llm.c's llama3-branch layout (magic 20240803), what the trainers write: q and k rows reordered within each
    head from transformers' rotate_half pairs to the trainers' interleaved pairs, q/k/v packed into qkv and
    up/gate into fc, zeros in GPT-2's bias slots; rope_theta, and rope_scaling of type llama3 (Llama 3.1's) as
    use_scaled_rope. A Llama with tie_word_embeddings gets its head as a copy of embed_tokens: the model
    computes the same, and training then updates the two apart (an export writes them untied). A tied head saved
    beside the embedding (lm_head.weight) must equal it.
scripts/hf_layout.py holds the mapping, shared with scripts/export_hf.py, which is its exact inverse.

--dtype: the model file's values. exact (default): version 5 (bf16) when every tensor is BF16, so the file holds
the checkpoint's bits, else version 3 (fp32), which holds F32 and F16 values exactly (Llama 2's hub checkpoints
are F16: 4 bytes a parameter). float32: version 3 always. bfloat16: version 5 always, F32 and F16 values rounded
to nearest even (lossy; half the size). The trainers compute from fp32 master weights either way.

Anything the trainers do not compute is refused, before anything is written, with one line "error: PATH: KEY:
reason" (exit status 1): another model_type or architectures, attention_bias or mlp_bias, a sliding_window,
rope_scaling other than llama3 with Llama 3.1's constants, rms_norm_eps other than 1e-5, head_dim other than
hidden_size / num_attention_heads, a hidden_act other than silu, GPT-2 with an activation other than gelu_new
(the tanh form), n_inner other than 4 n_embd, untied embeddings or scaled attention variants, a
quantization_config, dimensions past what the file format holds (vocab_size up to 2^24, 1024 layers, 65536
channels, 2^20 positions), and a checkpoint whose tensors are missing, unexpected, of another shape or dtype.

The import streams: tensors are read from the safetensors files a block of rows at a time (at most CHUNK_BYTES of
a tensor; a whole GPT-2 Conv1D weight, which is transposed) and written in the model file's order, so memory
stays flat in the model's size. A progress line every few seconds says what is done and the time left. The file
is written to a temporary name beside OUT_MODEL.bin, flushed to disk, its size checked, and renamed: OUT_MODEL.bin
appears only complete. An existing OUT_MODEL.bin (or tokenizer file) is refused, never replaced; so is a disk
without room for the file.

--tokenizer_out: HF_DIR's tokenizer as an llm.c tokenizer file (core/tokenizer.h: header [20240328, 2, V, eot],
per token a length byte and its bytes), V the model's vocab_size, the bytes of each token as text (scripts/
hf_tokenizer.py: byte-level BPE's characters mapped back to bytes, sentencepiece's U+2581 as a space and its
<0xNN> pieces as that byte), so the trainers' samples print text. From tokenizer.json (the `tokenizers` package),
else Llama 2's sentencepiece tokenizer.model (the `sentencepiece` package). The eot field is the token that starts
each document, which sampling starts from, as scripts/prepare_data.py's hf tokenizer chooses it: the tokenizer's
BOS where tokenizer_config.json names one, else <|endoftext|>; --doc_token names another.

Needs numpy; tokenizers or sentencepiece for --tokenizer_out.
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    print("error: import_hf.py needs numpy (python3 -m pip install numpy, or make python_deps and run with "
          "PYTHONPATH=build/python)", file=sys.stderr)
    sys.exit(1)

from hf_layout import (GLOBAL_SLOTS, GPT2_BLOCK, GPT2_GLOBAL, HEADER_INTS, LLAMA31_ROPE_SCALING, LLAMA3_ZERO_SLOTS,
                       LLAMA_BLOCK, LLAMA_GLOBAL, LLAMA_MAGIC, LLAMA_NORM_EPS, MAX_CHANNELS, MAX_HEADS, MAX_LAYERS,
                       MAX_SEQ_LEN, MAX_VOCAB, MODEL_MAGIC, bf16_from_f32, bf16_to_f32, gpt2_block_name,
                       gpt2_file_slots, interleaved_rows, llama3_file_slots, llama_block_name, llama_header_ffn,
                       pad_vocab)
from hf_tokenizer import TokenizerRefused, llmc_tokenizer_file

CHUNK_BYTES = 16 << 20  # of a tensor's rows read at a time
PROGRESS_SECONDS = 5.0


class ImportRefused(Exception):
    """A one-line reason the import cannot be done."""


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        die(f"import_hf.py: {message} (usage: import_hf.py HF_DIR OUT_MODEL.bin [--dtype exact|float32|bfloat16] "
            "[--tokenizer_out TOKENIZER.bin] [--doc_token TOKEN])")


# ---------------------------------------------------------------------------------------------------------
# The checkpoint's tensors. safetensors' own numpy reader has no bfloat16 ("data type 'bfloat16' not understood"),
# so its format is read here: an 8-byte little-endian header length, a JSON header (per tensor dtype, shape and
# data_offsets into the data that follows), then the tensors' little-endian bytes. A block of rows is then one
# seek and one read, with neither torch nor the whole tensor in memory.

DTYPES = {"F32": np.dtype("<f4"), "BF16": np.dtype("<u2"), "F16": np.dtype("<f2")}  # BF16 as its bit patterns
SAFETENSORS_MAX_HEADER = 100 << 20  # the safetensors format's own limit


class Tensor:
    def __init__(self, path, dtype, shape, start):
        self.path, self.dtype, self.shape, self.start = path, dtype, tuple(shape), start

    def rows(self, begin, end):
        """Rows [begin, end) of the tensor as a (end - begin, row) array of its dtype (a 1-D tensor is one row)."""
        row = math.prod(self.shape[1:]) if len(self.shape) > 1 else self.shape[0]
        itemsize = DTYPES[self.dtype].itemsize
        try:
            with open(self.path, "rb") as f:
                f.seek(self.start + begin * row * itemsize)
                data = f.read((end - begin) * row * itemsize)
        except OSError as e:
            raise ImportRefused(f"{self.path}: cannot read: {e.strerror or e}")
        if len(data) != (end - begin) * row * itemsize:
            raise ImportRefused(f"{self.path}: ends inside a tensor's data (truncated?)")
        return np.frombuffer(data, dtype=DTYPES[self.dtype]).reshape(end - begin, row)


def read_safetensors_header(path):
    """{name: Tensor} of a safetensors file, its header checked against the file's size."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little") if size >= 8 else -1
            if not 2 <= n <= min(SAFETENSORS_MAX_HEADER, size - 8):
                raise ImportRefused(f"{path}: not a safetensors file (header length {n}, file {size} bytes)")
            header = json.loads(f.read(n))
    except OSError as e:
        raise ImportRefused(f"{path}: cannot read: {e.strerror or e}")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ImportRefused(f"{path}: not a safetensors file (its header is not JSON: {e})")
    if not isinstance(header, dict):
        raise ImportRefused(f"{path}: not a safetensors file (its header is not a JSON object)")
    tensors, data_start = {}, 8 + n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            valid = all(isinstance(d, int) and d >= 0 for d in shape) and 0 <= begin <= end <= size - data_start
        except (KeyError, TypeError, ValueError):
            valid = False
        if not valid:
            raise ImportRefused(f"{path}: tensor {name}: a header entry that is not a tensor's (dtype, shape, "
                                "data_offsets within the file)")
        if dtype in DTYPES and end - begin != math.prod(shape) * DTYPES[dtype].itemsize:
            raise ImportRefused(f"{path}: tensor {name}: {end - begin} bytes for shape {shape} of {dtype}")
        tensors[name] = Tensor(path, dtype, shape, data_start + begin)
    return tensors


def read_checkpoint(hf_dir):
    """{name: Tensor} of the directory's model.safetensors, or of the shards its model.safetensors.index.json
    names (what transformers loads, in that order of preference)."""
    single = os.path.join(hf_dir, "model.safetensors")
    if os.path.isfile(single):
        return read_safetensors_header(single)
    index_path = os.path.join(hf_dir, "model.safetensors.index.json")
    if not os.path.isfile(index_path):
        raise ImportRefused(f"{hf_dir}: no model.safetensors or model.safetensors.index.json (a pytorch_model.bin "
                            "checkpoint is not read: save it with safetensors first)")
    try:
        weight_map = json.load(open(index_path))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ImportRefused(f"{index_path}: not a safetensors index (a JSON object with a weight_map): {e}")
    tensors = {}
    for shard in shards:
        if not isinstance(shard, str) or os.path.basename(shard) != shard:
            raise ImportRefused(f"{index_path}: weight_map names {shard!r}, not a file beside it")
        in_shard = read_safetensors_header(os.path.join(hf_dir, shard))
        for name, file in weight_map.items():
            if file == shard:
                if name not in in_shard:
                    raise ImportRefused(f"{index_path}: weight_map puts {name} in {shard}, which does not hold it")
                tensors[name] = in_shard[name]
    return tensors


# ---------------------------------------------------------------------------------------------------------
# config.json: what the model is, or the key that makes it one the trainers do not compute


def config_value(config, key, default=None):
    value = config.get(key, default)
    return default if value is None else value


def refuse_unless(ok, where, key, value, reason):
    if not ok:
        raise ImportRefused(f"{where}: {key}: {value!r}: {reason}")


def positive_int(config, where, key, limit, default=None):
    value = config_value(config, key, default)
    refuse_unless(isinstance(value, int) and not isinstance(value, bool) and 0 < value <= limit, where, key, value,
                  f"must be an integer in [1, {limit}], what the llm.c model file holds")
    return value


def rope_settings(config, where):
    """(rope_theta, use_scaled_rope) of a Llama config, in transformers' newer form (rope_parameters, with
    rope_theta inside) or the hub's (rope_theta and rope_scaling at the top)."""
    if config.get("rope_parameters") is not None:
        key, params = "rope_parameters", config["rope_parameters"]
        theta = params.get("rope_theta", 10000.0)
    else:
        key, params = "rope_scaling", config.get("rope_scaling") or {}
        theta = config_value(config, "rope_theta", 10000.0)
    refuse_unless(isinstance(params, dict), where, key, params, "not a JSON object")
    refuse_unless(isinstance(theta, (int, float)) and 0 < theta <= 1e9, where, "rope_theta", theta,
                  "must be in (0, 1e9]")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return np.float32(theta), 0
    constants = {k: params.get(k) for k in LLAMA31_ROPE_SCALING if k != "rope_type"}
    expected = {k: v for k, v in LLAMA31_ROPE_SCALING.items() if k != "rope_type"}
    refuse_unless(kind == "llama3" and constants == expected, where, key, params,
                  f"the trainers implement rope_type llama3 with Llama 3.1's constants {expected} only")
    return np.float32(theta), 1


def read_config(hf_dir):
    """The model's configuration dict (arch, maxT, V, L, NH, C; Llama also KVH, F, rope_theta, scaled_rope,
    tied), or ImportRefused naming the key."""
    where = os.path.join(hf_dir, "config.json")
    try:
        config = json.load(open(where))
    except OSError as e:
        raise ImportRefused(f"{where}: cannot read: {e.strerror or e}")
    except ValueError as e:
        raise ImportRefused(f"{where}: not JSON: {e}")
    if not isinstance(config, dict):
        raise ImportRefused(f"{where}: not a JSON object")
    kind = config.get("model_type")
    architectures = {"gpt2": ["GPT2LMHeadModel"], "llama": ["LlamaForCausalLM"]}
    refuse_unless(kind in architectures, where, "model_type", kind,
                  "the trainers compute gpt2 (GPT2LMHeadModel) and llama (LlamaForCausalLM) only")
    refuse_unless(config.get("architectures", architectures[kind]) == architectures[kind], where, "architectures",
                  config.get("architectures"), f"a {kind} checkpoint is imported as {architectures[kind][0]}")
    refuse_unless(config.get("quantization_config") is None, where, "quantization_config",
                  config.get("quantization_config"), "a quantized checkpoint is not imported (use its BF16 weights)")
    return (gpt2_config if kind == "gpt2" else llama_config)(config, where)


def gpt2_config(config, where):
    L = positive_int(config, where, "n_layer", MAX_LAYERS)
    C = positive_int(config, where, "n_embd", MAX_CHANNELS)
    NH = positive_int(config, where, "n_head", MAX_HEADS)
    refuse_unless(C % NH == 0, where, "n_head", NH, f"does not divide n_embd {C}")
    V = positive_int(config, where, "vocab_size", MAX_VOCAB)
    maxT = positive_int(config, where, "n_positions", MAX_SEQ_LEN)
    refuse_unless(V > 1, where, "vocab_size", V, "a model needs at least 2 tokens")
    inner = config_value(config, "n_inner", 4 * C)
    refuse_unless(inner == 4 * C, where, "n_inner", inner, f"the trainers' GPT-2 MLP has 4 n_embd = {4 * C} features")
    act = config_value(config, "activation_function", "gelu_new")
    refuse_unless(act in ("gelu_new", "gelu_pytorch_tanh"), where, "activation_function", act,
                  "the trainers compute GELU's tanh form (gelu_new)")
    eps = config_value(config, "layer_norm_epsilon", 1e-5)
    refuse_unless(np.float32(eps) == np.float32(1e-5), where, "layer_norm_epsilon", eps,
                  "the trainers' LayerNorm computes with 1e-5")
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                      ("add_cross_attention", False), ("tie_word_embeddings", True)):
        value = config_value(config, key, want)
        refuse_unless(value == want, where, key, value, f"the trainers compute GPT-2 with {key} {want}")
    return {"arch": "gpt2", "maxT": maxT, "V": V, "L": L, "NH": NH, "C": C, "tied": True}


def llama_config(config, where):
    L = positive_int(config, where, "num_hidden_layers", MAX_LAYERS)
    C = positive_int(config, where, "hidden_size", MAX_CHANNELS)
    NH = positive_int(config, where, "num_attention_heads", MAX_HEADS)
    KVH = positive_int(config, where, "num_key_value_heads", MAX_HEADS, NH)
    F = positive_int(config, where, "intermediate_size", 4 * MAX_CHANNELS)
    V = positive_int(config, where, "vocab_size", MAX_VOCAB)
    maxT = positive_int(config, where, "max_position_embeddings", MAX_SEQ_LEN)
    refuse_unless(V > 1, where, "vocab_size", V, "a model needs at least 2 tokens")
    refuse_unless(C % NH == 0, where, "num_attention_heads", NH, f"does not divide hidden_size {C}")
    refuse_unless(NH % KVH == 0, where, "num_key_value_heads", KVH, f"does not divide num_attention_heads {NH}")
    head_dim = config_value(config, "head_dim", C // NH)
    refuse_unless(head_dim == C // NH, where, "head_dim", head_dim,
                  f"the trainers' heads have hidden_size / num_attention_heads = {C // NH} features")
    refuse_unless(head_dim % 2 == 0, where, "head_dim", head_dim, "rotary embeddings rotate pairs: must be even")
    for key in ("attention_bias", "mlp_bias"):
        refuse_unless(not config.get(key), where, key, config.get(key), "Llama in the trainers has no biases")
    refuse_unless(config.get("sliding_window") is None, where, "sliding_window", config.get("sliding_window"),
                  "the trainers' attention is causal over the whole sequence")
    act = config_value(config, "hidden_act", "silu")
    refuse_unless(act == "silu", where, "hidden_act", act, "the trainers' SwiGLU gates with silu")
    eps = config_value(config, "rms_norm_eps", 1e-6)
    refuse_unless(np.float32(eps) == LLAMA_NORM_EPS, where, "rms_norm_eps", eps,
                  "the trainers' RMSNorm computes with 1e-5 (Llama 2's and Llama 3's)")
    refuse_unless(llama_header_ffn(C, F) is not None, where, "intermediate_size", F,
                  f"no llm.c Llama header (multiple_of, ffn_dim_multiplier) gives it for hidden_size {C}")
    theta, scaled_rope = rope_settings(config, where)
    tied = bool(config_value(config, "tie_word_embeddings", False))
    return {"arch": "llama", "maxT": maxT, "V": V, "L": L, "NH": NH, "KVH": KVH, "C": C, "F": F,
            "rope_theta": theta, "scaled_rope": scaled_rope, "tied": tied}


# ---------------------------------------------------------------------------------------------------------
# The plan: the model file's slots in file order, each layer's slice as the pieces that fill it back to back.


class Piece:
    """Rows of the model file: a checkpoint tensor (`name`, of HF shape `shape`), or zeros of `shape`
    (name None). heads: a rotated q or k weight of that many heads (its rows reordered per head); transpose: a
    Conv1D weight, written as its transpose."""

    def __init__(self, name, shape, heads=0, transpose=False):
        self.name, self.shape, self.heads, self.transpose = name, tuple(shape), heads, transpose


def gpt2_plan(cfg):
    """[(slot, [pieces of layer 0], [... of layer 1], ...)] for a GPT-2 file; the global tensors have one list."""
    maxT, V, L, C = cfg["maxT"], cfg["V"], cfg["L"], cfg["C"]
    Vp = pad_vocab(V)
    block = {ours: (hf_name, transposed) for hf_name, ours, transposed in GPT2_BLOCK}
    plan = []
    for slot, shape in gpt2_file_slots(maxT, L, C, Vp):
        if slot == "wte":  # the vocabulary, then Vp - V rows of zeros
            plan.append((slot, [[Piece(GPT2_GLOBAL["wte"], (V, C))] + ([Piece(None, (Vp - V, C))] if Vp > V else [])]))
        elif slot in GLOBAL_SLOTS:
            plan.append((slot, [[Piece(GPT2_GLOBAL[slot], shape)]]))
        else:
            hf_name, transposed = block[slot]
            hf_shape = tuple(reversed(shape[1:])) if transposed else shape[1:]
            plan.append((slot, [[Piece(gpt2_block_name(layer, hf_name), hf_shape, transpose=transposed)]
                                for layer in range(L)]))
    return plan


def llama_plan(cfg):
    """As gpt2_plan, for the llama3-branch layout."""
    V, L, C, NH, KVH, F = cfg["V"], cfg["L"], cfg["C"], cfg["NH"], cfg["KVH"], cfg["F"]
    hs = C // NH
    q, k, v = LLAMA_BLOCK["qkvw"]
    up, gate = LLAMA_BLOCK["fc"]
    shapes = {LLAMA_BLOCK["ln1w"][0]: (C,), LLAMA_BLOCK["ln2w"][0]: (C,), q: (NH * hs, C), k: (KVH * hs, C),
              v: (KVH * hs, C), LLAMA_BLOCK["attprojw"][0]: (C, C), up: (F, C), gate: (F, C),
              LLAMA_BLOCK["fcprojw"][0]: (C, F)}
    heads = {q: NH, k: KVH}  # the rotated modules
    plan = []
    for slot, shape in llama3_file_slots(V, L, C, (NH + 2 * KVH) * hs, F):
        per_layer = slot not in GLOBAL_SLOTS
        if slot in LLAMA3_ZERO_SLOTS:
            zeros = Piece(None, shape[1:] if per_layer else shape)
            plan.append((slot, [[zeros] for _ in range(L if per_layer else 1)]))
        elif slot == "lmhead" and cfg["tied"]:  # tie_word_embeddings: the head a copy of the embedding
            plan.append((slot, [[Piece(LLAMA_GLOBAL["wte"], shape)]]))
        elif not per_layer:
            plan.append((slot, [[Piece(LLAMA_GLOBAL[slot], shape)]]))
        else:
            plan.append((slot, [[Piece(llama_block_name(layer, m), shapes[m], heads.get(m, 0))
                                 for m in LLAMA_BLOCK[slot]] for layer in range(L)]))
    return plan


# Buffers some checkpoints hold beside the weights (causal masks, rotary frequencies): recomputed, not read.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


def check_tensors(tensors, plan, cfg, hf_dir):
    """Every tensor the plan reads is in the checkpoint with its shape and a readable dtype, and the checkpoint
    holds no other weights (a bias, an extra layer: a model these trainers would not compute)."""
    wanted = {}
    for _, layers in plan:
        for pieces in layers:
            for p in pieces:
                if p.name is not None:
                    wanted[p.name] = p.shape
    # GPT-2 checkpoints from the hub name the tensors without "transformer."
    if cfg["arch"] == "gpt2" and not any(n.startswith("transformer.") for n in tensors):
        tensors = {"transformer." + n if n != "lm_head.weight" else n: t for n, t in tensors.items()}
    for name, shape in wanted.items():
        if name not in tensors:
            raise ImportRefused(f"{hf_dir}: tensor {name} is missing from the checkpoint")
        t = tensors[name]
        if t.dtype not in DTYPES:
            raise ImportRefused(f"{t.path}: tensor {name} is {t.dtype}; F32, BF16 and F16 are imported")
        if t.shape != shape:
            raise ImportRefused(f"{t.path}: tensor {name} has shape {list(t.shape)}, config.json says {list(shape)}")
    for name, t in tensors.items():
        if name in wanted or name.endswith(IGNORED_SUFFIXES):
            continue
        if name == "lm_head.weight" and (cfg["arch"] == "gpt2" or cfg["tied"]):  # a tied head saved too
            embedding = (GPT2_GLOBAL if cfg["arch"] == "gpt2" else LLAMA_GLOBAL)["wte"]
            wte = tensors[embedding]
            same = t.shape == wte.shape and t.dtype == wte.dtype and all(
                np.array_equal(t.rows(b, e), wte.rows(b, e)) for b, e in row_blocks(t))
            if not same:
                raise ImportRefused(f"{t.path}: lm_head.weight differs from {embedding}, to which config.json ties "
                                    "it (tie_word_embeddings)")
            continue
        raise ImportRefused(f"{t.path}: tensor {name} is not one config.json's {cfg['arch']} model has (a bias, "
                            "an extra layer?): the trainers would not compute it")
    return tensors


def row_blocks(t, multiple=1):
    """[begin, end) blocks of a tensor's rows, each about CHUNK_BYTES and a multiple of `multiple` rows."""
    n = t.shape[0] if len(t.shape) > 1 else 1
    row_bytes = math.prod(t.shape[1:] if len(t.shape) > 1 else t.shape) * DTYPES[t.dtype].itemsize
    step = max(1, CHUNK_BYTES // max(row_bytes, 1) // multiple) * multiple
    return [(b, min(b + step, n)) for b in range(0, n, step)]


# ---------------------------------------------------------------------------------------------------------
# Writing


def file_version(choice, tensors, plan):
    """3 (fp32) or 5 (bf16): --dtype exact keeps BF16 checkpoints BF16, anything else in fp32."""
    if choice != "exact":
        return 3 if choice == "float32" else 5
    dtypes = {tensors[p.name].dtype for _, layers in plan for pieces in layers for p in pieces if p.name}
    return 5 if dtypes == {"BF16"} else 3


def header_bytes(cfg, version):
    """The model file's header: GPT-2's 256 ints, or the llama3 branch's 256 ints and 256 floats (model_file.h's
    model_file_create and llama_file_header)."""
    h = np.zeros(HEADER_INTS, dtype="<i4")
    if cfg["arch"] == "gpt2":
        h[:8] = [MODEL_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], pad_vocab(cfg["V"])]
        return h.tobytes()
    multiple_of, multiplier = llama_header_ffn(cfg["C"], cfg["F"])
    h[:12] = [LLAMA_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["KVH"], cfg["C"], multiple_of,
              cfg["scaled_rope"], 3, 1]  # [10, 11]: the Llama version llm.c's writer records, 3.1
    floats = np.zeros(HEADER_INTS, dtype="<f4")
    floats[:3] = [multiplier, LLAMA_NORM_EPS, cfg["rope_theta"]]
    return h.tobytes() + floats.tobytes()


def converted(rows, dtype, version):
    """rows (of checkpoint dtype `dtype`) as the file's values: float32, or BF16 bit patterns."""
    if version == 3:
        return bf16_to_f32(rows) if dtype == "BF16" else rows.astype("<f4")
    return rows if dtype == "BF16" else bf16_from_f32(rows.astype(np.float32))


class Progress:
    """A line every PROGRESS_SECONDS: bytes written of the total, and the time left at the rate so far."""

    def __init__(self, total):
        self.total, self.done, self.start, self.last = total, 0, time.monotonic(), time.monotonic()

    def add(self, n):
        self.done += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS and self.done < self.total:
            self.last = now
            elapsed = now - self.start
            left = elapsed * (self.total - self.done) / max(self.done, 1)
            print(f"import | {100 * self.done / self.total:3.0f}% | {format_bytes(self.done)} of "
                  f"{format_bytes(self.total)} | {elapsed:.0f} s, {format_seconds(left)} left", flush=True)


def format_bytes(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def format_seconds(s):
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def write_piece(f, t, piece, version, progress):
    """The piece's rows written in the model file's order and values."""
    if t is None:  # zeros
        zeros = np.zeros(math.prod(piece.shape), dtype="<f4" if version == 3 else "<u2")
        f.write(zeros)
        progress.add(zeros.nbytes)
        return
    if piece.transpose:  # a Conv1D weight (in, out) -> ours (out, in): a GPT-2 tensor, at most 4C x C
        blocks = [np.ascontiguousarray(t.rows(0, t.shape[0]).T)]
    else:
        hs = piece.shape[0] // piece.heads if piece.heads else 1
        blocks = (t.rows(b, e) for b, e in row_blocks(t, hs))
    for rows in blocks:
        if piece.heads:  # rows holding whole heads: rotate_half's pairs back to interleaved ones
            rows = interleaved_rows(rows, rows.shape[0] // hs, hs)
        out = np.ascontiguousarray(converted(rows, t.dtype, version))
        f.write(out)  # the array's own buffer: no copy as bytes
        progress.add(out.nbytes)


def write_model(out_path, cfg, tensors, plan, version):
    header = header_bytes(cfg, version)
    count = sum(math.prod(p.shape) for _, layers in plan for pieces in layers for p in pieces)
    total = len(header) + count * (4 if version == 3 else 2)
    parent = os.statvfs(os.path.dirname(os.path.abspath(out_path)))
    if parent.f_bavail * parent.f_frsize < total:
        raise ImportRefused(f"{out_path}: needs {format_bytes(total)}, its filesystem has "
                            f"{format_bytes(parent.f_bavail * parent.f_frsize)} free")
    progress = Progress(total)

    def write(f):
        f.write(header)
        progress.add(len(header))
        for _, layers in plan:
            for pieces in layers:
                for p in pieces:
                    write_piece(f, tensors[p.name] if p.name else None, p, version, progress)

    write_atomically(out_path, write, total)
    return total


def write_atomically(path, write, size):
    """path written as a temporary file beside it (write(f) fills it), flushed to disk, its size checked and
    renamed into place (not over a file that appeared meanwhile); on any failure the temporary file is removed
    and path is not created."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=os.path.dirname(os.path.abspath(path)))
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if os.path.getsize(tmp) != size:
            raise ImportRefused(f"{path}: {os.path.getsize(tmp)} bytes written, {size} expected; not written")
        os.chmod(tmp, 0o644)
        if os.path.lexists(path):
            raise ImportRefused(f"{path}: exists (created while importing); not replaced")
        os.rename(tmp, path)
        tmp = None
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        raise ImportRefused(f"{path}: cannot write: {e.strerror or e}; not written")
    finally:
        if tmp is not None:
            os.unlink(tmp)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # a directory that cannot be fsync'ed still got the rename
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------------


def describe(cfg):
    if cfg["arch"] == "gpt2":
        return f"gpt2 L={cfg['L']} C={cfg['C']} NH={cfg['NH']} V={cfg['V']} maxT={cfg['maxT']}"
    return (f"llama L={cfg['L']} C={cfg['C']} NH={cfg['NH']} KVH={cfg['KVH']} F={cfg['F']} V={cfg['V']} "
            f"maxT={cfg['maxT']} theta={cfg['rope_theta']:g}{' scaled' if cfg['scaled_rope'] else ''}")


def check_output(path, what):
    if os.path.lexists(path):
        raise ImportRefused(f"{path}: {what} exists; remove it or name another file (it is not replaced)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ImportRefused(f"{path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ImportRefused(f"{path}: directory {parent} is not writable")


def import_checkpoint(hf_dir, out_path, dtype="exact", tokenizer_out=None, doc_token=None):
    if not os.path.isdir(hf_dir):
        raise ImportRefused(f"{hf_dir}: not a directory (a Hugging Face checkpoint directory with config.json)")
    check_output(out_path, "OUT_MODEL.bin")
    if tokenizer_out:
        check_output(tokenizer_out, "--tokenizer_out")
    cfg = read_config(hf_dir)
    plan = (gpt2_plan if cfg["arch"] == "gpt2" else llama_plan)(cfg)
    tensors = check_tensors(read_checkpoint(hf_dir), plan, cfg, hf_dir)
    tokenizer_bytes = None
    if tokenizer_out:  # read and checked before anything is written
        tokenizer_bytes, eot, eot_text = llmc_tokenizer_file(hf_dir, cfg["V"], doc_token)
    version = file_version(dtype, tensors, plan)
    start = time.monotonic()
    total = write_model(out_path, cfg, tensors, plan, version)
    print(f"imported {hf_dir} ({describe(cfg)}) -> {out_path}: version {version} "
          f"({'fp32' if version == 3 else 'bf16'}), {format_bytes(total)} in {time.monotonic() - start:.1f} s")
    if cfg.get("tied"):
        print("note: tie_word_embeddings: the head was written as a copy of embed_tokens; training updates the two "
              "apart")
    if tokenizer_out:
        write_atomically(tokenizer_out, lambda f: f.write(tokenizer_bytes), len(tokenizer_bytes))
        print(f"wrote {tokenizer_out}: {cfg['V']} tokens, eot {eot} ({eot_text!r}, the token that starts documents)")


def main(argv=None):
    p = OneLineParser(description="Import a Hugging Face GPT-2 or Llama checkpoint as an llm.c model file.")
    p.add_argument("hf_dir", help="checkpoint directory: config.json, model.safetensors or its sharded index")
    p.add_argument("out", help="the llm.c model file to write (must not exist)")
    p.add_argument("--dtype", choices=["exact", "float32", "bfloat16"], default="exact",
                   help="file values: exact (bf16 when every tensor is BF16, else fp32), float32, bfloat16")
    p.add_argument("--tokenizer_out", help="also write HF_DIR's tokenizer as an llm.c tokenizer file here")
    p.add_argument("--doc_token", help="with --tokenizer_out: the token that starts documents (default: the BOS "
                   "tokenizer_config.json names, else <|endoftext|>)")
    args = p.parse_args(argv)
    if args.doc_token is not None and not args.tokenizer_out:
        die("--doc_token: only with --tokenizer_out (it is the tokenizer file's eot)")
    try:
        import_checkpoint(args.hf_dir, args.out, args.dtype, args.tokenizer_out, args.doc_token)
    except (ImportRefused, TokenizerRefused) as e:
        die(str(e))
    except KeyboardInterrupt:
        die(f"{args.out}: interrupted; nothing written")


if __name__ == "__main__":
    main()
