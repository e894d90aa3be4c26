#!/usr/bin/env bash
# compare.sh: train one configuration twice, --dtype bfloat16 and --dtype float8, and compare them.
#
# Usage: scripts/compare.sh [--cpu|--gpu] [--out DIR] [--target_loss X] -- <trainer flags...>
#        scripts/compare.sh --logs BF16.jsonl FP8.jsonl [--out DIR] [--target_loss X]
#   --cpu            use ./train_cpu (the CPU reference trainer)
#   --gpu            use ./train (the CUDA trainer)
#                    default: ./train when a GPU is present (nvidia-smi lists one), else ./train_cpu
#   --out DIR        where the logs, table and figure go (default: out/compare, relative to the current
#                    directory, like every relative path among the trainer flags)
#   --target_loss X  the training loss whose first reaching is reported per run (default: 1.05 x the
#                    bfloat16 run's mean training loss over its last 10% of steps)
#   --logs B F       runs nothing: the table and figure of two runs made elsewhere (a cluster's, under srun or
#                    mpirun: scripts/slurm_train.sbatch, scripts/launch.sh), from their --log_file, B the
#                    bfloat16 run's and F the float8 run's. A run's stdout saved beside its log with the same
#                    name ending in .txt (run.jsonl, run.txt) is read too: the GPU trainer's summary line (MFU,
#                    peak memory) and energy line come from it. Give both runs the same --eval_data and
#                    --eval_every for the accuracy row.
# Every flag after `--` goes to both runs unchanged (seed, data, batch, lr, --eval_data, ...). --dtype and --log_file are
# set by this script and refused there. --output_dir D puts the checkpoints of the runs in D/bfloat16 and
# D/float8; without it no checkpoint is written.
#
# Writes DIR/bfloat16.jsonl, DIR/float8.jsonl (--log_file), DIR/bfloat16.txt, DIR/float8.txt (stdout),
# DIR/compare.md (the table, also printed: step time, peak memory, steps and hours to the target loss, final
# validation loss and perplexity, eval accuracy with its standard error, energy and cost, and float8's
# difference in the last column) and DIR/compare.png (loss curves, their difference, the eval accuracy; needs
# matplotlib for ${PYTHON:-python3}: without it, one line says so and the table stands). The binary is built
# with make when missing.
# Example (from the repository root, data from scripts/prepare_data.py --tokenizer byte):
#   scripts/compare.sh --cpu --out out/cmp -- --model_size d2 --vocab 256 --seq_len 128 --batch_size 16 \
#       --steps 600 --lr 3e-3 --warmup_steps 20 --final_lr_frac 0.1 --val_every 100
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$root/build/python" # matplotlib, when make python_deps put it there

usage() {
    echo "usage: scripts/compare.sh [--cpu|--gpu] [--out DIR] [--target_loss X] -- <trainer flags...>" >&2
    echo "       scripts/compare.sh --logs BF16.jsonl FP8.jsonl [--out DIR] [--target_loss X]" >&2
    exit 2
}
die() {
    echo "compare.sh: $*" >&2
    exit 2
}

device=auto
out=out/compare
target=()
logs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --cpu) device=cpu ;;
    --gpu) device=gpu ;;
    --out) [ $# -ge 2 ] || die "--out: missing value"; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --target_loss) [ $# -ge 2 ] || die "--target_loss: missing value"; target=(--target_loss "$2"); shift ;;
    --target_loss=*) target=(--target_loss "${1#--target_loss=}") ;;
    --logs) [ $# -ge 3 ] || die "--logs: needs two files, the bfloat16 run's log and the float8 run's"
        logs=("$2" "$3"); shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unexpected argument '$1' (trainer flags go after --)" >&2; usage ;;
    esac
    shift
done
[ -z "$out" ] && die "--out: empty"
if [ ${#target[@]} -gt 0 ] && ! [[ ${target[1]} =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]]; then
    die "--target_loss: '${target[1]}' is not a number"
fi

if [ ${#logs[@]} -gt 0 ]; then # two runs made elsewhere: their logs (and stdout) under the names of ours
    [ $# -eq 0 ] || die "--logs: runs nothing, so it takes no trainer flags ('$1')"
    for log in "${logs[@]}"; do [ -f "$log" ] || die "--logs: $log: not a file"; done
    mkdir -p "$out"
    rm -f "$out/compare.md" "$out/compare.png" "$out/bfloat16.txt" "$out/float8.txt"
    dtypes=(bfloat16 float8)
    for k in 0 1; do
        cp "${logs[$k]}" "$out/${dtypes[$k]}.jsonl"
        stdout=${logs[$k]%.jsonl}.txt
        if [ "$stdout" != "${logs[$k]}" ] && [ -f "$stdout" ]; then cp "$stdout" "$out/${dtypes[$k]}.txt"; fi
    done
    exec "$PY" "$root/scripts/plot_compare.py" "$out" "${target[@]}" --flags "logs: ${logs[*]}"
fi

# The trainer flags: --name value or --name=value, as the trainers parse them. Values are skipped, so a
# value that looks like a flag is not mistaken for one.
flags=("$@")
ckpt_root=""
i=0
while [ $i -lt ${#flags[@]} ]; do
    arg=${flags[$i]}
    name=${arg%%=*}
    if [[ $arg == *=* ]]; then value=${arg#*=}; step=1; else value=${flags[$((i + 1))]:-}; step=2; fi
    case "$name" in
    --dtype) die "--dtype: not allowed among the trainer flags: the comparison runs bfloat16 and float8" ;;
    --log_file) die "--log_file: not allowed among the trainer flags: the logs go to --out ($out)" ;;
    --output_dir) ckpt_root=$value ;;
    esac
    i=$((i + step))
done

# Which trainer.
if [ "$device" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        device=gpu
    else
        device=cpu
    fi
    why="(auto: $([ "$device" = gpu ] && echo "nvidia-smi lists a GPU" || echo "no GPU found"))"
else
    why="(--$device)"
fi
if [ "$device" = gpu ]; then binary=train; else binary=train_cpu; fi
trainer=$root/$binary
echo "compare.sh: trainer $trainer $why"
if [ ! -x "$trainer" ]; then
    echo "compare.sh: $binary not built: make -C $root $binary"
    make -C "$root" "$binary" >/dev/null
fi
# Both runs use one copy of the binary, so a rebuild during a long comparison cannot give them different code.
bin_dir=$(mktemp -d "${TMPDIR:-/tmp}/compare.XXXXXX")
trap 'rm -rf "$bin_dir"' EXIT
cp "$trainer" "$bin_dir/$binary"

mkdir -p "$out"
rm -f "$out/compare.md" "$out/compare.png"
for dtype in bfloat16 float8; do
    extra=(--output_dir "")
    [ -n "$ckpt_root" ] && extra=(--output_dir "$ckpt_root/$dtype" --overwrite 1) # a comparison starts afresh
    echo "== $dtype: $binary ${flags[*]} --dtype $dtype (log $out/$dtype.txt)"
    # the progress shown here is the validation and summary lines; every line is in the .txt
    set +e
    "$bin_dir/$binary" "${flags[@]}" "${extra[@]}" --dtype "$dtype" --log_file "$out/$dtype.jsonl" 2>&1 |
        tee "$out/$dtype.txt" | grep --line-buffered -E '^(val|eval|summary|energy|rental|skipped)'
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
        tail -n 5 "$out/$dtype.txt" >&2
        echo "compare.sh: the $dtype run failed (exit status $status; full output in $out/$dtype.txt)" >&2
        exit 1
    fi
done

echo
"$PY" "$root/scripts/plot_compare.py" "$out" --trainer "$binary" --flags "${flags[*]}" "${target[@]}"
