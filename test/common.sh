# test/common.sh: the set-up shared by the bash tests (test/test_*.sh) and dev/bench_cpu.sh. Sourced, never run:
#     . "$(dirname "${BASH_SOURCE[0]}")/common.sh"            (from test/; from dev/: .../../test/common.sh)
# Sourcing sets `root` (the repository root, absolute) and defines the functions below; it changes nothing else
# (no cd, no temporary files, no traps, no counters) until a function is called.
#   test_init                 cd to $root; PY=${PYTHON:-python3}; DATA=${DATA:-$root/../shared/data/tinyshakespeare.txt};
#                             passed=0 failed=0 (the counters of ok / bad / result / finish)
#   test_tmpdir VAR NAME      VAR=a new directory /tmp/NAME.XXXXXX, removed when the script exits (sets the EXIT
#                             trap: call it once per script, and do not set another EXIT trap)
#   test_text VAR FILE [GEN]  VAR=$DATA if that file exists, else FILE, written by `GEN FILE` (default
#                             generated_text); prints 'data: ...' saying which
#   test_data_dir DIR NAME [GEN]
#                             byte-level shards DIR/NAME_{train_000000,val_000000,tokenizer}.bin
#                             (scripts/prepare_data.py --tokenizer byte) of test_text's choice; a generated text is
#                             written to DIR/NAME.txt
#   generated_text FILE       the stand-in for tinyshakespeare: 20,000 short sentences of 25 common English words
#                             (about 0.5 MB), the same on every call
#   ok [WHAT]                 a passed check (prints 'ok   WHAT' when WHAT is given)
#   bad WHAT...               a failed check (prints 'FAIL: WHAT')
#   result STATUS WHAT        ok WHAT when STATUS is 0, else bad WHAT
#                             (with TEST_FAIL_FAST set, it ends the script there: dev/mutants.py's runs)
#   finish                    prints 'N passed, M failed'; its status is 0 only without failures (end a script with it)
#   merge_flags BASE... -- EXTRA...
#                             BASE without the --flags EXTRA gives (and their values), then EXTRA as it is,
#                             NUL-separated for `mapfile -d '' VAR < <(merge_flags ...)`: a base command line
#                             with overrides (the trainers refuse a flag given twice)
#   need_python_modules TEST MODULE...
#                             exits 0 after one 'SKIPPED TEST: ...' line when $PY cannot import a MODULE (make
#                             installs numpy and matplotlib into build/python/ when it can: make python_deps)
#   logged_steps LOG          the step records in the JSONL log LOG (0 without it)
#   steps_of LOG              LOG's step records without their timings
#   step_file DIR KIND STEP SUFFIX
#                             a checkpoint's file: DIR/KIND_<STEP, 8 digits>SUFFIX
#   same_end NAME DIR REF STEPS RANKS
#                             a check: DIR's final model, state files (RANKS of them) and log steps (DIR.jsonl)
#                             equal REF's, byte for byte: a resumed run against one that never stopped
# Needs bash; works under `set -euo pipefail` and without it.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

test_init() {
    cd "$root" || return 1
    PY=${PYTHON:-python3}
    DATA=${DATA:-$root/../shared/data/tinyshakespeare.txt}
    passed=0
    failed=0
}

need_python_modules() { # TEST MODULE...
    local _test=$1 _module
    shift
    for _module in "$@"; do
        if ! "$PY" -c "import $_module" 2>/dev/null; then
            echo "SKIPPED $_test: $_module is not importable by $PY ($(command -v "$PY")); make python_deps installs" \
                "it into build/python/ with pip (Debian without pip: apt-get install python3-pip)"
            exit 0
        fi
    done
}

test_tmpdir() { # VAR NAME
    local _dir
    _dir=$(mktemp -d "/tmp/$2.XXXXXX") || return 1
    printf -v "$1" %s "$_dir"
    # shellcheck disable=SC2064 # the path is fixed now, on purpose
    trap "rm -rf $(printf %q "$_dir")" EXIT
}

generated_text() { # FILE
    "$PY" - "$1" <<'EOF'
import random, sys
r = random.Random(3)
w = 'the of and to a in that is was he for it with as his on be at by this had not are but from or have'.split()
open(sys.argv[1], 'w').write('\n'.join(' '.join(r.choice(w) for _ in range(r.randint(3, 12))).capitalize() + '.'
                                       for _ in range(20000)))
EOF
}

test_text() { # VAR FILE [GENERATOR]
    if [ -f "$DATA" ]; then
        printf -v "$1" %s "$DATA"
        echo "data: $DATA"
    else
        echo "data: $DATA not found: using a generated English-like text instead"
        "${3:-generated_text}" "$2" || return 1
        printf -v "$1" %s "$2"
    fi
}

test_data_dir() { # DIR NAME [GENERATOR]
    local _text
    mkdir -p "$1" || return 1
    test_text _text "$1/$2.txt" "${3:-generated_text}" || return 1
    "$PY" "$root/scripts/prepare_data.py" --input "$_text" --output_dir "$1" --name "$2" --tokenizer byte >/dev/null
}

ok() {
    passed=$((passed + 1))
    if [ $# -gt 0 ]; then echo "ok   $*"; fi
}

bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
    if [ -n "${TEST_FAIL_FAST:-}" ]; then finish; exit 1; fi
}

result() { # STATUS WHAT
    if [ "$1" = 0 ]; then ok "$2"; else bad "$2"; fi
}

# stall_ends DIR NAME PROCESSES STALLED_RANK COMMAND...: the run under "${MPIRUN[@]}" in which rank
# STALLED_RANK stops answering before its first step (--inject_stall_rank) must end by itself, non-zero,
# with the one-line error of --nccl_timeout_s 2 from some other rank and none from the stalled one (mpirun
# then ends the stalled process). A hang is caught by the outer timeout of 120 s, far above the startup and
# the 2 s wait. Output in DIR/NAME.out and .err.
stall_ends() {
    local dir=$1 name=$2 np=$3 stalled=$4 status=0 start=$SECONDS
    shift 4
    timeout 120 "${MPIRUN[@]}" -np "$np" "$@" --nccl_timeout_s 2 --inject_stall_rank "$stalled" \
        >"$dir/$name.out" 2>"$dir/$name.err" || status=$?
    local line
    line=$(grep -m1 "^error: rank [0-9]*: .*no progress in --nccl_timeout_s 2 s" "$dir/$name.err" || true)
    [ $status != 0 ] && [ $status != 124 ] && [ -n "$line" ] && ! grep -q "^error: rank $stalled:" "$dir/$name.err"
    result $? "$name: $np processes, rank $stalled stalls: ended with exit $status after $((SECONDS - start)) s: ${line:-no timeout line}"
}

merge_flags() {
    local -a base=() extra=() out=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do base+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    extra=("$@")
    local -A named=() # the flags the extras give
    local a i
    for a in "${extra[@]}"; do [[ "$a" == --* ]] && named["${a%%=*}"]=1; done
    for ((i = 0; i < ${#base[@]}; i++)); do
        a=${base[$i]}
        if [[ "$a" == --* && -n "${named[${a%%=*}]:-}" ]]; then
            [[ "$a" == *=* ]] || i=$((i + 1)) # its value goes with it
        else
            out+=("$a")
        fi
    done
    out+=("${extra[@]}")
    [ ${#out[@]} -eq 0 ] || printf '%s\0' "${out[@]}"
}

finish() { # the time too (the script's, bash's SECONDS): where make test's minutes go, in every CI log
    echo "$passed passed, $failed failed ($(basename "$0"), ${SECONDS} s)"
    [ "$failed" -eq 0 ]
}

logged_steps() { local n; n=$(grep -c '"type":"step"' "$1" 2>/dev/null) || true; echo "${n:-0}"; }
steps_of() { grep '"type":"step"' "$1" | sed -E 's/"ms":[^,]*,"tokens_per_second":[^,]*,//'; }
step_file() { printf '%s/%s_%08d%s' "$1" "$2" "$3" "$4"; }
same_end() {
    local name=$1 dir=$2 ref=$3 steps=$4 ranks=$5 r same=1
    cmp -s "$(step_file "$dir" model "$steps" .bin)" "$(step_file "$ref" model "$steps" .bin)" || same=0
    for ((r = 0; r < ranks; r++)); do
        cmp -s "$(step_file "$dir" state "$steps" "_$(printf %05d $r).bin")" \
            "$(step_file "$ref" state "$steps" "_$(printf %05d $r).bin")" || same=0
    done
    [ "$(steps_of "$dir.jsonl")" = "$(steps_of "$ref.jsonl")" ] || same=0
    result $((1 - same)) "$name: resumed run byte-identical to the uninterrupted one (model, states, log)"
}
