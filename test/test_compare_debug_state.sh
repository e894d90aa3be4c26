#!/usr/bin/env bash
# test_compare_debug_state.sh: the GPU test's comparator, checked on the CPU.
#  - a run against itself passes --exact (the CPU trainer is deterministic);
#  - the plain-C-GEMM build of train_cpu sums in another order than OpenBLAS, which is exactly how the GPU
#    differs from the CPU reference: it must pass the toleranced comparison in bfloat16 and float8
#    (this exercises the tolerance argument of compare_debug_state.c on real data);
#  - gradients off by 5%, or logits of another model, must fail;
#  - --rounding_sites 2 (the GPU's fast attention): scales the bounds, so a float8 candidate, whose E4M3 and
#    E5M2 roundings are 16-32x bfloat16's, is still caught against a bfloat16 reference; a factor out of
#    range is refused.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
test_tmpdir tmp test_compare_debug_state
test_data_dir "$tmp/data" text
model=(--model_size d2 --channels 128 --heads 4 --vocab 256 --seq_len 64 --batch_size 8 --steps 6 --lr 1e-3
       --train_data "$tmp/data/text_train_*.bin" --val_data "" --output_dir "")
expect() { # expected-status description command...
    local want="$1" what="$2"; shift 2
    set +e; "$@" >"$tmp/out.txt" 2>&1; local got=$?; set -e
    if { [ "$want" = pass ] && [ $got = 0 ]; } || { [ "$want" = fail ] && [ $got = 1 ]; }; then
        ok "$what"
    else
        bad "$what (exit $got)"; cat "$tmp/out.txt"
    fi
}
compare=./test/build/compare_debug_state
./train_cpu "${model[@]}" --dtype float32 --debug_state "$tmp/f32.bin" >/dev/null
for run in bfloat16:delayed float8:delayed float8:current float8:blockwise float8:mxfp8; do
    dtype="${run%%:*}" recipe="${run#*:}" name="${run/:/_}"
    ./train_cpu "${model[@]}" --dtype "$dtype" --fp8_recipe "$recipe" --debug_state "$tmp/$name.bin" >/dev/null
    ./train_cpu "${model[@]}" --dtype "$dtype" --fp8_recipe "$recipe" --debug_state "$tmp/${name}_again.bin" >/dev/null
    ./test/build/train_cpu_noblas "${model[@]}" --dtype "$dtype" --fp8_recipe "$recipe" \
        --debug_state "$tmp/${name}_noblas.bin" >/dev/null
    expect pass "$name: a rerun is bitwise identical" $compare --exact "$tmp/$name.bin" "$tmp/${name}_again.bin"
    expect pass "$name: another summation order is within tolerance" \
        $compare "$tmp/${name}_noblas.bin" "$tmp/$name.bin" "$tmp/f32.bin"
done
# gradients scaled by 1.05: every tensor moves by 5%, more than the bfloat16 rounding moves it
python3 - "$tmp/bfloat16_delayed.bin" "$tmp/scaled.bin" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
h = struct.unpack("<256i", data[:1024])
B, T, Vp, steps = h[2], h[3], h[4], h[5]
start = 1024 + 8 * B * T + 4 * (B * T * Vp + 1)
end = len(data) - 4 * steps
grads = struct.unpack(f"<{(end - start) // 4}f", data[start:end])
data[start:end] = struct.pack(f"<{len(grads)}f", *(g * 1.05 for g in grads))
open(sys.argv[2], "wb").write(data)
PY
expect fail "gradients off by 5% are caught" $compare "$tmp/scaled.bin" "$tmp/bfloat16_delayed.bin" "$tmp/f32.bin"
expect pass "--rounding_sites 2 passes what the plain bound passes" \
    $compare --rounding_sites 2 "$tmp/bfloat16_delayed_noblas.bin" "$tmp/bfloat16_delayed.bin" "$tmp/f32.bin"
expect fail "--rounding_sites 2 still catches float8 against a bfloat16 reference" \
    $compare --rounding_sites 2 "$tmp/float8_delayed.bin" "$tmp/bfloat16_delayed.bin" "$tmp/f32.bin"
expect fail "--rounding_sites 0.5 is refused" \
    $compare --rounding_sites 0.5 "$tmp/bfloat16_delayed_noblas.bin" "$tmp/bfloat16_delayed.bin" "$tmp/f32.bin"
expect fail "another seed's run is caught" $compare --exact "$tmp/bfloat16_delayed.bin" "$tmp/float8_delayed.bin"
./train_cpu "${model[@]}" --dtype bfloat16 --seed 7 --debug_state "$tmp/seed7.bin" >/dev/null
expect fail "a differently initialised model is caught" $compare "$tmp/seed7.bin" "$tmp/bfloat16_delayed.bin" "$tmp/f32.bin"
finish
