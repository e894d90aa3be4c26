#!/usr/bin/env bash
# test_study_report.sh: scripts/study_report.py (the FP8 recipe study's tables and plot) on a miniature
# study: bfloat16, float8 delayed and mxfp8, 2 seeds, a d2 model (C=128) for 30 steps. Its table's final
# validation losses, paired gaps and telemetry sums must be those of the logs, computed here independently;
# and a missing log is one error line.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
need_python_modules test_study_report matplotlib
test_tmpdir tmp test_study_report
export OMP_NUM_THREADS=1
test_data_dir "$tmp/data" text >/dev/null
for seed in 1 2; do
    for recipe in bfloat16 delayed mxfp8; do
        if [ $recipe = bfloat16 ]; then flags=(--dtype bfloat16); else
            flags=(--dtype float8 --fp8_recipe $recipe --fp8_stats_every 1)
        fi
        ./train_cpu --model_size d2 --channels 128 --heads 4 --vocab 256 --seq_len 32 --batch_size 4 --steps 30 \
            --val_every 10 --val_batches 2 --train_data "$tmp/data/text_train_*.bin" \
            --val_data "$tmp/data/text_val_*.bin" --output_dir "" --seed $seed "${flags[@]}" \
            --log_file "$tmp/${recipe}_seed$seed.jsonl" >/dev/null || bad "train_cpu $recipe seed $seed failed"
    done
done
"$PY" scripts/study_report.py "$tmp" --recipes bfloat16 delayed mxfp8 --seeds 2 >"$tmp/out.md"
result $? "study_report.py runs"
[ -s "$tmp/recipes.png" ] && cmp -s "$tmp/out.md" "$tmp/report.md"
result $? "the plot is drawn and report.md holds the printed table"
"$PY" - "$tmp" <<'EOF'
import json, statistics, sys
d = sys.argv[1]
recs = lambda r, s: [json.loads(l) for l in open(f"{d}/{r}_seed{s}.jsonl")]
final = lambda r, s: [x["val_loss"] for x in recs(r, s) if x["type"] == "val"][-1]
rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]]
        for l in open(f"{d}/report.md") if l.startswith("| ") and not l.startswith("| recipe")}
ok = True
for r in ("bfloat16", "delayed", "mxfp8"):
    finals = [final(r, s) for s in (1, 2)]
    ok &= rows[r][0] == f"{statistics.mean(finals):.4f} +- {statistics.stdev(finals):.4f}"
    if r == "bfloat16":
        continue
    diffs = [final(r, s) - final("bfloat16", s) for s in (1, 2)]
    base = statistics.mean(final("bfloat16", s) for s in (1, 2))
    gap = f"{100 * statistics.mean(diffs) / base:+.3f}% +- {100 * statistics.stdev(diffs) / 2 ** 0.5 / base:.3f}%"
    flushed = statistics.mean(sum(x["flushed"] for x in recs(r, s) if x["type"] == "fp8_stats") for s in (1, 2))
    ok &= rows[r][1] == gap and rows[r][4].startswith(f"{flushed:.0f} (")
    if not ok:
        print(r, rows[r], gap, flushed)
sys.exit(0 if ok else 1)
EOF
result $? "the table's losses, paired gaps and flushed counts are the logs'"
rm "$tmp/mxfp8_seed2.jsonl"
"$PY" scripts/study_report.py "$tmp" --recipes bfloat16 delayed mxfp8 --seeds 2 >/dev/null 2>"$tmp/err"
status=$?
[ $status = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "mxfp8_seed2.jsonl is missing" "$tmp/err"
result $? "a missing log: one error line naming it, exit 1"
finish
