#!/usr/bin/env bash
# test_export.sh: scripts/export_hf.py (llm.c model file -> Hugging Face GPT-2 or Llama directory), checked against
# the CPU trainer's own float32 logits and against fp8_scaling.h's conversions, and loaded by stock transformers.
# About 15 s, 45 s with transformers; needs python3 with numpy and a C compiler ($CC, default gcc) besides train_cpu.
#   1. test/gpt2_reference.py (numpy GPT-2) on the trained fp32 model file reproduces train_cpu's float32 logits
#      (from --debug_state) to float32 accuracy;
#   2. the BF16 export: names, shapes, dtypes, config.json; its bytes are the round-to-nearest-even BF16 of the
#      fp32 weights (an independent numpy rounding, and fp8_scaling.h's bf16_from_float compiled here); its
#      logits agree with the trainer's within a bound measured from BF16 weight rounding;
#   3. the FP8 export: E4M3 bytes and scales equal an independent numpy quantization with the trainer's rule and
#      fp8_scaling.h's own fp8_compute_scale / fp8_quantize; logits within a bound derived from E4M3's 3
#      mantissa bits; --fp8_margin; a padded vocabulary (V < Vp) and a version 5 (bf16) input file;
#   4. bad inputs (truncated file, wrong magic, short header, bad version, missing file, OUT_DIR a file): one
#      line "error: FILE: ..." on stderr, exit status 1, nothing written;
#   5. Llama (LlamaForCausalLM, test/llama_reference.py: rotate_half rotary embeddings, repeat_kv, RMSNorm,
#      SwiGLU, untied head): the reference on the trainer's file reproduces its float32 logits; the BF16 export
#      of a model whose weights are BF16 already reproduces them to float32 accuracy (so the q/k row reordering
#      from the trainer's interleaved rotary pairs to rotate_half's halves is exact: without it the logits move
#      > 10 x that tolerance, checked); the BF16 and FP8 exports' bytes equal the reference's own conversion
#      (FP8: one scale per trainer GEMM, shared by q/k/v and by up/gate) and fp8_scaling.h's; logits within
#      the bounds of (2) and (3); Llama 3.1's scaled rotary embeddings (use_scaled_rope 1): the export's
#      config.json has transformers' "llama3" rope_scaling, and the reference applying it reproduces the trainer's
#      float32 logits of the BF16 model to float32 accuracy (without it they move > 10 x that tolerance, checked);
#      bad Llama headers (truncated, short, use_scaled_rope 2, KVH not dividing NH); llm.c's own Llama files
#      (test/llmc_llama) in both of its layouts export to the same tensors, the reference's reading of them, and
#      a cut master file, a header of neither layout and a bias that is not zero are refused;
#   6. stock transformers (where torch, transformers and accelerate are importable, else one SKIPPED line; make
#      clients_deps installs them): GPT2LMHeadModel and LlamaForCausalLM on the BF16 exports of BF16-valued models
#      reproduce the trainer's float32 logits to float32 accuracy (Llama 3.1's rope_scaling too); the FP8 exports
#      load through transformers' own fp8 quantization with nothing missing or unexpected, dequantized to
#      exactly the codes times their scales, and their logits and val loss are the trainer's float32 ones of
#      its FP8-weight model (the weights its float8 forward reads) within float32's bounds; with an unknown
#      quant_method (the export's former one) they miss by > 10x; llm.c's own Llama file, exported, gives
#      llm.c's first loss.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_export

need_python_modules test_export numpy

# --- a trained tiny model and the trainer's float32 logits of its first batch -------------------------------
test_data_dir "$tmp/data" text
data=(--train_data "$tmp/data/text_train_*.bin" --val_data "" --seq_len 32 --batch_size 4)
./train_cpu --model_size d2 --vocab 256 --steps 5 --lr 3e-3 --dtype float8 "${data[@]}" --output_dir "$tmp/run" \
    >"$tmp/train.txt" 2>&1 || { cat "$tmp/train.txt"; bad "train_cpu: the 5-step run failed"; finish; }
model="$tmp/run/model_00000005.bin"
./train_cpu --init_from "$model" --dtype float32 --steps 1 "${data[@]}" --output_dir "" --debug_state "$tmp/dbg.bin" \
    >"$tmp/debug.txt" 2>&1 || { cat "$tmp/debug.txt"; bad "train_cpu: the --debug_state run failed"; finish; }

# --- a trained tiny Llama and the trainer's float32 logits --------------------------------------------------------
# 4 query heads on 2 key/value heads, so that which key/value head a query head reads matters. 40 steps at lr
# 1e-2, so that attention depends on position: in a trial, after 5 steps at 3e-3 a missing q/k row reordering
# moved the logits less than rounding the weights to BF16 did (7e-4 against 1.1e-3), after 40 steps at 1e-2
# tens of times more (the check prints both).
./train_cpu --arch llama --model_size d2 --heads 4 --kv_heads 2 --vocab 256 --steps 40 --lr 1e-2 --dtype float8 \
    "${data[@]}" --output_dir "$tmp/lrun" >"$tmp/ltrain.txt" 2>&1 ||
    { cat "$tmp/ltrain.txt"; bad "train_cpu: the 40-step Llama run failed"; finish; }
lmodel="$tmp/lrun/model_00000040.bin"
# the same model rounded to BF16, as a version 5 file: its BF16 export loses nothing
"$PY" - "$lmodel" "$tmp/lv5.bin" <<'EOF2'
import sys
import numpy as np
sys.path.insert(0, "test")
import gpt2_reference as ref
data = open(sys.argv[1], "rb").read()
h = np.frombuffer(data[:2048], dtype="<i4").copy()  # the integer and float headers
h[1] = 5
codes = ref.bf16_round_codes(np.frombuffer(data[2048:], "<f4")).astype("<u2")
open(sys.argv[2], "wb").write(h.tobytes() + codes.tobytes())
EOF2
patch_int() { # FILE OUT INDEX VALUE: OUT = FILE with header int INDEX set to VALUE
    "$PY" - "$@" <<'EOF2'
import sys
d = bytearray(open(sys.argv[1], "rb").read())
i = 4 * int(sys.argv[3])
d[i:i + 4] = int(sys.argv[4]).to_bytes(4, "little")
open(sys.argv[2], "wb").write(d)
EOF2
}
# the BF16 model again with Llama 3.1's scaled rotary embeddings (use_scaled_rope 1), its BF16 export lossless too
patch_int "$tmp/lv5.bin" "$tmp/lrope.bin" 9 1
for m in "$lmodel" "$tmp/lv5.bin"; do
    ./train_cpu --init_from "$m" --dtype float32 --steps 1 "${data[@]}" --output_dir "" \
        --debug_state "$tmp/dbg_$(basename "$m")" >"$tmp/debug.txt" 2>&1 ||
        { cat "$tmp/debug.txt"; bad "train_cpu: the --debug_state run of $m failed"; finish; }
done
# over the model's whole maxT = 256 positions: scaling changes only the pairs of wavelength > 2048 positions
# (here the two of frequency 1e-3 and 3.2e-4), whose angles at t < 32 move by < 0.025 rad, which moved the logits
# only 16 x the float32 tolerance in a trial; at t < 256 eight times as far (125 x; the check prints it)
./train_cpu --init_from "$tmp/lrope.bin" --dtype float32 --steps 1 --train_data "$tmp/data/text_train_*.bin" \
    --val_data "" --seq_len 256 --batch_size 4 --output_dir "" --debug_state "$tmp/dbg_lrope.bin" \
    >"$tmp/debug.txt" 2>&1 ||
    { cat "$tmp/debug.txt"; bad "train_cpu: the --debug_state run of lrope.bin failed"; finish; }

# --- fp8_scaling.h itself, as the oracle of the conversions ---------------------------------------------------
# conv bf16|e4m3 IN OUT: codes of the float32s in IN. conv quant MARGIN IN OUT: the trainer's weight cast of the
# tensor in IN (amax as abs_max, fp8_compute_scale, fp8_quantize): the scale (float32), then the codes.
cat >"$tmp/conv.c" <<'EOF'
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/fp8_scaling.h"
int main(int argc, char **argv) {
    int quant = strcmp(argv[1], "quant") == 0;
    FILE *in = fopen(argv[argc - 2], "rb"), *out = fopen(argv[argc - 1], "wb");
    if (!in || !out) return 2;
    fseek(in, 0, SEEK_END);
    size_t n = (size_t)ftell(in) / 4;
    fseek(in, 0, SEEK_SET);
    float *x = malloc(n * 4 + 4);
    if (fread(x, 4, n, in) != n) return 2;
    float amax = 0.0f, scale = 1.0f;
    if (quant) {
        for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
        scale = fp8_compute_scale(amax, FP8_E4M3, atoi(argv[2]));
        fwrite(&scale, 4, 1, out);
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[1], "bf16") == 0) {
            uint16_t c = bf16_from_float(x[i]);
            fwrite(&c, 2, 1, out);
        } else {
            uint8_t c = quant ? fp8_quantize(x[i], scale, FP8_E4M3) : fp8_from_float(x[i], FP8_E4M3);
            fwrite(&c, 1, 1, out);
        }
    }
    return fclose(out) != 0;
}
EOF
"${CC:-gcc}" -std=c11 -O2 -I"$root" -o "$tmp/conv" "$tmp/conv.c" -lm || { bad "cannot compile the fp8_scaling.h oracle"; finish; }

# --- the exports ----------------------------------------------------------------------------------------------
export_ok() { # what args...
    local what="$1"; shift
    if "$PY" scripts/export_hf.py "$@" >"$tmp/export.txt" 2>&1; then ok "$what"; else bad "$what"; cat "$tmp/export.txt"; fi
}
export_ok "export bf16" "$model" "$tmp/hf_bf16"
export_ok "export fp8" "$model" "$tmp/hf_fp8" --fp8
export_ok "export fp8 --fp8_margin 2" "$model" "$tmp/hf_fp8_m2" --fp8 --fp8_margin 2
cp -r "$tmp/hf_bf16" "$tmp/hf_over"
export_ok "export fp8 into an existing export directory" "$model" "$tmp/hf_over" --fp8
# the same model with V=200 < Vp=256 (header patched; the file keeps Vp rows), and as a version 5 (bf16) file
"$PY" - "$model" "$tmp/v200.bin" "$tmp/v5.bin" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, "test")
import gpt2_reference as ref
data = open(sys.argv[1], "rb").read()
h = np.frombuffer(data[:1024], dtype="<i4").copy()
h[3] = 200
open(sys.argv[2], "wb").write(h.tobytes() + data[1024:])
h = np.frombuffer(data[:1024], dtype="<i4").copy()
h[1] = 5
open(sys.argv[3], "wb").write(h.tobytes() + ref.bf16_round_codes(np.frombuffer(data[1024:], "<f4")).astype("<u2").tobytes())
EOF
export_ok "export a padded vocabulary (V=200, Vp=256)" "$tmp/v200.bin" "$tmp/hf_v200" --fp8
export_ok "export a version 5 (bf16) model file" "$tmp/v5.bin" "$tmp/hf_v5"
export_ok "llama: export bf16" "$lmodel" "$tmp/hf_llama"
export_ok "llama: export fp8" "$lmodel" "$tmp/hf_llama_fp8" --fp8
export_ok "llama: export a version 5 (bf16) model file" "$tmp/lv5.bin" "$tmp/hf_llama_v5"
export_ok "llama: export scaled rotary embeddings (use_scaled_rope 1)" "$tmp/lrope.bin" "$tmp/hf_llama_rope"
# llm.c's own files of one model (test/llmc_llama): master's train_llama3.py layout (bfloat16) and the llama3 branch's
export_ok "llama: export llm.c master's file" test/llmc_llama/master_bf16.bin "$tmp/hf_llmc_master"
export_ok "llama: export llm.c's llama3-branch file" test/llmc_llama/llama3_branch_fp32.bin "$tmp/hf_llmc_branch"

# --- the numerical checks: one line per check, "PASS<tab>what" or "FAIL<tab>what", and "info<tab>..." ---------
report_checks() { # FILE STATUS: the lines of a Python check script (export_checks.py's), and its exit status
    while IFS=$'\t' read -r status what; do
        case "$status" in
            PASS) ok "$what" ;;
            FAIL) bad "$what" ;;
            info) echo "     $what" ;;
            done) ;;
            *) echo "     $status${what:+ $what}" ;;
        esac
    done <"$1"
    if [ "$2" != 0 ] || ! grep -q '^done' "$1"; then
        bad "the numerical checks of $(basename "$1") stopped before their end (exit $2; output above)"
    fi
}
checks_rc=0
"$PY" - "$tmp" "$model" >"$tmp/checks.txt" 2>&1 <<'EOF' || checks_rc=$?
import json, os, sys
import numpy as np
sys.path.insert(0, "test")
sys.path.insert(0, "scripts")
import gpt2_reference as ref
import export_hf
from export_checks import check, debug_state, oracle, rel
import export_checks

tmp, model = sys.argv[1], sys.argv[2]
export_checks.TMP = tmp


tokens, trainer = debug_state("dbg.bin")
B, T, V = trainer.shape

cfg, w32 = ref.load_llmc(model)
tensors = [k for k in w32 if k.startswith("transformer.")]
matmuls = [k for k in tensors if any(k.endswith(m) for m in ref.MATMULS)]
others = [k for k in tensors if k not in matmuls]
ref32 = ref.forward(cfg, w32, tokens, np.float32)
ref64 = ref.forward(cfg, w32, tokens, np.float64)


def logits_with(changed):
    """float64 reference logits with some tensors replaced (the effect of rounding just those)"""
    return ref.forward(cfg, {**w32, **changed}, tokens, np.float64)


# (1) Float32 agreement. Both sides compute in float32 (unit roundoff u = 2^-24 = 6e-8) but sum in other orders
# (OpenBLAS or plain C vs numpy). A dot product of length K then differs by about sqrt(K) u relative (rounding
# errors add like a random walk; K u is the worst case), K <= 4C = 256 here: ~1e-6 per matmul. The logits go
# through 2L+2 = 6 matmul stages plus LayerNorm, attention and GELU, whose errors add in quadrature: a few 1e-6.
# TOL32 = 1e-5 leaves a factor of a few for LayerNorm's division by the row std amplifying them, and is still
# ~100x below the effect of BF16 weights (measured below, and required to be > 10 x TOL32 so that this check
# would catch an export or a reference that quietly rounds).
TOL32 = 1e-5
e32, e64 = rel(ref32, trainer), rel(ref64, trainer)
print(f"info\tfloat32: reference (float32) vs trainer {e32:.2e}, reference (float64) vs trainer {e64:.2e}, "
      f"max |logit| {np.abs(trainer).max():.3f}")
check("(1) numpy reference (float32) reproduces the trainer's float32 logits", lambda: (e32 < TOL32, f"{e32:.2e} < {TOL32}"))
check("(1) numpy reference (float64) reproduces the trainer's float32 logits", lambda: (e64 < TOL32, f"{e64:.2e} < {TOL32}"))

# effects of weight rounding, measured in the reference with its own (independent, by-value) roundings
E_bf16_all = rel(logits_with({k: ref.bf16_round(w32[k]) for k in tensors}), ref64)
E_bf16_mm = rel(logits_with({k: ref.bf16_round(w32[k]) for k in matmuls}), ref64)
E_bf16_other = rel(logits_with({k: ref.bf16_round(w32[k]) for k in others}), ref64)
print(f"info\tBF16 rounding of all weights moves the logits by {E_bf16_all:.2e} (matmul weights only {E_bf16_mm:.2e}, "
      f"the rest only {E_bf16_other:.2e})")
check("(1) the float32 tolerance separates float32 from BF16 weights",
      lambda: (E_bf16_all > 10 * TOL32, f"BF16 effect {E_bf16_all:.2e} > 10 x {TOL32}"))

# expected export names
def expected_names(L):
    names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"]
    for l in range(L):
        names += [f"transformer.h.{l}.{n}" for n, _, _ in ref.BLOCK]
    return names

C, L = cfg["n_embd"], cfg["n_layer"]
shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (cfg["n_positions"], C),
          "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
block_shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,),
                "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
                "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,), "mlp.c_proj.weight": (4 * C, C),
                "mlp.c_proj.bias": (C,)}
for l in range(L):
    shapes.update({f"transformer.h.{l}.{k}": v for k, v in block_shapes.items()})


def check_config(directory, fp8, margin=0, vocab=V):
    c = json.load(open(os.path.join(directory, "config.json")))
    want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": vocab, "n_positions": cfg["n_positions"],
            "n_embd": C, "n_layer": L, "n_head": cfg["n_head"], "n_inner": 4 * C, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    bad = [k for k, v in want.items() if c.get(k) != v]
    q = c.get("quantization_config")
    if fp8:
        # transformers' fp8 quantization, one scale per tensor; GPT-2 dequantized on any device (its Conv1D)
        if q != {**FP8_QUANTIZATION_CONFIG, "dequantize": True}:
            bad.append(f"quantization_config {q}")
        _, meta8 = ref.read_safetensors(os.path.join(directory, "model.safetensors"))
        if meta8.get("fp8_margin") != str(margin):
            bad.append(f"metadata fp8_margin {meta8.get('fp8_margin')}")
    elif q is not None:
        bad.append("quantization_config (should be absent)")
    return not bad, "wrong: " + ", ".join(bad) if bad else "ok"


# what transformers' fp8 quantization (FineGrainedFP8Config) reads: per-tensor scales (no blocks) in
# NAME.weight_scale_inv beside each F8_E4M3 NAME.weight, the LM head left in BF16
FP8_QUANTIZATION_CONFIG = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": None,
                           "fmt": "e4m3", "modules_to_not_convert": ["lm_head"]}


def only_our_files(directory):
    return sorted(os.listdir(directory)) == ["config.json", "model.safetensors"]


# (2) BF16 export
st, meta = ref.read_safetensors(os.path.join(tmp, "hf_bf16", "model.safetensors"))
check("(2) bf16: config.json", lambda: check_config(os.path.join(tmp, "hf_bf16"), False))
check("(2) bf16: directory holds config.json and model.safetensors only", lambda: only_our_files(os.path.join(tmp, "hf_bf16")))
check("(2) bf16: safetensors metadata format pt", lambda: (meta is not None and meta.get("format") == "pt", str(meta)))
check("(2) bf16: tensor names", lambda: (sorted(st) == sorted(expected_names(L)), f"{len(st)} tensors"))
check("(2) bf16: shapes (Conv1D weights transposed, wte without padding rows)",
      lambda: all(st[k][1] == shapes[k] for k in st))
check("(2) bf16: every dtype BF16", lambda: {v[0] for v in st.values()} == {"BF16"})
check("(2) bf16: bytes are the nearest-even BF16 of the fp32 weights (independent numpy rounding)",
      lambda: all(np.array_equal(st[k][2], ref.bf16_round_codes(w32[k])) for k in tensors))
all_f32 = np.concatenate([w32[k].ravel() for k in tensors])
check("(2) bf16: bytes equal fp8_scaling.h's bf16_from_float",
      lambda: np.array_equal(np.concatenate([st[k][2].ravel() for k in tensors]), oracle("bf16", all_f32)))
cfg_b, w_b = ref.load_export(os.path.join(tmp, "hf_bf16"))
e_b = rel(ref.forward(cfg_b, w_b, tokens), trainer)
# Bound: the export differs from the trainer's model only by rounding every weight to BF16 (8 significant bits,
# relative error <= 2^-9 per weight); the reference measured that effect above (E_bf16_all). Twice it, plus the
# float32 tolerance for the two implementations' own rounding, allows for the sampling of one batch.
bound_b = 2 * E_bf16_all + TOL32
print(f"info\tbf16 export vs trainer {e_b:.2e}, bound {bound_b:.2e}")
check("(2) bf16: logits agree with the trainer's within twice the effect of BF16 weight rounding",
      lambda: (e_b <= bound_b, f"{e_b:.2e} <= {bound_b:.2e}"))

# (3) FP8 export
def check_fp8(directory, margin, vocab=V, base=None, wte_rows=V):
    st8, _ = ref.read_safetensors(os.path.join(directory, "model.safetensors"))
    names = expected_names(L) + [f"transformer.h.{l}.{n}_scale_inv" for l in range(L) for n in ref.MATMULS]
    tag = f"fp8 margin {margin}" + (f" V={vocab}" if vocab != V else "")
    check(f"(3) {tag}: config.json", lambda: check_config(directory, True, margin, vocab))
    check(f"(3) {tag}: tensor names", lambda: sorted(st8) == sorted(names))
    def dtypes_shapes():
        for k, (dt, shape, _) in st8.items():
            if k.endswith("_scale_inv"):
                if dt != "F32" or shape != ():
                    return False, k
            elif k in matmuls:
                if dt != "F8_E4M3" or shape != shapes[k]:
                    return False, k
            elif dt != "BF16" or shape != (shapes[k] if k != "transformer.wte.weight" else (wte_rows, C)):
                return False, k
        return True
    check(f"(3) {tag}: dtypes and shapes (block matmul weights F8_E4M3, scales F32 scalars, the rest BF16)", dtypes_shapes)
    def codes_numpy():
        for k in matmuls:
            codes, s = ref.e4m3_weight_quantize(w32[k], margin)
            if not np.array_equal(st8[k][2], codes):
                return False, f"{k}: {int(np.sum(st8[k][2] != codes))} codes differ"
            if st8[k + "_scale_inv"][2][()].view("<u4") != np.float32(np.float32(1.0) / s).view("<u4"):
                return False, f"{k}_scale_inv {st8[k + '_scale_inv'][2][()]!r} is not 1/{s!r}"
        return True
    check(f"(3) {tag}: E4M3 bytes and 1/s equal an independent numpy quantization (exact amax, nearest even)", codes_numpy)
    def codes_oracle():
        for k in matmuls:
            codes, s = oracle("quant", w32[k], margin)
            codes = codes.reshape(w32[k].shape)
            if not np.array_equal(st8[k][2], codes):
                return False, f"{k}: {int(np.sum(st8[k][2] != codes))} codes differ"
            if st8[k + "_scale_inv"][2][()].view("<u4") != np.float32(np.float32(1.0) / s).view("<u4"):
                return False, f"{k}: scale"
        return True
    check(f"(3) {tag}: E4M3 bytes and scales equal fp8_scaling.h (fp8_compute_scale, fp8_quantize)", codes_oracle)
    if base is not None:
        check(f"(3) {tag}: non-matmul tensors identical to the bf16 export",
              lambda: all(np.array_equal(st8[k][2], base[k][2]) for k in base if k not in matmuls))
    return st8


st8 = check_fp8(os.path.join(tmp, "hf_fp8"), 0, base=st)
check_fp8(os.path.join(tmp, "hf_fp8_m2"), 2, base=st)
cfg_8, w_8 = ref.load_export(os.path.join(tmp, "hf_fp8"))
e_8 = rel(ref.forward(cfg_8, w_8, tokens), trainer)
# Bound, from the formats rather than from the export: within a binade E4M3's spacing is 2^(e-3) against
# BF16's 2^(e-7), so rounding a weight to E4M3 moves it 2^4 = 16 times as far as rounding it to BF16 (the same
# error distribution scaled by 16; the per-tensor scale s only moves where binades start, and subnormals, below
# amax/28672, hold a negligible share of a trained tensor with errors below amax/458752). To first order the
# logits respond linearly, so E4M3 matmul weights move them ~16 x E_bf16_mm; the other tensors are BF16
# (E_bf16_other). Twice the sum, plus TOL32, is the bound.
bound_8 = 2 * (16 * E_bf16_mm + E_bf16_other) + TOL32
E_fp8_mm = rel(logits_with({k: ref.e4m3_decode(ref.e4m3_weight_quantize(w32[k])[0]) *
                            (np.float32(1) / ref.e4m3_weight_quantize(w32[k])[1]) for k in matmuls}), ref64)
print(f"info\tfp8 export vs trainer {e_8:.2e}, bound {bound_8:.2e}; E4M3 matmul weights alone {E_fp8_mm:.2e} = "
      f"{E_fp8_mm / E_bf16_mm:.1f} x their BF16 effect (about 2^(7-3) = 16 expected)")
check("(3) fp8: logits agree with the trainer's within the bound from E4M3's 3 mantissa bits",
      lambda: (e_8 <= bound_8, f"{e_8:.2e} <= {bound_8:.2e}"))
check("(3) fp8: export into an existing directory equals a fresh export",
      lambda: only_our_files(os.path.join(tmp, "hf_over")) and
      open(os.path.join(tmp, "hf_over", "model.safetensors"), "rb").read() ==
      open(os.path.join(tmp, "hf_fp8", "model.safetensors"), "rb").read() and
      open(os.path.join(tmp, "hf_over", "config.json")).read() == open(os.path.join(tmp, "hf_fp8", "config.json")).read())

# padded vocabulary: V=200 of Vp=256 rows; wte keeps the first 200 rows, the logits are the first 200 columns
st200 = check_fp8(os.path.join(tmp, "hf_v200"), 0, vocab=200, wte_rows=200)
check("(3) V=200: wte is the first 200 rows of the full export's",
      lambda: np.array_equal(st200["transformer.wte.weight"][2], st["transformer.wte.weight"][2][:200]))
cfg_v, w_v = ref.load_export(os.path.join(tmp, "hf_v200"))
check("(3) V=200: logits are the first 200 of the fp8 export's",
      lambda: (lambda a, b: (a.shape == (B, T, 200) and rel(a, b) < TOL32, f"{rel(a, b):.2e}"))(
          ref.forward(cfg_v, w_v, tokens), ref.forward(cfg_8, w_8, tokens)[..., :200]))

# version 5 input: the bf16 values of the same model export to the same bytes as the fp32 file's BF16 export
st5, meta5 = ref.read_safetensors(os.path.join(tmp, "hf_v5", "model.safetensors"))
check("(2) version 5 input: tensors identical to the BF16 export of the fp32 file",
      lambda: sorted(st5) == sorted(st) and all(st5[k][0] == st[k][0] and np.array_equal(st5[k][2], st[k][2]) for k in st))

# the conversions themselves on the values weights never reach: ties, saturation, subnormals, inf, NaN
def special_values():
    grid = ref.E4M3_VALUES[:0x7F]
    mids = (grid[1:] + grid[:-1]) / 2
    x = np.concatenate([grid, mids, np.nextafter(mids.astype(np.float32), np.float32(0)),
                        np.nextafter(mids.astype(np.float32), np.float32(1e9)), [447, 448, 449, 463.99, 464, 464.01, 500, 1e6,
                        3.4e38, np.inf, np.nan, 0.0, 1e-40, 2.0**-10, 2.0**-11, 3e-39]]).astype(np.float32)
    x = np.concatenate([x, -x])
    rng = np.random.default_rng(1)
    rand = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([x, rand, (rng.standard_normal(1 << 18) * 10.0**rng.uniform(-12, 12, 1 << 18)).astype(np.float32)])
xs = special_values()
check("conversions: export_hf e4m3 equals fp8_scaling.h fp8_from_float (ties, saturation, subnormals, NaN, random bits)",
      lambda: np.array_equal(export_hf.e4m3_from_f32(xs), oracle("e4m3", xs)))
check("conversions: export_hf bf16 equals fp8_scaling.h bf16_from_float",
      lambda: np.array_equal(export_hf.bf16_from_f32(xs), oracle("bf16", xs)))
check("conversions: the reference's by-value E4M3 and BF16 roundings equal fp8_scaling.h",
      lambda: np.array_equal(ref.e4m3_round_codes(xs), oracle("e4m3", xs)) and
      np.array_equal(ref.bf16_round_codes(xs), oracle("bf16", xs)))
# ---------------------------------------------------------------------------------------------------------
# (5) Llama, exported as LlamaForCausalLM and run by test/llama_reference.py with transformers' semantics
import llama_reference as lref

lmodel = os.path.join(tmp, "lrun", "model_00000040.bin")
ltokens, ltrainer = debug_state("dbg_model_00000040.bin")
lcfg, lw32 = lref.load_llmc(lmodel)
lC, lL, lNH, lKVH, lF = (lcfg[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                           "num_key_value_heads", "intermediate_size"))
lhs = lC // lNH
LLAMA_MATMULS = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
lmatmuls = [f"model.layers.{l}.{m}" for l in range(lL) for m in LLAMA_MATMULS]
lothers = [k for k in lw32 if k not in lmatmuls]
lshapes = {"model.embed_tokens.weight": (V, lC), "model.norm.weight": (lC,), "lm_head.weight": (V, lC)}
for l in range(lL):
    a = f"model.layers.{l}."
    lshapes.update({a + "input_layernorm.weight": (lC,), a + "post_attention_layernorm.weight": (lC,),
                    a + "self_attn.q_proj.weight": (lNH * lhs, lC), a + "self_attn.k_proj.weight": (lKVH * lhs, lC),
                    a + "self_attn.v_proj.weight": (lKVH * lhs, lC), a + "self_attn.o_proj.weight": (lC, lC),
                    a + "mlp.gate_proj.weight": (lF, lC), a + "mlp.up_proj.weight": (lF, lC),
                    a + "mlp.down_proj.weight": (lC, lF)})
lref64 = lref.forward(lcfg, lw32, ltokens, np.float64)


def llogits_with(changed):
    return lref.forward(lcfg, {**lw32, **changed}, ltokens, np.float64)


# (5) float32: the argument of (1) holds as it is (dot products of length <= max(C, F) = 192, 2L+2 matmul stages,
# RMSNorm in place of LayerNorm, the rotary rotation exact to a few u): TOL32.
le32, le64 = rel(lref.forward(lcfg, lw32, ltokens), ltrainer), rel(lref64, ltrainer)
print(f"info\tllama float32: reference (float32) vs trainer {le32:.2e}, (float64) {le64:.2e}, "
      f"max |logit| {np.abs(ltrainer).max():.3f}")
check("(5) llama: numpy reference (float32) reproduces the trainer's float32 logits",
      lambda: (le32 < TOL32, f"{le32:.2e} < {TOL32}"))
check("(5) llama: numpy reference (float64) reproduces the trainer's float32 logits",
      lambda: (le64 < TOL32, f"{le64:.2e} < {TOL32}"))
# The negative control: q_proj and k_proj left in the trainer's interleaved row order (rotate_half then pairs
# the wrong features) must miss the float32 tolerance by far, or the exact check below could not see it.
lcfg_n, lw_n = lref.load_llmc(lmodel, permute=False)
le_noperm = rel(lref.forward(lcfg_n, lw_n, ltokens, np.float64), ltrainer)
lE_bf16_all = rel(llogits_with({k: ref.bf16_round(lw32[k]) for k in lw32}), lref64)
lE_bf16_mm = rel(llogits_with({k: ref.bf16_round(lw32[k]) for k in lmatmuls}), lref64)
lE_bf16_other = rel(llogits_with({k: ref.bf16_round(lw32[k]) for k in lothers}), lref64)
print(f"info\tllama: without the q/k row reordering the logits move by {le_noperm:.2e}; BF16 rounding of all weights "
      f"by {lE_bf16_all:.2e} (matmul weights only {lE_bf16_mm:.2e}, the rest only {lE_bf16_other:.2e})")
check("(5) llama: a missing q/k row reordering misses the float32 tolerance by more than 10x",
      lambda: (le_noperm > 10 * TOL32, f"{le_noperm:.2e} > 10 x {TOL32}"))
check("(5) llama: the float32 tolerance separates float32 from BF16 weights",
      lambda: (lE_bf16_all > 10 * TOL32, f"BF16 effect {lE_bf16_all:.2e} > 10 x {TOL32}"))


def check_llama_config(directory, fp8, rope_scaling=None):
    c = json.load(open(os.path.join(directory, "config.json")))
    want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V, "hidden_size": lC,
            "intermediate_size": lF, "num_hidden_layers": lL, "num_attention_heads": lNH,
            "num_key_value_heads": lKVH, "head_dim": lhs, "hidden_act": "silu", "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "rope_scaling": rope_scaling,
            "max_position_embeddings": lcfg["max_position_embeddings"],
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16"}
    bad = [k for k, v in want.items() if c.get(k) != v]
    q = c.get("quantization_config")
    if fp8:
        if q != FP8_QUANTIZATION_CONFIG:
            bad.append(f"quantization_config {q}")
    elif q is not None:
        bad.append("quantization_config (should be absent)")
    return not bad, "wrong: " + ", ".join(bad) if bad else "ok"


# (5) BF16 export. Exactness first: the version 5 file's weights are BF16 values, which the BF16 export holds
# unchanged, and the trainer's logits of that file are float32; so the export's logits must match them to
# TOL32, like (1), and a wrong reordering, head split or name moves them by le_noperm-sized amounts.
lv_tokens, lv_trainer = debug_state("dbg_lv5.bin")
lcfg_v, lw_v = lref.load_export(os.path.join(tmp, "hf_llama_v5"))
le_v = rel(lref.forward(lcfg_v, lw_v, lv_tokens), lv_trainer)
print(f"info\tllama: bf16 export of BF16 weights vs the trainer's float32 logits of them {le_v:.2e}")
check("(5) llama: the BF16 export of a BF16 model reproduces the trainer's float32 logits to float32 accuracy",
      lambda: (le_v < TOL32, f"{le_v:.2e} < {TOL32}"))

# (5) Llama 3.1's scaled rotary embeddings: the same BF16 model with use_scaled_rope 1, its logits over T = 256
# positions. The trainer rescales in turns per 8192 positions (gpt_model.h), the reference as transformers does,
# in wavelengths from config.json's rope_scaling; both in float64, the table rounded to float32 once, so the
# argument of (1) holds again (attention now sums 256 terms: sqrt(256) u = 1e-6): TOL32. The negative control,
# the reference without rope_scaling, must miss it by more than 10x, or this check could not tell the two apart.
LLAMA31_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}
lr_tokens, lr_trainer = debug_state("dbg_lrope.bin")
lcfg_r, lw_r = lref.load_export(os.path.join(tmp, "hf_llama_rope"))
lcfg_rl, lw_rl = lref.load_llmc(os.path.join(tmp, "lrope.bin"))
le_r = rel(lref.forward(lcfg_r, lw_r, lr_tokens, np.float64), lr_trainer)
le_rl = rel(lref.forward(lcfg_rl, lw_rl, lr_tokens, np.float64), lr_trainer)
le_r_unscaled = rel(lref.forward({**lcfg_r, "rope_scaling": None}, lw_r, lr_tokens, np.float64), lr_trainer)
print(f"info\tllama scaled rope (T={lr_tokens.shape[1]}): reference (float64) vs trainer: on the bf16 export "
      f"{le_r:.2e}, on the model file {le_rl:.2e}; without rope_scaling {le_r_unscaled:.2e}")
check("(5) llama scaled rope: config.json has transformers' llama3 rope_scaling",
      lambda: check_llama_config(os.path.join(tmp, "hf_llama_rope"), False, LLAMA31_ROPE_SCALING))
check("(5) llama scaled rope: load_llmc carries use_scaled_rope 1 as that rope_scaling",
      lambda: (lcfg_rl["rope_scaling"] == LLAMA31_ROPE_SCALING, str(lcfg_rl["rope_scaling"])))
check("(5) llama scaled rope: the reference on the BF16 export reproduces the trainer's float32 logits",
      lambda: (le_r < TOL32, f"{le_r:.2e} < {TOL32}"))
check("(5) llama scaled rope: the reference on the model file reproduces the trainer's float32 logits",
      lambda: (le_rl < TOL32, f"{le_rl:.2e} < {TOL32}"))
check("(5) llama scaled rope: without rope_scaling the reference misses the float32 tolerance by more than 10x",
      lambda: (le_r_unscaled > 10 * TOL32, f"{le_r_unscaled:.2e} > 10 x {TOL32}"))


def unknown_rope_type_refused():
    try:
        lref.forward({**lcfg_r, "rope_scaling": {**LLAMA31_ROPE_SCALING, "rope_type": "yarn"}}, lw_r, lr_tokens[:, :2])
    except ValueError as e:
        return True, str(e)
    return False, "computed logits"


check("(5) llama: the reference refuses a rope_scaling it does not implement", unknown_rope_type_refused)
lst, lmeta = ref.read_safetensors(os.path.join(tmp, "hf_llama", "model.safetensors"))
check("(5) llama bf16: config.json", lambda: check_llama_config(os.path.join(tmp, "hf_llama"), False))
check("(5) llama bf16: directory holds config.json and model.safetensors only",
      lambda: only_our_files(os.path.join(tmp, "hf_llama")))
check("(5) llama bf16: tensor names, shapes, every dtype BF16",
      lambda: (sorted(lst) == sorted(lshapes) and all(lst[k][1] == lshapes[k] and lst[k][0] == "BF16" for k in lst),
               f"{len(lst)} tensors"))
check("(5) llama bf16: bytes are the nearest-even BF16 of the reference's own conversion (reordered q/k rows)",
      lambda: all(np.array_equal(lst[k][2], ref.bf16_round_codes(lw32[k])) for k in lw32))
check("(5) llama bf16: bytes equal fp8_scaling.h's bf16_from_float",
      lambda: all(np.array_equal(lst[k][2], oracle("bf16", lw32[k]).reshape(lw32[k].shape)) for k in lw32))
lst_v, _ = ref.read_safetensors(os.path.join(tmp, "hf_llama_v5", "model.safetensors"))
check("(5) llama: version 5 input exports to the same tensors as the fp32 file",
      lambda: sorted(lst_v) == sorted(lst) and all(np.array_equal(lst_v[k][2], lst[k][2]) for k in lst))
lcfg_b, lw_b = lref.load_export(os.path.join(tmp, "hf_llama"))
le_b = rel(lref.forward(lcfg_b, lw_b, ltokens), ltrainer)
lbound_b = 2 * lE_bf16_all + TOL32  # as (2)
print(f"info\tllama bf16 export vs trainer {le_b:.2e}, bound {lbound_b:.2e}")
check("(5) llama bf16: logits agree with the trainer's within twice the effect of BF16 weight rounding",
      lambda: (le_b <= lbound_b, f"{le_b:.2e} <= {lbound_b:.2e}"))


# (5) FP8 export. The trainer quantizes each GEMM's weight with one scale: qkv (q, k and v rows together) and
# fc (up then gate rows, one (2F, C) weight); the reference quantizes those concatenations of its own HF tensors
# (the row reordering moves codes, not values) and cuts them apart.
def llama_gemm_groups(l):
    a = f"model.layers.{l}."
    return [[a + "self_attn.q_proj.weight", a + "self_attn.k_proj.weight", a + "self_attn.v_proj.weight"],
            [a + "self_attn.o_proj.weight"], [a + "mlp.up_proj.weight", a + "mlp.gate_proj.weight"],
            [a + "mlp.down_proj.weight"]]


lgroups = [g for l in range(lL) for g in llama_gemm_groups(l)]
lst8, _ = ref.read_safetensors(os.path.join(tmp, "hf_llama_fp8", "model.safetensors"))


def llama_fp8_codes(quantize):
    """For each group, quantize(concatenated float32 weights) -> (codes, s), compared with the export."""
    for group in lgroups:
        codes, s = quantize(np.concatenate([lw32[k] for k in group]))
        at = 0
        for k in group:
            n = lw32[k].shape[0]
            if not np.array_equal(lst8[k][2], codes[at:at + n]):
                return False, f"{k}: {int(np.sum(lst8[k][2] != codes[at:at + n]))} codes differ"
            if lst8[k + "_scale_inv"][2][()].view("<u4") != np.float32(np.float32(1.0) / s).view("<u4"):
                return False, f"{k}_scale_inv {lst8[k + '_scale_inv'][2][()]!r} is not 1/{s!r}"
            at += n
    return True


check("(5) llama fp8: config.json", lambda: check_llama_config(os.path.join(tmp, "hf_llama_fp8"), True))
check("(5) llama fp8: tensor names",
      lambda: sorted(lst8) == sorted(list(lshapes) + [k + "_scale_inv" for k in lmatmuls]))
check("(5) llama fp8: dtypes and shapes (block matmul weights F8_E4M3, scales F32 scalars, the rest BF16)",
      lambda: all((v[0], v[1]) == (("F32", ()) if k.endswith("_scale_inv") else
                                   ("F8_E4M3" if k in lmatmuls else "BF16", lshapes[k])) for k, v in lst8.items()))
check("(5) llama fp8: E4M3 bytes and 1/s equal an independent numpy quantization, one scale per trainer GEMM",
      lambda: llama_fp8_codes(lambda w: ref.e4m3_weight_quantize(w, 0)))
check("(5) llama fp8: E4M3 bytes and scales equal fp8_scaling.h (fp8_compute_scale, fp8_quantize)",
      lambda: llama_fp8_codes(lambda w: (lambda c, s: (c.reshape(w.shape), s))(*oracle("quant", w, 0))))
check("(5) llama fp8: non-matmul tensors identical to the bf16 export",
      lambda: all(np.array_equal(lst8[k][2], lst[k][2]) for k in lothers))
lcfg_8, lw_8 = lref.load_export(os.path.join(tmp, "hf_llama_fp8"))
le_8 = rel(lref.forward(lcfg_8, lw_8, ltokens), ltrainer)
lbound_8 = 2 * (16 * lE_bf16_mm + lE_bf16_other) + TOL32  # as (3)
print(f"info\tllama fp8 export vs trainer {le_8:.2e}, bound {lbound_8:.2e}")
check("(5) llama fp8: logits agree with the trainer's within the bound from E4M3's 3 mantissa bits",
      lambda: (le_8 <= lbound_8, f"{le_8:.2e} <= {lbound_8:.2e}"))

# (5) llm.c's own Llama files: both of its layouts export to the same tensors, the reference's own conversion of
# the branch's file (whose values are BF16 already, so the BF16 export holds them exactly)
mst, _ = ref.read_safetensors(os.path.join(tmp, "hf_llmc_master", "model.safetensors"))
bst, _ = ref.read_safetensors(os.path.join(tmp, "hf_llmc_branch", "model.safetensors"))
_, lw_llmc = lref.load_llmc("test/llmc_llama/llama3_branch_fp32.bin")
check("(5) llm.c's master and llama3-branch files export to the same tensors",
      lambda: sorted(mst) == sorted(bst) and all(mst[k][:2] == bst[k][:2] and np.array_equal(mst[k][2], bst[k][2])
                                                 for k in mst))
check("(5) llm.c's llama3-branch file exports to the reference's reading of it, exactly",
      lambda: sorted(bst) == sorted(lw_llmc) and
      all(np.array_equal(ref.bf16_decode(bst[k][2]), lw_llmc[k]) for k in lw_llmc))
print("done\t")
EOF
report_checks "$tmp/checks.txt" "$checks_rc"

# --- (4) bad inputs: one line naming the file, exit status 1, no output directory ----------------------------
size=$(wc -c <"$model")
head -c $((size - 100)) "$model" >"$tmp/truncated.bin"
head -c 1000 "$model" >"$tmp/short.bin"
"$PY" -c 'import sys; d = bytearray(open(sys.argv[1], "rb").read()); d[0:4] = (20240520).to_bytes(4, "little"); open(sys.argv[2], "wb").write(d)' \
    "$model" "$tmp/magic.bin"
"$PY" -c 'import sys; d = bytearray(open(sys.argv[1], "rb").read()); d[4:8] = (4).to_bytes(4, "little"); open(sys.argv[2], "wb").write(d)' \
    "$model" "$tmp/version.bin"
touch "$tmp/a_file"
refused() { # what file out_dir pattern
    local what="$1" file="$2" out="$3" pattern="$4" rc=0 lines
    "$PY" scripts/export_hf.py "$file" "$out" --fp8 >"$tmp/bad.out" 2>"$tmp/bad.err" || rc=$?
    lines=$(wc -l <"$tmp/bad.err")
    if [ "$rc" = 1 ] && [ "$lines" = 1 ] && [ ! -s "$tmp/bad.out" ] && grep -q "^error: .*$pattern" "$tmp/bad.err" &&
        { [ -f "$out" ] || [ ! -e "$out" ]; } && [ -z "$(find "$tmp" -maxdepth 1 -name '.*tmp-*')" ]; then
        ok "(4) $what: $(cat "$tmp/bad.err")"
    else
        bad "(4) $what: exit $rc, $lines stderr lines, wanted 1 line matching 'error: ...$pattern'"
        cat "$tmp/bad.out" "$tmp/bad.err"
    fi
}
refused "truncated model file" "$tmp/truncated.bin" "$tmp/out_bad" "truncated.bin: size .* does not match its header"
refused "wrong magic" "$tmp/magic.bin" "$tmp/out_bad" "magic.bin: not an llm.c model file (magic 20240520"
refused "shorter than a header" "$tmp/short.bin" "$tmp/out_bad" "short.bin: too short"
refused "unsupported version" "$tmp/version.bin" "$tmp/out_bad" "version.bin: unsupported model file version 4"
refused "missing file" "$tmp/missing.bin" "$tmp/out_bad" "missing.bin: cannot open"
refused "OUT_DIR is a file" "$model" "$tmp/a_file" "a_file: exists and is not a directory"
# Llama headers: the two-part header cut short, use_scaled_rope 2 (a flag, 0 or 1), KVH = 3 not dividing NH = 4
lsize=$(wc -c <"$lmodel")
head -c $((lsize - 100)) "$lmodel" >"$tmp/ltruncated.bin"
head -c 1500 "$lmodel" >"$tmp/lshort.bin"
patch_int "$lmodel" "$tmp/lrope2.bin" 9 2
patch_int "$lmodel" "$tmp/lkvh.bin" 6 3
refused "llama: truncated model file" "$tmp/ltruncated.bin" "$tmp/out_bad" "ltruncated.bin: size .* does not match"
refused "llama: shorter than its two headers" "$tmp/lshort.bin" "$tmp/out_bad" "lshort.bin: too short for a Llama"
refused "llama: use_scaled_rope neither 0 nor 1" "$tmp/lrope2.bin" "$tmp/out_bad" "lrope2.bin: use_scaled_rope 2 "
refused "llama: KVH not dividing NH" "$tmp/lkvh.bin" "$tmp/out_bad" "lkvh.bin: header describes an invalid Llama model"
# llm.c's layouts: master's cut by one value (no SwiGLU width fits), the branch's with a header slot past its
# version set or a bias that is not zero (qkvb of layer 1; L=2, C=32, V=128, QKV=64)
"$PY" - "$tmp" <<'EOF2'
import struct, sys
master = open("test/llmc_llama/master_bf16.bin", "rb").read()
branch = open("test/llmc_llama/llama3_branch_fp32.bin", "rb").read()
open(sys.argv[1] + "/lmaster_cut.bin", "wb").write(master[:-2])
open(sys.argv[1] + "/llayout.bin", "wb").write(branch[:48] + struct.pack("<i", 5) + branch[52:])
qkvb = 2048 + 4 * (2 * 128 * 32 + 2 * 2 * 32 + 2 * 64 * 32 + 64 + 3)
open(sys.argv[1] + "/lbias.bin", "wb").write(branch[:qkvb] + struct.pack("<f", 0.5) + branch[qkvb + 4:])
EOF2
refused "llama: llm.c master's file cut" "$tmp/lmaster_cut.bin" "$tmp/out_bad" "lmaster_cut.bin: size fits no SwiGLU width"
refused "llama: a header of neither llm.c layout" "$tmp/llayout.bin" "$tmp/out_bad" "llayout.bin: a Llama header of neither"
refused "llama: a bias that is not zero" "$tmp/lbias.bin" "$tmp/out_bad" "lbias.bin: qkvb has a value that is not 0"

# --- (6) stock transformers on the exports (needs torch, transformers and accelerate: make clients_deps) --------
if ! "$PY" -c "import torch, transformers, accelerate" 2>/dev/null; then
    echo "SKIPPED (6) the transformers checks: torch, transformers or accelerate is not importable by $PY" \
        "(make clients_deps installs them into build/python/)"
    finish
    exit
fi
trainer_ok() { # what args...: a train_cpu run that must succeed
    local what="$1"; shift
    ./train_cpu "$@" >"$tmp/run.txt" 2>&1 || { cat "$tmp/run.txt"; bad "train_cpu: $what failed"; }
}
# the trainer's FP8-weight models: the weights its float8 forward reads, every GEMM weight the values its FP8 GEMM
# multiplies and the rest their BF16 copies (export_checks.py)
"$PY" - "$tmp" "$model" "$lmodel" <<'EOF2'
import sys
sys.path.insert(0, "test")
import export_checks, gpt2_reference as ref, llama_reference as lref
tmp, model, lmodel = sys.argv[1:4]
export_checks.TMP = tmp
export_checks.fp8_weight_model(model, tmp + "/dq.bin", ref.gemm_weight_slices(model), 1024, ref.e4m3_decode,
                               ref.bf16_decode)
export_checks.fp8_weight_model(lmodel, tmp + "/ldq.bin", lref.gemm_weight_slices(lmodel), 2048, ref.e4m3_decode,
                               ref.bf16_decode)
EOF2
val=(--train_data "$tmp/data/text_train_*.bin" --val_data "$tmp/data/text_val_*.bin" --val_batches 4 --seq_len 32
     --batch_size 4)
trainer_ok "the float32 logits of the GPT-2 version 5 file" --init_from "$tmp/v5.bin" --dtype float32 --steps 1 \
    "${data[@]}" --output_dir "" --debug_state "$tmp/dbg_v5.bin"
for m in dq ldq; do # float32 logits of the first batch and (after a step at lr 0, the weights unchanged) val loss
    trainer_ok "float32 on $m.bin" --init_from "$tmp/$m.bin" --dtype float32 --steps 1 --lr 0 "${val[@]}" \
        --output_dir "" --debug_state "$tmp/dbg_$m.bin" --log_file "$tmp/$m.jsonl"
done
for m in "$model" "$lmodel"; do # the trainer's own float8 evaluation (E4M3 activations too)
    trainer_ok "--eval_only on $m" --init_from "$m" --eval_only 1 "${val[@]}" --output_dir "" \
        --log_file "$tmp/eval_$(basename "$(dirname "$m")").jsonl"
done
hf_rc=0
HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error "$PY" - "$tmp" >"$tmp/hf_checks.txt" 2>&1 <<'EOF2' || hf_rc=$?
import json, os, shutil, sys
import numpy as np
import torch, transformers, accelerate
sys.path.insert(0, "test")
import export_checks, gpt2_reference as ref
from export_checks import check, debug_state, rel

tmp = sys.argv[1]
export_checks.TMP = tmp
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)
print(f"info\ttorch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}")
TOL32 = 1e-5  # the float32 tolerance of (1): two float32 computations in other orders


def load(directory):
    """transformers' model of an export directory in float32 (FP8 weights dequantized into it), and the keys
    its loading reported missing, unexpected or mismatched."""
    model, info = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                                    output_loading_info=True)
    return model.eval(), {k: v for k, v in info.items() if v and k != "error_msgs" or k == "error_msgs" and v}


def logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(np.asarray(tokens, dtype=np.int64))).logits.float().numpy()


def val_loss(model, batches=4, B=4, T=32):
    """transformers' mean loss over the val batches the trainer reads (dataloader.h: batch i is tokens
    [i BT, (i+1) BT] of the first shard, targets shifted by one), and the largest |logit| it saw."""
    tokens = np.fromfile(os.path.join(tmp, "data", "text_val_000000.bin"), "<u2", offset=1024).astype(np.int64)
    losses, largest = [], 0.0
    for i in range(batches):
        chunk = tokens[i * B * T:(i + 1) * B * T + 1]
        z = logits(model, chunk[:-1].reshape(B, T))
        largest = max(largest, float(np.abs(z).max()))
        losses.append(float(torch.nn.functional.cross_entropy(torch.tensor(z).reshape(B * T, -1),
                                                              torch.tensor(chunk[1:]))))
    return float(np.mean(losses)), largest


def jsonl(name, kind, key):
    return [json.loads(l)[key] for l in open(os.path.join(tmp, name)) if f'"type":"{kind}"' in l][-1]


# (6) BF16 exports of models whose weights are BF16 already, against the trainer's float32 logits of them: the
# argument of (1), TOL32, for GPT2LMHeadModel and LlamaForCausalLM (Llama 3.1's rope_scaling at T=256 too)
for what, directory, state in [("GPT-2", "hf_v5", "dbg_v5.bin"), ("Llama", "hf_llama_v5", "dbg_lv5.bin"),
                               ("Llama 3.1 scaled rope, T=256", "hf_llama_rope", "dbg_lrope.bin")]:
    tokens, trainer = debug_state(state)
    model, problems = load(os.path.join(tmp, directory))
    e = rel(logits(model, tokens), trainer)
    check(f"(6) {what}: transformers' {type(model).__name__} on the BF16 export reproduces the trainer's float32 "
          "logits", lambda: (e < TOL32 and not problems, f"{e:.2e} < {TOL32}; loading: {problems or 'clean'}"))

# (6) FP8 exports: transformers dequantizes them into the trainer's FP8-weight model (every GEMM weight the
# values its FP8 GEMMs multiply, float32 otherwise): its weights are the export's codes times their scales, bit
# for bit (decoded here independently), and its logits and val loss are the trainer's float32 ones of that model.
# Bounds: logits as (1), TOL32; the loss, a mean of log-softmax terms each moved by at most twice the largest
# logit error, which by (1) is within TOL32 of the largest |logit|: 2 TOL32 max|z|.
for what, directory, dq in [("GPT-2", "hf_fp8", "dq"), ("Llama", "hf_llama_fp8", "ldq")]:
    model, problems = load(os.path.join(tmp, directory))
    _, exported = ref.load_export(os.path.join(tmp, directory))
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    fp8_names = [k for k in exported if k + "_scale_inv" in ref.read_safetensors(
        os.path.join(tmp, directory, "model.safetensors"))[0]]
    check(f"(6) {what} fp8: transformers loads the export with nothing missing, unexpected or mismatched",
          lambda: (not problems, str(problems or "clean")))
    check(f"(6) {what} fp8: transformers' {len(fp8_names)} linear weights are the E4M3 codes times weight_scale_inv",
          lambda: all(state[k].dtype == np.float32 and np.array_equal(state[k], exported[k]) for k in fp8_names))
    tokens, trainer = debug_state(f"dbg_{dq}.bin")
    e = rel(logits(model, tokens), trainer)
    check(f"(6) {what} fp8: transformers' logits are the trainer's float32 logits of its FP8-weight model",
          lambda: (e < TOL32, f"{e:.2e} < {TOL32}"))
    hf_loss, largest = val_loss(model)
    ours = jsonl(f"{dq}.jsonl", "val", "val_loss")
    bound = 2 * TOL32 * largest
    check(f"(6) {what} fp8: transformers' val loss is the trainer's float32 val loss of its FP8-weight model",
          lambda: (abs(hf_loss - ours) <= bound, f"{hf_loss:.7f} vs {ours:.7f}, bound {bound:.1e}"))
    fp8_eval = jsonl(f"eval_{'run' if dq == 'dq' else 'lrun'}.jsonl", "eval_only", "fp8_val_loss")
    print(f"info\t{what} fp8: the trainer's --eval_only float8 val loss (its activations E4M3 too) {fp8_eval:.6f}, "
          f"{hf_loss - fp8_eval:+.2e} from transformers'")
    # the negative control: the export's former quantization_config, which transformers does not know
    bad_dir = os.path.join(tmp, directory + "_unknown_quant")
    shutil.copytree(os.path.join(tmp, directory), bad_dir)
    config = json.load(open(os.path.join(bad_dir, "config.json")))
    config["quantization_config"] = {"quant_method": "fp8gpt_per_tensor"}
    json.dump(config, open(os.path.join(bad_dir, "config.json"), "w"))
    try:
        e_bad, how = rel(logits(load(bad_dir)[0], tokens), trainer), "loaded"
    except Exception as error:
        e_bad, how = float("inf"), f"refused: {type(error).__name__}"
    check(f"(6) {what} fp8, negative control: with an unknown quant_method transformers misses the trainer's "
          "logits by more than 10x", lambda: (e_bad > 10 * TOL32, f"{e_bad:.2e} ({how})"))

# (6) llm.c's own Llama file (master's layout) through the BF16 export: transformers' loss on the batch llm.c
# evaluated is llm.c's first loss, within test_llmc_llama.sh's 1e-5 (both float32 on the same BF16 values)
reference = {l.split()[0]: float(l.split()[1]) for l in open("test/llmc_llama/reference.txt") if l[0] != "#"}
batch = np.fromfile("test/llmc_llama/batch_train_000000.bin", "<u2", offset=1024).astype(np.int64)
B, T = int(reference["B"]), int(reference["T"])
model, problems = load(os.path.join(tmp, "hf_llmc_master"))
z = logits(model, batch[:-1].reshape(B, T))
loss = float(torch.nn.functional.cross_entropy(torch.tensor(z).reshape(B * T, -1), torch.tensor(batch[1:])))
check("(6) llm.c master's file, exported: transformers' loss is llm.c's first loss",
      lambda: (abs(loss - reference["loss_master"]) <= 1e-5 and not problems,
               f"{loss!r} vs {reference['loss_master']!r}, bound 1e-5"))
print("done\t")
EOF2
report_checks "$tmp/hf_checks.txt" "$hf_rc"
finish
