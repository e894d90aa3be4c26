#!/usr/bin/env bash
# test_train.sh: the CPU trainer learns, and its reduced-precision modes train as well as float32, in the
# architecture ARCH (gpt2, the default, or llama: make test_train runs both).
#
# Byte-level tinyshakespeare (vocab 256). A d2 model (L=2, C=64; Llama: NH=2 sharing KVH=1, F=192, the
# same checks and arguments), B=16, T=64, 300 steps, lr 3e-3 with 30
# warmup steps and cosine decay to 0.1x, shuffled batches. Runs: float32 with seeds 1, 2, 3; with seed 1
# bfloat16, float8 --fp8_recipe delayed, float8 --fp8_recipe current. Final validation loss of each from
# its --log_file (JSON lines, type "val"), on the same 20 validation batches for every run.
# Checks:
#   - every run: the first step's loss is ln(256) to within 0.25 (a near-uniform initial model), every
#     step is finite and none was skipped by the NaN/Inf guard;
#   - every float32 final val loss is below the unigram entropy of the training split by more than 0.5
#     nats (see below);
#   - each reduced-precision final val loss is within max(3 * seed_spread, FLOOR) of the seed-1 float32
#     value, seed_spread the sample standard deviation of the three float32 finals: reduced precision may
#     perturb training as much as changing the seed does, no more.
# Writes test/build/dtype_table.md (llama: dtype_table_llama.md) and prints it. Needs ./train_cpu.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
ARCH=${ARCH:-gpt2}
test_tmpdir TMP "test_train_$ARCH"

[ -x ./train_cpu ] || make train_cpu >/dev/null

# ---------------------------------------------------------------------------------------------------
# data
# Without $DATA this test generates its own text rather than common.sh's generated_text: the learning and
# agreement checks below are argued for English (Zipf-distributed words, punctuation, a vocabulary of ~150
# words), and this text keeps those statistics, so the thresholds mean the same on it as on tinyshakespeare.
english_like_text() { # FILE
    "$PY" - "$1" <<'EOF'
import random, sys
r = random.Random(7)
words = ("the of and to a in that is was he for it with as his on be at by i this had not are but from or "
         "have an they which one you were her all she there would their we him been has when who will more no "
         "if out so said what up its about into than them can only other new some could time these two may "
         "then do first any my now such like our over man me even most made after also did many before must "
         "through back years where much your way well down should because each just those people how too "
         "little state good very make world still own see men work long get here between both life being "
         "under never day same another know while last might us great old year off come since against go came "
         "right used take three king queen lord duke sweet love death night").split()
weights = [1.0 / (k + 1) for k in range(len(words))]
out = []
for line in range(30000):
    n = r.randint(3, 12)
    s = " ".join(r.choices(words, weights, k=n))
    out.append(s[0].upper() + s[1:] + r.choice([".", ",", ";", "!", "?", ":"]))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
EOF
}
test_data_dir "$TMP/data" text english_like_text
TRAIN=$TMP/data/text_train_000000.bin
VAL=$TMP/data/text_val_000000.bin

# unigram entropy H1 and conditional bigram entropy H2 (nats) of the training split
read -r H1 H2 < <("$PY" - "$TRAIN" <<'EOF'
import collections, math, sys
data = open(sys.argv[1], "rb").read()[1024:]
toks = [data[i] | (data[i + 1] << 8) for i in range(0, len(data), 2)]
n = len(toks)
uni = collections.Counter(toks)
h1 = -sum(c / n * math.log(c / n) for c in uni.values())
bi = collections.Counter(zip(toks, toks[1:]))
first = collections.Counter(toks[:-1])
h2 = -sum(c / (n - 1) * math.log(c / first[a]) for (a, _), c in bi.items())
print(f"{h1:.6f} {h2:.6f}")
EOF
)
echo "training split: unigram entropy $H1 nats, bigram conditional entropy $H2 nats"

# ---------------------------------------------------------------------------------------------------
# runs
STEPS=300
COMMON=(--arch "$ARCH" --model_size d2 --vocab 256 --seq_len 64 --batch_size 16 --steps "$STEPS" --warmup_steps 30 --lr 3e-3
        --lr_schedule cosine --final_lr_frac 0.1 --shuffle 1 --val_every 0 --val_batches 20 --ckpt_every 0
        --output_dir "" --train_data "$TRAIN" --val_data "$VAL")
RUNS=("f32_s1:--dtype float32 --seed 1" "f32_s2:--dtype float32 --seed 2" "f32_s3:--dtype float32 --seed 3"
      "bf16_s1:--dtype bfloat16 --seed 1" "fp8d_s1:--dtype float8 --fp8_recipe delayed --seed 1"
      "fp8c_s1:--dtype float8 --fp8_recipe current --seed 1")
# One thread per run, two runs at a time: the tiny model gains little from a second thread, and OpenMP's
# spinning barriers slow a 2-thread run many times over when the 2 cores are shared with anything else.
# Every run here uses the same thread settings, so no comparison mixes thread counts.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} # when train_cpu links OpenBLAS
JOBS=${JOBS:-2}
train_one() { # NAME FLAGS...: trains, writes NAME.out, NAME.jsonl, NAME.rc and NAME.secs
    local name=$1 start rc=0
    shift
    start=$(date +%s.%N)
    ./train_cpu "${COMMON[@]}" "$@" --log_file "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1 || rc=$?
    echo "$rc" >"$TMP/$name.rc"
    echo "$(date +%s.%N) - $start" | bc >"$TMP/$name.secs"
}
for run in "${RUNS[@]}"; do
    read -r -a flags <<<"${run#*:}"
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
    train_one "${run%%:*}" "${flags[@]}" &
done
wait

declare -A FINAL
for run in "${RUNS[@]}"; do
    name=${run%%:*}
    if [ "$(cat "$TMP/$name.rc")" != 0 ]; then
        bad "$name: train_cpu failed: $(tail -n 3 "$TMP/$name.out")"
        FINAL[$name]=nan
        continue
    fi
    # first loss, finite and unskipped steps, final val loss
    read -r first nsteps nonfinite skipped final < <("$PY" - "$TMP/$name.jsonl" <<'EOF'
import json, math, sys
steps, vals = [], []
for line in open(sys.argv[1]):
    r = json.loads(line)
    (steps if r["type"] == "step" else vals if r["type"] == "val" else []).append(r)
nonfinite = sum(not math.isfinite(r["loss"]) for r in steps)
skipped = sum(r["skipped"] for r in steps)
print(steps[0]["loss"] if steps else "nan", len(steps), nonfinite, skipped, vals[-1]["val_loss"] if vals else "nan")
EOF
)
    FINAL[$name]=$final
    printf '%-8s %5.1f s  first loss %s  final val loss %s\n' "$name" "$(cat "$TMP/$name.secs")" "$first" "$final"
    if [ "$nsteps" -eq "$STEPS" ] && [ "$nonfinite" -eq 0 ] && [ "$skipped" -eq 0 ]; then ok; else
        bad "$name: $nsteps step records, $nonfinite non-finite losses, $skipped skipped steps"
    fi
    # A near-uniform start: logits z = lnf . wte (Llama: . lmhead) with wte ~ N(0, 0.02^2) and unit-variance
    # (Llama: unit-RMS) lnf rows over C=64 have std s = 0.02*8 = 0.16, so the loss is ln(256) + s^2/2 (= 0.013) - mean(z_target). Positions
    # with the same byte share their z, so mean(z_target) has std s*sqrt(sum f_b^2) over byte frequencies f_b
    # (sum f^2 ~ 0.065 for English text): ~0.04. 0.25 is more than 5 of those; an init scale 3x too large
    # would add s^2/2 ~ 0.12 more and a broken init far more.
    if "$PY" -c "import math,sys; sys.exit(abs($first - math.log(256)) >= 0.25)"; then ok; else
        bad "$name: first loss $first is not ln(256) = 5.545 +- 0.25"
    fi
done

# ---------------------------------------------------------------------------------------------------
# checks
# Learning: a model that ignores context cannot beat the unigram entropy H1 on held-out text; the previous
# byte alone is worth H1 - H2 nats (~0.86 on tinyshakespeare), and a GPT with 64 bytes of context does
# better still. Beating H1 by 0.5 therefore requires the model to use context (attention, positions, the
# backward through all of them); a trainer that only learned byte frequencies sits at ~H1.
for name in f32_s1 f32_s2 f32_s3; do
    v=${FINAL[$name]}
    if "$PY" -c "import sys; sys.exit(not ($v < $H1 - 0.5))"; then ok; else
        bad "$name: final val loss $v is not below unigram entropy $H1 - 0.5"
    fi
done

# Agreement. The seed spread says how far training noise moves the final loss; FLOOR = 0.03 nats is the
# resolution of the validation estimate itself, for the case where three seeds happen to agree closely
# (the sample std of 3 values, 2 degrees of freedom, falls below 0.3 sigma with probability
# 1 - exp(-0.09) = 9%). Validation uses 20 batches of 16 x 64 = 20,480 tokens. Per-token losses of a byte
# model spread with a standard deviation of ~1.5 nats; if two models' per-token losses were uncorrelated
# (the worst case), the difference of their means over n tokens would have std 1.5 * sqrt(2/n), and with
# neighbouring tokens of a sequence counted as correlated (n ~ 20,480 / 4 = 5,120 independent tokens) that
# is 0.03. Differences below it are not something this validation set can resolve.
FLOOR=0.03
read -r SPREAD TOL < <("$PY" -c "
import statistics
v = [${FINAL[f32_s1]}, ${FINAL[f32_s2]}, ${FINAL[f32_s3]}]
s = statistics.stdev(v)
print(f'{s:.6f} {max(3 * s, $FLOOR):.6f}')")
echo "float32 seed spread (sample std of 3 seeds): $SPREAD nats; tolerance max(3*spread, $FLOOR) = $TOL"
REF=${FINAL[f32_s1]}
for name in bf16_s1 fp8d_s1 fp8c_s1; do
    v=${FINAL[$name]}
    if "$PY" -c "import sys; sys.exit(not (abs($v - $REF) <= $TOL))"; then ok; else
        bad "$name: final val loss $v differs from float32 seed 1 ($REF) by more than $TOL"
    fi
done

mkdir -p test/build
table=test/build/dtype_table$([ "$ARCH" = gpt2 ] || echo "_$ARCH").md
{
    echo "| dtype | final val loss (nats) | minus float32 seed 1 |"
    echo "|---|---|---|"
    for row in "float32:f32_s1" "bfloat16:bf16_s1" "float8 delayed:fp8d_s1" "float8 current:fp8c_s1"; do
        label=${row%%:*}
        name=${row#*:}
        printf '| %s | %.4f | %+.4f |\n' "$label" "${FINAL[$name]}" "$("$PY" -c "print(${FINAL[$name]} - $REF)")"
    done
    echo
    printf 'float32 seeds 1, 2, 3: %.4f, %.4f, %.4f; sample std (seed spread) %.4f nats; tolerance %.4f.\n' \
        "${FINAL[f32_s1]}" "${FINAL[f32_s2]}" "${FINAL[f32_s3]}" "$SPREAD" "$TOL"
    printf 'Unigram entropy of the training split %.4f nats (bigram conditional %.4f).\n' "$H1" "$H2"
    echo "Model $ARCH d2 (L=2, C=64), byte vocab, B=16, T=64, $STEPS steps, lr 3e-3 cosine, val on 20 batches of 16x64."
} >"$table"
cat "$table"

finish
