#!/usr/bin/env python3
"""What test_import.sh runs in Python: the Hugging Face checkpoints and tokenizers scripts/import_hf.py is checked
on, made by their real producers (transformers' GPT2LMHeadModel and LlamaForCausalLM with save_pretrained,
sharded, in BF16; tokenizers' byte-level BPE and sentencepiece's BPE, saved by transformers), transformers'
float32 logits and loss on tokens its tokenizer gave, and the checks of what the import wrote.

    import_checks.py build TMP TEXT        TMP/hf_NAME for the MODELS, TMP/tokens_NAME.bin (an llm.c shard of
                                           B*T+1 tokens) and TMP/hf_NAME.npz (transformers' logits and loss)
    import_checks.py refusals TMP          TMP/bad_* checkpoints of what the import must refuse; prints
                                           "name<TAB>directory<TAB>what the error must name" per line
    import_checks.py controls TMP          TMP/*_planted.bin: imported files with a mapping bug planted
    import_checks.py llama2_70b TMP        TMP/llama2_70b_shape.bin: the header and size of Llama-2-70b-hf's import
    import_checks.py check TMP             the checks, as export_checks.py's PASS/FAIL/info lines, then "done"

Needs numpy; build also torch, transformers, tokenizers, sentencepiece and protobuf (make clients_deps).
"""
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import debug_state  # noqa: E402
import export_checks as xc  # noqa: E402
import gpt2_reference as ref  # noqa: E402
import llama_reference as lref  # noqa: E402

B, T = 4, 64
VOCAB = 400  # each tokenizer's, before its special tokens
# The three configurations, each with its tokenizer. hs = 32 (the CUDA trainer's attention kernels' minimum);
# Llama 3.1 with 4 query heads over 2 key/value heads, rope_theta 500000 and Llama 3.1's rope scaling, and a
# vocabulary padded 6 tokens beyond its tokenizer's. maxT 256: the positions' rotations matter within T = 64.
MODELS = {
    "gpt2": dict(arch="gpt2", tokenizer="gpt2", C=64, L=2, NH=2, maxT=256),
    "llama2": dict(arch="llama", tokenizer="sentencepiece", C=64, L=2, NH=2, KVH=2, F=160, maxT=256, theta=10000.0),
    "llama31": dict(arch="llama", tokenizer="llama3", C=128, L=2, NH=4, KVH=2, F=384, maxT=256, theta=500000.0,
                    scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}, extra_vocab=6),
}
# Text the tokenizers must give back byte for byte: ASCII, accents, a dash, CJK and an emoji (byte fallback)
SAMPLE = "First Citizen:\nBefore we proceed any further, hear me speak.\n\n  naïve café — ✓ 日本語 🙂 end"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# ---------------------------------------------------------------------------------------------------------
# build


def byte_level_tokenizer(directory, lines, specials, bos, eos, split_pattern=None):
    """A byte-level BPE (GPT-2's kind; with Llama 3's split pattern, Llama 3's), saved by transformers."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_pattern is None)
    tok.pre_tokenizer = byte_level if split_pattern is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split_pattern), behavior="isolated"), byte_level])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos).save_pretrained(directory)


def sentencepiece_tokenizer(directory, text_path):
    """A sentencepiece BPE with byte fallback as Llama 2's (identity normalization, a dummy prefix), its
    tokenizer.model converted to tokenizer.json by transformers, as Llama 2's hub directories hold both."""
    import sentencepiece
    from transformers import AutoTokenizer
    os.makedirs(directory)
    sentencepiece.SentencePieceTrainer.train(
        input=text_path, model_prefix=os.path.join(directory, "tokenizer"), vocab_size=VOCAB, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, input_sentence_size=20000,
        shuffle_input_sentence=False, num_threads=1, minloglevel=2)  # the first lines, one thread: the same model
    os.remove(os.path.join(directory, "tokenizer.vocab"))
    json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
              open(os.path.join(directory, "tokenizer_config.json"), "w"))
    AutoTokenizer.from_pretrained(directory).save_pretrained(directory)


def randomized(model):
    """Weights of a trained model's scale, so that every mapping matters: each matrix N(0, 1/fan_in) (attention
    then sharp and position-dependent, logits of order 1), norm weights 1 + N(0, 0.2^2), biases N(0, 0.1^2)."""
    import torch
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                fan_in = p.shape[0] if "transformer.h." in name else p.shape[1]  # GPT-2's Conv1D is (in, out)
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
    return model


def build_model(name, spec, V):
    import transformers
    if spec["arch"] == "gpt2":
        config = transformers.GPT2Config(vocab_size=V, n_embd=spec["C"], n_layer=spec["L"], n_head=spec["NH"],
                                         n_positions=spec["maxT"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return randomized(transformers.GPT2LMHeadModel(config))
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=spec["C"], intermediate_size=spec["F"], num_hidden_layers=spec["L"],
        num_attention_heads=spec["NH"], num_key_value_heads=spec["KVH"], max_position_embeddings=spec["maxT"],
        rms_norm_eps=1e-5, rope_theta=spec["theta"], rope_scaling=spec.get("scaling"), tie_word_embeddings=False)
    return randomized(transformers.LlamaForCausalLM(config))


def write_shard(path, tokens):
    """An llm.c token shard (uint16: magic 20240520, version 1)."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    open(path, "wb").write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def hub_form(config):
    """Llama 3.1's config.json as the hub publishes it (rope_theta and rope_scaling at the top), from transformers'
    newer form (both in rope_parameters)."""
    config = dict(config)
    params = dict(config.pop("rope_parameters"))
    config["rope_theta"] = params.pop("rope_theta")
    config["rope_scaling"] = params
    return config


def build(tmp, text_path):
    import torch
    import transformers
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    text = open(text_path, encoding="utf-8").read()
    lines = text.splitlines()
    byte_level_tokenizer(f"{tmp}/tok_gpt2", lines, ["<|endoftext|>"], "<|endoftext|>", "<|endoftext|>")
    byte_level_tokenizer(f"{tmp}/tok_llama3", lines, ["<|begin_of_text|>", "<|end_of_text|>"], "<|begin_of_text|>",
                         "<|end_of_text|>", LLAMA3_PATTERN)
    sentencepiece_tokenizer(f"{tmp}/tok_sentencepiece", text_path)
    for name, spec in MODELS.items():
        directory = f"{tmp}/hf_{name}"
        tokenizer_dir = f"{tmp}/tok_{spec['tokenizer']}"
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
        V = len(tokenizer) + spec.get("extra_vocab", 0)
        model = build_model(name, spec, V).to(torch.bfloat16)
        model.save_pretrained(directory, max_shard_size="100KB")  # sharded: several files and an index
        shutil.copytree(tokenizer_dir, directory, dirs_exist_ok=True)
        # the tokens: the document token, then the text as the tokenizer encodes it
        doc = tokenizer.convert_tokens_to_ids(tokenizer.bos_token)
        ids = [doc] + tokenizer(text[:20000], add_special_tokens=False).input_ids
        tokens = np.array(ids[:B * T + 1], dtype=np.int64)
        write_shard(f"{tmp}/tokens_{name}.bin", tokens)
        # transformers' float32 logits and loss of that batch (the BF16 weights exactly, as float32)
        model32 = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        x, y = torch.tensor(tokens[:-1].reshape(B, T)), torch.tensor(tokens[1:].reshape(B, T))
        with torch.no_grad():
            logits = model32(x).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), y.reshape(-1))
        np.savez(f"{tmp}/hf_{name}.npz", logits=logits.numpy(), loss=np.float32(loss.item()), inputs=x.numpy())
    # Llama 3.1's config in the hub's form, and Llama 2's weights as F32 (one file) and F16, as transformers
    # saves them
    hub = f"{tmp}/hf_llama31_hub"
    shutil.copytree(f"{tmp}/hf_llama31", hub)
    config = json.load(open(f"{hub}/config.json"))
    json.dump(hub_form(config), open(f"{hub}/config.json", "w"), indent=2)
    model = transformers.AutoModelForCausalLM.from_pretrained(f"{tmp}/hf_llama2", dtype=torch.float32)
    model.save_pretrained(f"{tmp}/hf_llama2_f32")
    model.to(torch.float16).save_pretrained(f"{tmp}/hf_llama2_f16", max_shard_size="100KB")
    # Llama 2's configuration with tied embeddings (no lm_head.weight saved), its logits on Llama 2's tokens
    config = json.load(open(f"{tmp}/hf_llama2/config.json"))
    config = transformers.LlamaConfig(**{**config, "tie_word_embeddings": True})
    tied = randomized(transformers.LlamaForCausalLM(config)).to(torch.bfloat16)
    tied.save_pretrained(f"{tmp}/hf_llama2_tied", max_shard_size="100KB")
    tokens = np.fromfile(f"{tmp}/tokens_llama2.bin", dtype="<u2", offset=1024).astype(np.int64)
    model32 = transformers.AutoModelForCausalLM.from_pretrained(f"{tmp}/hf_llama2_tied", dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model32(torch.tensor(tokens[:-1].reshape(B, T))).logits.float()
    np.savez(f"{tmp}/hf_llama2_tied.npz", logits=logits.numpy())
    hub_gpt2(tmp)


def hub_gpt2(tmp):
    """TMP/hf_gpt2_hub: the GPT-2 checkpoint as the hub's openai-community/gpt2 names it (no "transformer."
    prefix), in one model.safetensors with the tied head saved too (lm_head.weight, equal to wte)."""
    import export_hf
    directory = f"{tmp}/hf_gpt2_hub"
    os.makedirs(directory)
    shutil.copy(f"{tmp}/hf_gpt2/config.json", directory)
    tensors = shard_tensors(f"{tmp}/hf_gpt2")
    values = [(name.removeprefix("transformer."), "BF16", ref.bf16_decode(raw))
              for name, (_, _, raw) in tensors.items()]
    values.append(("lm_head.weight", "BF16", ref.bf16_decode(tensors["transformer.wte.weight"][2])))
    with open(f"{directory}/model.safetensors", "wb") as f:
        export_hf.write_safetensors(f, values, {"format": "pt"})


# ---------------------------------------------------------------------------------------------------------
# refusals: checkpoints the import must refuse, each naming what it must name


def variant(tmp, base, name, config_patch=None):
    """TMP/bad_NAME: TMP/hf_BASE's files (copied) with config.json updated by config_patch (a key set to None
    is removed)."""
    directory = f"{tmp}/bad_{name}"
    shutil.copytree(f"{tmp}/hf_{base}", directory)
    if config_patch:
        config = json.load(open(f"{directory}/config.json"))
        for key, value in config_patch.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        json.dump(config, open(f"{directory}/config.json", "w"), indent=2)
    return directory


def index_of(directory):
    return json.load(open(f"{directory}/model.safetensors.index.json"))


def refusals(tmp):
    llama31_rope = json.load(open(f"{tmp}/hf_llama31/config.json"))["rope_parameters"]
    cases = [  # (name, base, config patch, what the error line must name)
        ("model_type", "gpt2", {"model_type": "gpt_neo"}, "config.json: model_type: 'gpt_neo'"),
        ("architectures", "llama2", {"architectures": ["LlamaForSequenceClassification"]},
         "config.json: architectures"),
        ("attention_bias", "llama2", {"attention_bias": True}, "config.json: attention_bias"),
        ("mlp_bias", "llama2", {"mlp_bias": True}, "config.json: mlp_bias"),
        ("vocab_size", "llama2", {"vocab_size": 2**24 + 1}, "config.json: vocab_size"),
        ("sliding_window", "llama2", {"sliding_window": 4096}, "config.json: sliding_window"),
        ("rope_linear", "llama31", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}},
         "config.json: rope_parameters"),
        ("rope_llama32", "llama31", {"rope_parameters": {**llama31_rope, "factor": 32.0}},
         "config.json: rope_parameters"),
        ("rope_hub_dynamic", "llama31_hub", {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
         "config.json: rope_scaling"),
        ("rms_norm_eps", "llama2", {"rms_norm_eps": 1e-6}, "config.json: rms_norm_eps"),
        ("head_dim", "llama2", {"head_dim": 64}, "config.json: head_dim"),
        ("hidden_act", "llama2", {"hidden_act": "gelu"}, "config.json: hidden_act"),
        ("kv_heads", "llama31", {"num_key_value_heads": 3}, "config.json: num_key_value_heads"),
        ("max_positions", "llama2", {"max_position_embeddings": 2**21}, "config.json: max_position_embeddings"),
        ("quantized", "llama2", {"quantization_config": {"quant_method": "fp8"}}, "config.json: quantization_config"),
        ("activation", "gpt2", {"activation_function": "relu"}, "config.json: activation_function"),
        ("n_inner", "gpt2", {"n_inner": 128}, "config.json: n_inner"),
        ("untied_gpt2", "gpt2", {"tie_word_embeddings": False}, "config.json: tie_word_embeddings"),
        ("layer_idx_scaling", "gpt2", {"scale_attn_by_inverse_layer_idx": True},
         "config.json: scale_attn_by_inverse_layer_idx"),
        ("shape", "llama2", {"intermediate_size": 192}, "has shape"),
        ("tied_head_differs", "llama2", {"tie_word_embeddings": True}, "lm_head.weight differs"),
    ]
    for name, base, patch, pattern in cases:
        print(f"{name}\t{variant(tmp, base, name, patch)}\t{pattern}")
    # the weights: a tensor missing from the index, a bias the config does not have, an F8_E4M3 tensor, a shard cut
    directory = variant(tmp, "llama2", "missing")
    index = index_of(directory)
    del index["weight_map"]["model.layers.1.mlp.down_proj.weight"]
    json.dump(index, open(f"{directory}/model.safetensors.index.json", "w"))
    print(f"missing\t{directory}\ttensor model.layers.1.mlp.down_proj.weight is missing")
    sys.path.insert(0, "scripts")
    import export_hf
    for name, tensor, dtype, pattern in [("bias", "model.layers.0.self_attn.q_proj.bias", "BF16", "is not one"),
                                         ("dtype", "model.layers.0.mlp.up_proj.weight", "F8_E4M3", "is F8_E4M3")]:
        directory = variant(tmp, "llama2", name)
        index = index_of(directory)
        shape = (64,) if name == "bias" else (160, 64)
        with open(f"{directory}/extra.safetensors", "wb") as f:
            export_hf.write_safetensors(f, [(tensor, dtype, np.zeros(shape, dtype=np.float32 if dtype == "BF16"
                                                                      else np.uint8))], {"format": "pt"})
        index["weight_map"][tensor] = "extra.safetensors"
        json.dump(index, open(f"{directory}/model.safetensors.index.json", "w"))
        print(f"{name}\t{directory}\t{pattern}")
    directory = variant(tmp, "llama2", "cut")
    shard = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))[-1]
    data = open(f"{directory}/{shard}", "rb").read()
    open(f"{directory}/{shard}", "wb").write(data[:-10])
    print(f"cut\t{directory}\t{shard}: tensor")
    directory = variant(tmp, "llama2", "no_weights")
    for f in os.listdir(directory):
        if "safetensors" in f:
            os.remove(f"{directory}/{f}")
    print(f"no_weights\t{directory}\tno model.safetensors or model.safetensors.index.json")


# ---------------------------------------------------------------------------------------------------------
# LLaMA-2 70B's shape: meta-llama/Llama-2-70b-hf's config.json as published, the model file its import writes
# (header and size; sparse: its 138 GB of values are zeros but for a few, which the trainers read as a model)

LLAMA2_70B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 8192, "initializer_range": 0.02, "intermediate_size": 28672, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000}


def llama2_70b(tmp):
    import import_hf
    cfg = import_hf.llama_config(LLAMA2_70B_CONFIG, "Llama-2-70b-hf/config.json")
    count = sum(math.prod(p.shape) for _, layers in import_hf.llama_plan(cfg) for pieces in layers for p in pieces)
    header = import_hf.header_bytes(cfg, 5)
    with open(f"{tmp}/llama2_70b_shape.bin", "wb") as f:
        f.write(header + np.arange(1, 1025, dtype="<u2").tobytes())  # a few values: not a constant model
        f.truncate(len(header) + 2 * count)



def file_values(path):
    """(header bytes, values as float32 or uint16 BF16 codes, dtype) of an llm.c model file."""
    data = open(path, "rb").read()
    h = np.frombuffer(data[:1024], dtype="<i4")
    header = 2048 if h[0] == 20240803 else 1024
    dtype = "<f4" if h[1] == 3 else "<u2"
    return data[:header], np.frombuffer(data, dtype=dtype, offset=header).copy()


def controls(tmp):
    # Llama 3.1 without the q/k row reordering: each head's rows in transformers' rotate_half order
    header, values = file_values(f"{tmp}/llama31.bin")
    h = np.frombuffer(header[:1024], dtype="<i4")
    L, NH, KVH, C = int(h[4]), int(h[5]), int(h[6]), int(h[7])
    hs = C // NH
    for at, _ in ref.slices_of(lref.llmc_layout(f"{tmp}/llama31.bin")[2], L, ["qkvw"]):
        qk = values[at:at + (NH + KVH) * hs * C].reshape((NH + KVH) * hs, C)
        qk[:] = qk[lref.rotate_half_order(NH + KVH, hs)]
    open(f"{tmp}/llama31_no_qk_order_planted.bin", "wb").write(header + values.tobytes())
    # Llama 3.1 read as unscaled rotary embeddings (use_scaled_rope 0, header int 9)
    unscaled = bytearray(open(f"{tmp}/llama31.bin", "rb").read())
    unscaled[36:40] = struct.pack("<i", 0)
    open(f"{tmp}/llama31_unscaled_planted.bin", "wb").write(unscaled)
    # GPT-2 with its attention projection not transposed (the Conv1D weight as it is stored)
    header, values = file_values(f"{tmp}/gpt2.bin")
    h = np.frombuffer(header, dtype="<i4")
    C = int(h[6])
    for at, n in ref.slices_of(ref.llmc_layout(h), int(h[4]), ["attprojw"]):
        w = values[at:at + n].reshape(C, C)
        w[:] = w.T.copy()
    open(f"{tmp}/gpt2_no_transpose_planted.bin", "wb").write(header + values.tobytes())


# ---------------------------------------------------------------------------------------------------------
# check

# Float32 agreement (test_export.sh's argument): both sides compute in float32 (u = 2^-24) but sum in other orders.
# A dot product of length K then differs by about sqrt(K) u relative; K <= max(C, F, T, V) <= 512 here, so about
# 1.4e-6 per matmul, attention sum or softmax, and the logits pass 2L + 3 = 7 such stages, whose errors add in
# quadrature: a few 1e-6. TOL32 = 1e-5 on the logits' relative L2 error leaves a factor of a few for the norms'
# division by the row's scale amplifying them. The loss, a mean of logsumexp(z) - z_target over N = B T positions,
# moves at most twice the largest logit error, taken as TOL32 of the largest |logit|, plus the float32 mean's own
# rounding, N u |loss| at worst.
TOL32 = 1e-5


def tokenizer_table(path):
    """(V, eot, [bytes of each token]) of an llm.c tokenizer file."""
    data = open(path, "rb").read()
    magic, version, V, eot = struct.unpack("<4I", data[:16])
    assert (magic, version) == (20240328, 2), path
    table, at = [], 1024
    for _ in range(V):
        n = data[at]
        table.append(data[at + 1:at + 1 + n])
        at += 1 + n
    assert at == len(data), path
    return V, eot, table


def shard_tensors(directory):
    """{name: (dtype, shape, raw array)} of all of a checkpoint directory's safetensors files."""
    out = {}
    for f in sorted(os.listdir(directory)):
        if f.endswith(".safetensors"):
            out.update(ref.read_safetensors(os.path.join(directory, f))[0])
    return out


def check(tmp):
    from transformers import AutoTokenizer
    xc.TMP = tmp
    hf = {name: np.load(f"{tmp}/hf_{name}.npz") for name in MODELS}

    # (1) the imported models' float32 logits and loss in train_cpu are transformers'
    for name in MODELS:
        tokens, ours = xc.debug_state(f"dbg_{name}.bin")
        e, hf_loss = xc.rel(ours, hf[name]["logits"]), float(hf[name]["loss"])
        loss = debug_state.read(f"{tmp}/dbg_{name}.bin").loss
        bound = 2 * TOL32 * float(np.abs(hf[name]["logits"]).max()) + B * T * 2.0**-24 * abs(hf_loss)
        xc.check(f"(1) {name}: train_cpu's batch is the tokens transformers read",
                 lambda: np.array_equal(tokens, hf[name]["inputs"]))
        xc.check(f"(1) {name}: train_cpu's float32 logits are transformers' (relative L2)",
                 lambda: (e < TOL32, f"{e:.2e} < {TOL32}"))
        xc.check(f"(1) {name}: train_cpu's float32 loss is transformers'",
                 lambda: (abs(loss - hf_loss) <= bound,
                          f"{loss:.7f} vs {hf_loss:.7f}, |diff| {abs(loss - hf_loss):.1e} <= {bound:.1e}"))

    # (1) a tied Llama's head, written as a copy of its embedding, computes what transformers' tied head does
    _, ours = xc.debug_state("dbg_llama2_tied.bin")
    e = xc.rel(ours, np.load(f"{tmp}/hf_llama2_tied.npz")["logits"])
    xc.check("(1) llama2 with tie_word_embeddings (no lm_head.weight): train_cpu's float32 logits are transformers'",
             lambda: (e < TOL32, f"{e:.2e} < {TOL32}"))

    # (2) the negative controls: a mapping bug planted in the imported file moves the logits far past TOL32
    for planted, base, what in [("llama31_no_qk_order", "llama31", "q/k rows in transformers' rotate_half order"),
                                ("llama31_unscaled", "llama31", "Llama 3.1's rope scaling dropped"),
                                ("gpt2_no_transpose", "gpt2", "attention projection not transposed")]:
        _, bad = xc.debug_state(f"dbg_{planted}_planted.bin")
        e = xc.rel(bad, hf[base]["logits"])
        xc.check(f"(2) planted bug, {what}: its logits miss transformers' by more than 10 x TOL32",
                 lambda: (e > 10 * TOL32, f"{e:.2e} > {10 * TOL32:.0e}"))

    # (3) the file's dtype: exact keeps BF16 bits; F32 and F16 checkpoints are read exactly
    def values(path):
        header, v = file_values(path)
        return header, (ref.bf16_decode(v) if v.dtype == np.uint16 else v)
    h_bf16, v_bf16 = values(f"{tmp}/llama2.bin")
    h_f32, v_f32 = values(f"{tmp}/llama2_as_fp32.bin")
    xc.check("(3) BF16 checkpoint, --dtype exact: a version 5 file; --dtype float32: version 3, the same values",
             lambda: h_bf16[4] == 5 and h_f32[4] == 3 and np.array_equal(v_bf16, v_f32))
    xc.check("(3) F32 checkpoint (one model.safetensors), --dtype exact: the --dtype float32 file of the BF16 one",
             lambda: open(f"{tmp}/llama2_f32.bin", "rb").read() == open(f"{tmp}/llama2_as_fp32.bin", "rb").read())
    xc.check("(3) F32 checkpoint, --dtype bfloat16: the BF16 checkpoint's file (BF16 values round to themselves)",
             lambda: open(f"{tmp}/llama2_f32_as_bf16.bin", "rb").read() == open(f"{tmp}/llama2.bin", "rb").read())
    _, v_f16 = values(f"{tmp}/llama2_f16.bin")
    # transformers' F16 copy of the BF16 weights rounds each to nearest even, as numpy's float16 does
    xc.check("(3) F16 checkpoint, --dtype exact: version 3 holding the F16 values exactly",
             lambda: v_f16.dtype == np.float32 and np.array_equal(v_f16, v_bf16.astype(np.float16).astype(np.float32)))

    # (4) import then export (scripts/export_hf.py) gives back the checkpoint's tensors, bit for bit
    for name in MODELS:
        original, exported = shard_tensors(f"{tmp}/hf_{name}"), shard_tensors(f"{tmp}/export_{name}")
        same = sorted(original) == sorted(exported) and all(
            original[k][0] == exported[k][0] and original[k][1] == exported[k][1] and
            np.array_equal(original[k][2], exported[k][2]) for k in original)
        xc.check(f"(4) {name}: import then export gives back the checkpoint's {len(original)} tensors, bit for bit",
                 lambda: (same, f"names {sorted(set(original) ^ set(exported))}" if not same else ""))

    # (5) the llm.c tokenizer files: the model's vocabulary, the document token, the text of every encoding
    for name, spec in MODELS.items():
        tok = AutoTokenizer.from_pretrained(f"{tmp}/hf_{name}")
        V, eot, table = tokenizer_table(f"{tmp}/{name}_tokenizer.bin")
        text = b"".join(table[i] for i in tok(SAMPLE, add_special_tokens=False).input_ids)
        want = (b" " if spec["tokenizer"] == "sentencepiece" else b"") + SAMPLE.encode()  # sentencepiece's prefix
        n = len(tok)
        xc.check(f"(5) {name}: the tokenizer file has the model's {V} tokens, eot its BOS {tok.bos_token!r}",
                 lambda: V == n + spec.get("extra_vocab", 0) and eot == tok.convert_tokens_to_ids(tok.bos_token))
        xc.check(f"(5) {name}: the tokens of an encoding concatenate to its text (accents, CJK, an emoji)",
                 lambda: (text == want, repr(text[:80])))
        xc.check(f"(5) {name}: ids past the tokenizer's read <|unused_ID|>",
                 lambda: all(table[i] == f"<|unused_{i}|>".encode() for i in range(n, V)))

    # (6) the export's tokenizer files: transformers' AutoTokenizer loads them and encodes as the original
    texts = [SAMPLE, open(f"{tmp}/text.txt", encoding="utf-8").read()[:3000]]
    for name, source in [("gpt2", "hf_gpt2"), ("llama2", "hf_llama2"), ("llama31", "hf_llama31"),
                         ("gpt2_bare", "hf_gpt2")]:
        original, exported = AutoTokenizer.from_pretrained(f"{tmp}/{source}"), \
            AutoTokenizer.from_pretrained(f"{tmp}/export_{name}")
        config = json.load(open(f"{tmp}/export_{name}/config.json"))
        xc.check(f"(6) {name}: AutoTokenizer on the export encodes as the original",
                 lambda: all(original(t).input_ids == exported(t).input_ids for t in texts))
        xc.check(f"(6) {name}: config.json's bos_token_id and eos_token_id are the tokenizer's",
                 lambda: (config["bos_token_id"], config["eos_token_id"]) ==
                 (exported.bos_token_id, exported.eos_token_id) != (None, None))
    print("done\t")


if __name__ == "__main__":
    command, tmp = sys.argv[1], sys.argv[2]
    {"build": lambda: build(tmp, sys.argv[3]), "refusals": lambda: refusals(tmp), "controls": lambda: controls(tmp),
     "llama2_70b": lambda: llama2_70b(tmp), "check": lambda: check(tmp)}[command]()
