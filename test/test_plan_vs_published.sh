#!/usr/bin/env bash
# test_plan_vs_published.sh: the --dry_run time plan (time_plan.h) against published training runs,
# test/plan_vs_published.tsv (sources and configurations: docs/plan-vs-published.md). Each row is planned with
# train_cpu --dry_run and its tokens/s per GPU compared with the published number:
#   - rows marked fit or within land within 15%: the bound asked for, wider than what separates two releases of
#     one published configuration (Megatron-Bridge's Llama 3 8B on 8 H100s: 14,079 and 14,451, 2.6%) and than
#     the plan's arithmetic (exact), narrower than the 1.2x to 1.7x the uncalibrated plan was off by;
#   - rows marked outside are still more than 15% off (a known miss; fixing it must update the table);
#   - at least 6 of the 8 rows land within 15%;
#   - the planned FP8/BF16 speed-up at 70B lies in the band the published 70B runs span.
# Environment: TRAIN_CPU (default ./train_cpu).
# shellcheck source=test/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
BIN=${TRAIN_CPU:-./train_cpu}
TABLE=$(dirname "${BASH_SOURCE[0]}")/plan_vs_published.tsv

declare -A planned
rows=0 close=0
while IFS=$'\t' read -r name published expect flags; do
    case "$name" in '#'* | '' | ratio) continue ;; esac
    # shellcheck disable=SC2086 # the flags column is a list of words
    # the published runs used fused attention kernels: planned as cuDNN's (train_cpu plans auto as exact)
    tps=$("$BIN" --dry_run 1 --train_data none --val_data '' --attention fast $flags 2>&1 |
        sed -n 's/^plan_step_ms [0-9.]* plan_tokens_per_s \([0-9.]*\) .*/\1/p')
    planned[$name]=$tps
    rows=$((rows + 1))
    if awk -v t="$tps" -v p="$published" 'BEGIN { r = t / p; exit !(t > 0 && r >= 0.85 && r <= 1.15) }'; then
        close=$((close + 1)) inside=1
    else
        inside=0
    fi
    what="$name: planned ${tps:-nothing} tokens/s per GPU, published $published"
    if [ "$expect" = outside ]; then
        [ -n "$tps" ] && [ $inside = 0 ]
        result $? "$what: still more than 15% off (a known miss)"
    else
        [ $inside = 1 ]
        result $? "$what: within 15% ($expect)"
    fi
done <"$TABLE"
[ $rows = 8 ] && [ $close -ge 6 ]
result $? "$close of $rows published runs planned within 15% (at least 6 of 8)"

while IFS=$'\t' read -r kind fp8 bf16 low high; do
    [ "$kind" = ratio ] || continue
    awk -v f="${planned[$fp8]}" -v b="${planned[$bf16]}" -v lo="$low" -v hi="$high" \
        'BEGIN { exit !(b > 0 && f / b >= lo && f / b <= hi) }'
    result $? "planned FP8/BF16 speed-up $fp8 / $bf16 = $(awk -v f="${planned[$fp8]}" -v b="${planned[$bf16]}" \
        'BEGIN { if (b > 0) printf "%.3f", f / b }') inside the published band [$low, $high]"
done <"$TABLE"
finish
