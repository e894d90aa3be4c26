#!/usr/bin/env bash
# test_compare.sh: scripts/compare.sh and scripts/plot_compare.py, on the CPU trainer.
#
# One comparison of a tiny configuration (d2, byte vocabulary, B=4, T=32, 20 steps, validation every 10 steps
# on 2 batches), started from a directory other than the repository root with relative paths. Checks:
#   - it runs ./train_cpu (--cpu) and writes DIR/{bfloat16,float8}.{jsonl,txt}, DIR/compare.md, DIR/compare.png;
#   - the PNG is a PNG (magic bytes) of more than 10 kB; compare.md is the table that was printed;
#   - every number of the table agrees, at its printed precision, with values recomputed here from the JSON-lines
#     logs: final val loss and perplexity, medians of ms/step and tokens/s over steps > 3, the default target
#     loss and the steps to reach it, skipped steps, and the relative gap line;
#   - MFU and peak memory read 'n/a (CPU)', energy and cost 'not measured';
#   - --dtype (either spelling) and --log_file among the trainer flags are refused with one line, before any run;
#   - plot_compare.py alone: --target_loss (reached, not reached); a GPU-style summary line and energy lines (two
#     spellings) in the stdout files show up in the table, and a skipped step logged with a null loss is counted
#     and drawn; eval records give the accuracy row (recomputed with its standard error) and the accuracy panel;
#     the hours to the target are the steps x the median step time; compare.sh --logs on two runs' logs
#     and stdout files makes the same table; without matplotlib the table is printed, then one line naming the install commands, exit
#     status 0.
# Needs ./train_cpu (built when missing) and matplotlib for $PYTHON (default python3).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init || exit 1
test_tmpdir TMP test_compare || exit 1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} # one thread: as fast for this tiny model, and fast under load
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

[ -x ./train_cpu ] || make train_cpu >/dev/null || { echo "FAIL: cannot build train_cpu"; exit 1; }
need_python_modules test_compare matplotlib

test_data_dir "$TMP/data" text || { echo "FAIL: data preparation"; exit 1; }
tiny=(--model_size d2 --vocab 256 --seq_len 32 --batch_size 4 --steps 20 --val_every 10 --val_batches 2
      --lr 3e-3 --train_data '../data/text_train_*.bin' --val_data '../data/text_val_*.bin')

# ---------------------------------------------------------------------------------------------------------
# the comparison, from another directory, with a relative --out and relative data paths
mkdir -p "$TMP/elsewhere"
SECONDS=0
(cd "$TMP/elsewhere" && bash "$root/scripts/compare.sh" --cpu --out cmp -- "${tiny[@]}") >"$TMP/run.out" 2>"$TMP/run.err"
status=$?
seconds=$SECONDS
result "$status" "compare.sh --cpu runs from another directory (exit status $status, $seconds s)"
[ "$status" = 0 ] || { tail -n 20 "$TMP/run.out" "$TMP/run.err"; finish; exit 1; }
out=$TMP/elsewhere/cmp
grep -q "trainer $root/train_cpu (--cpu)" "$TMP/run.out"
result $? "says it uses train_cpu"
for f in bfloat16.jsonl float8.jsonl bfloat16.txt float8.txt compare.md compare.png; do
    [ -s "$out/$f" ]
    result $? "wrote $f under the relative --out"
done
[ "$(head -c 8 "$out/compare.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
result $? "compare.png starts with the PNG signature"
size=$(stat -c %s "$out/compare.png" 2>/dev/null || echo 0)
[ "$size" -gt 10000 ]
result $? "compare.png is not trivial ($size bytes)"
"$PY" -c 'import sys; sys.exit(open(sys.argv[1]).read() not in open(sys.argv[2]).read())' "$out/compare.md" "$TMP/run.out"
result $? "compare.md is the table that was printed"

# every number of the table, recomputed from the logs; prints 'ok WHAT' or 'FAIL WHAT' per check
check_table() { # DIR [TARGET]
    "$PY" - "$@" <<'EOF'
import json, math, re, sys
d = sys.argv[1]
given_target = float(sys.argv[2]) if len(sys.argv) > 2 else None
md = open(f"{d}/compare.md").read()
rows = {}
for line in md.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if line.startswith("|") and len(cells) >= 3:
        rows[cells[0]] = cells[1:3]
logs = {}
for dt in ("bfloat16", "float8"):
    recs = [json.loads(l) for l in open(f"{d}/{dt}.jsonl") if l.strip()]
    for r in recs:  # a non-finite loss is logged as null
        if r["type"] == "step" and r["loss"] is None:
            r["loss"] = math.inf
    logs[dt] = ([r for r in recs if r["type"] == "step"], [r for r in recs if r["type"] == "val"])

def med(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

def same(printed, value):  # value formatted at the printed string's precision
    printed = printed.rstrip("%").lstrip("+")
    if not re.fullmatch(r"-?\d+(\.\d+)?", printed):
        return False
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return f"{value:.{decimals}f}" == printed

def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL: ") + what + ("" if ok else f" ({detail})"))

def row(prefix):
    hits = [v for k, v in rows.items() if k.startswith(prefix)]
    return hits[0] if hits else None

bsteps = logs["bfloat16"][0]
if given_target is None:
    finite = [r["loss"] for r in bsteps if math.isfinite(r["loss"])]
    tail = finite[-max(1, len(finite) // 10):]
    target = 1.05 * sum(tail) / len(tail)
else:
    target = given_target
key = [k for k in rows if k.startswith("steps to train loss <= ")]
check("the table has a steps-to-target row", len(key) == 1, list(rows))
if key:
    printed_target = key[0].split("<= ")[1]
    check(f"target loss {printed_target}", same(printed_target, target), f"recomputed {target}")
for i, dt in enumerate(("bfloat16", "float8")):
    steps, vals = logs[dt]
    check(f"{dt}: 20 step and 2 val records", len(steps) == 20 and len(vals) == 2, f"{len(steps)}, {len(vals)}")
    timed = [r for r in steps if r["step"] > 3]
    for prefix, value in (("final val loss", vals[-1]["val_loss"]), ("final val perplexity", vals[-1]["perplexity"]),
                          ("tokens/s", med([r["tokens_per_second"] for r in timed])),
                          ("ms/step", med([r["ms"] for r in timed]))):
        cells = row(prefix)
        check(f"{dt}: {prefix} {cells and cells[i]}", cells is not None and same(cells[i], value), f"recomputed {value}")
    check(f"{dt}: perplexity is exp(val loss)", abs(math.exp(vals[-1]["val_loss"]) - vals[-1]["perplexity"]) < 1e-3)
    reached = next((r["step"] for r in steps if r["loss"] <= target), None)
    cells = row("steps to train loss")
    want = str(reached) if reached is not None else "not reached"
    check(f"{dt}: steps to target {cells and cells[i]}", cells is not None and cells[i] == want, f"recomputed {want}")
    cells = row("skipped")
    skipped = sum(1 for r in steps if r["skipped"])
    check(f"{dt}: skipped steps {cells and cells[i]}", cells is not None and cells[i] == str(skipped),
          f"counted {skipped}")
vb, vf = logs["bfloat16"][1][-1]["val_loss"], logs["float8"][1][-1]["val_loss"]
m = re.search(r"^relative gap of the final validation loss, float8 vs bfloat16: ([-+]?[0-9.]+)%", md, re.M)
gap = 100 * (vf - vb) / vb
check(f"relative gap line {m and m.group(1)}%", m is not None and same(m.group(1), gap), f"recomputed {gap}")
EOF
}
count_checks() { # reads check_table's lines
    local line
    while IFS= read -r line; do
        case "$line" in
        "ok   "*) ok "${line#ok   }" ;;
        "FAIL: "*) bad "${line#FAIL: }" ;;
        *) bad "unexpected checker output: $line" ;;
        esac
    done
}
count_checks < <(check_table "$out" 2>&1)

cell() { # FILE ROW-PREFIX COLUMN(1 or 2): one cell of a table
    awk -F'|' -v p="$2" -v c="$3" 'index($2, " " p) == 1 { gsub(/^ +| +$/, "", $(c + 2)); print $(c + 2); exit }' "$1"
}
for c in 1 2; do
    for r in "MFU" "peak memory"; do
        [ "$(cell "$out/compare.md" "$r" $c)" = "n/a (CPU)" ]
        result $? "$r column $c reads 'n/a (CPU)'"
    done
    for r in energy cost; do
        [ "$(cell "$out/compare.md" "$r" $c)" = "not measured" ]
        result $? "$r column $c reads 'not measured'"
    done
done

# ---------------------------------------------------------------------------------------------------------
# refusals: one line on stderr, non-zero status, nothing run
refused() { # WHAT FLAG...
    local what=$1
    shift
    (cd "$TMP/elsewhere" && bash "$root/scripts/compare.sh" --cpu --out refused -- "${tiny[@]}" "$@") \
        >"$TMP/refused.out" 2>"$TMP/refused.err"
    local status=$?
    [ "$status" -ne 0 ] && [ "$(wc -l <"$TMP/refused.err")" = 1 ] && grep -q -- "$what" "$TMP/refused.err" &&
        [ ! -e "$TMP/elsewhere/refused/bfloat16.jsonl" ]
    result $? "refuses $* with one line ($(head -n 1 "$TMP/refused.err"))"
}
refused --dtype --dtype float8
refused --dtype --dtype=bfloat16
refused --log_file --log_file x.jsonl
if (cd "$TMP/elsewhere" && bash "$root/scripts/compare.sh" --cpu --bogus -- --steps 1) >/dev/null 2>&1; then
    bad "refuses an unknown option before --"
else
    ok "refuses an unknown option before --"
fi

# ---------------------------------------------------------------------------------------------------------
# plot_compare.py alone, on copies of the logs
cp -r "$out" "$TMP/target"
"$PY" "$root/scripts/plot_compare.py" "$TMP/target" --target_loss 5.3 >/dev/null 2>&1
result $? "plot_compare.py --target_loss 5.3"
count_checks < <(check_table "$TMP/target" 5.3 2>&1 | grep -E "target|gap")
"$PY" "$root/scripts/plot_compare.py" "$TMP/target" --target_loss 0.5 >/dev/null 2>&1
[ "$(cell "$TMP/target/compare.md" "steps to train loss" 1)|$(cell "$TMP/target/compare.md" "steps to train loss" 2)" = \
  "not reached|not reached" ]
result $? "--target_loss 0.5 is 'not reached' by both"

# a GPU-style run: a summary line on one side, energy lines in two spellings, a skipped step with a null loss
cp -r "$out" "$TMP/gpu"
echo "summary | 12.3 ms/step | 45678 tok/s | MFU 41.5% of the BF16 peak | peak memory 12.34 GiB (device in use: 13.00 GiB)" \
    >>"$TMP/gpu/float8.txt"
echo "energy | 1234.5 J | 0.000343 kWh | cost 0.000062 (price 0.1500 per kWh, PUE 1.20)" >>"$TMP/gpu/float8.txt"
echo "energy | 2000 joules | 0.000556 kWh | cost 0.05 EUR" >>"$TMP/gpu/bfloat16.txt"
echo "rental | 0.0123 GPU-hours (1 GPU(s) x 0.0123 h) | cost 0.0369 (price 3 per GPU-hour)" >>"$TMP/gpu/float8.txt"
"$PY" -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
for i, line in enumerate(lines):
    r = json.loads(line)
    if r.get("type") == "step" and r["step"] == 5:
        r["loss"], r["skipped"] = None, 1
        lines[i] = json.dumps(r, separators=(",", ":"))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
' "$TMP/gpu/float8.jsonl"
grep -q '"step":5,"loss":null' "$TMP/gpu/float8.jsonl"
result $? "test set-up: a null loss at step 5 of the float8 log"
"$PY" "$root/scripts/plot_compare.py" "$TMP/gpu" --trainer train >/dev/null 2>"$TMP/gpu.err"
result $? "plot_compare.py with summary and energy lines and a null loss $(head -c 300 "$TMP/gpu.err")"
want="41.5%|12.34 GiB|1234.5 J (0.000343 kWh)|0.000062 (price 0.1500 per kWh, PUE 1.20)|1|not reported|not reported"
want="$want|2000 J (0.000556 kWh)|0.05 EUR|0|0.0123 GPU-hours, cost 0.0369|not logged (--price_gpu_hour)"
got=""
for spec in "MFU 2" "peak memory 2" "energy 2" "cost 2" "skipped 2" "MFU 1" "peak memory 1" "energy 1" "cost 1" \
    "skipped 1" "rental 2" "rental 1"; do
    got="$got${got:+|}$(cell "$TMP/gpu/compare.md" "${spec% *}" "${spec##* }")"
done
[ "$got" = "$want" ]
result $? "summary, energy and rental lines and the skipped step in the table ($got)"
count_checks < <(check_table "$TMP/gpu" 2>&1 | grep -E "steps to target|skipped")
[ -s "$TMP/gpu/compare.png" ]
result $? "compare.png drawn with a null loss in the log"

# eval records (--eval_data) in both logs: the accuracy row with its binomial standard error, the hours to the
# target, the accuracy panel; then the same logs through compare.sh --logs, as two cluster runs' logs
cp -r "$out" "$TMP/evals"
echo '{"type":"eval","step":20,"correct":17,"examples":24,"accuracy":0.708333333}' >>"$TMP/evals/bfloat16.jsonl"
echo '{"type":"eval","step":20,"correct":15,"examples":24,"accuracy":0.625}' >>"$TMP/evals/float8.jsonl"
"$PY" "$root/scripts/plot_compare.py" "$TMP/evals" --target_loss 5.3 >/dev/null 2>"$TMP/evals.err"
result $? "plot_compare.py with eval records $(head -c 300 "$TMP/evals.err")"
count_checks < <("$PY" - "$TMP/evals" 2>&1 <<'EOF'
import json, math, sys
d = sys.argv[1]
md = open(f"{d}/compare.md").read()
def cells(prefix):
    for line in md.splitlines():
        parts = [c.strip() for c in line.split("|")]
        if len(parts) > 4 and parts[1].startswith(prefix):
            return parts[2:5]
def check(what, good):
    print(("ok   " if good else "FAIL: ") + what)
se = lambda k, n: math.sqrt(k / n * (1 - k / n) / n)
want = [f"{17/24:.4f} ± {se(17, 24):.4f} (17/24)", f"{15/24:.4f} ± {se(15, 24):.4f} (15/24)",
        f"{15/24 - 17/24:+.4f} ± {math.hypot(se(17, 24), se(15, 24)):.4f}"]
check(f"eval accuracy row {cells('eval accuracy')}, recomputed {want}", cells("eval accuracy") == want)
hours = []
for dt in ("bfloat16", "float8"):
    steps = [json.loads(l) for l in open(f"{d}/{dt}.jsonl") if '"type":"step"' in l]
    timed = sorted(r["ms"] for r in steps if r["step"] > 3)
    n = len(timed)
    ms = timed[n // 2] if n % 2 else 0.5 * (timed[n // 2 - 1] + timed[n // 2])
    reached = next((r["step"] for r in steps if r["loss"] is not None and r["loss"] <= 5.3), None)
    hours.append(f"{reached * ms / 3.6e6:.3g}" if reached else "not reached")
check(f"hours to target {cells('hours to')[:2]}, recomputed {hours}", cells("hours to")[:2] == hours)
EOF
)
[ -s "$TMP/evals/compare.png" ]
result $? "compare.png drawn with the accuracy panel"
mkdir -p "$TMP/cluster"
for dt in bfloat16 float8; do
    cp "$TMP/evals/$dt.jsonl" "$TMP/cluster/run_$dt.jsonl"
    cp "$TMP/evals/$dt.txt" "$TMP/cluster/run_$dt.txt"
done
bash "$root/scripts/compare.sh" --logs "$TMP/cluster/run_bfloat16.jsonl" "$TMP/cluster/run_float8.jsonl" \
    --out "$TMP/cluster/cmp" --target_loss 5.3 >"$TMP/cluster.out" 2>&1 &&
    diff <(grep '^|' "$TMP/evals/compare.md") <(grep '^|' "$TMP/cluster/cmp/compare.md") >/dev/null &&
    [ -s "$TMP/cluster/cmp/compare.png" ]
result $? "compare.sh --logs: the same table from two runs' logs and stdout, and the figure $(tail -n 2 "$TMP/cluster.out")"

mkdir -p "$TMP/nompl/matplotlib"
echo 'raise ImportError("matplotlib hidden by test_compare.sh")' >"$TMP/nompl/matplotlib/__init__.py"
rm -f "$TMP/target/compare.png"
PYTHONPATH="$TMP/nompl" "$PY" "$root/scripts/plot_compare.py" "$TMP/target" >"$TMP/nompl.out" 2>"$TMP/nompl.err"
status=$?
[ "$status" = 0 ] && [ "$(wc -l <"$TMP/nompl.err")" = 1 ] && grep -q "apt-get install python3-matplotlib" "$TMP/nompl.err" &&
    grep -q "pip install matplotlib" "$TMP/nompl.err" && grep -q "^| final val loss" "$TMP/nompl.out" &&
    [ ! -e "$TMP/target/compare.png" ]
result $? "without matplotlib: table, then one line naming the installs, exit 0 ($(cat "$TMP/nompl.err"))"

finish
