#!/usr/bin/env bash
# torchrun_local.sh: start PROGRAM as NPROC processes on this node with the environment `torchrun --standalone`
# gives its workers, for a machine without MPI or a check of the trainers' launch without it.
#
# Usage: scripts/torchrun_local.sh [--nproc_per_node N] [--] PROGRAM [ARGS...]
#   --nproc_per_node N  processes (default 1): one per GPU for ./train
# Every process gets the same PROGRAM and ARGS (the trainers refuse ranks whose flags differ: one --log_file,
# one --output_dir, which rank 0 alone writes) and RANK, LOCAL_RANK (0 .. N-1), WORLD_SIZE and
# LOCAL_WORLD_SIZE (N), MASTER_ADDR and MASTER_PORT (localhost and a free port, as torchrun sets them), and
# TORCHELASTIC_RUN_ID (a value new to this launch) with TORCHELASTIC_RESTART_COUNT 0: ./train passes the NCCL
# id through a file in --output_dir named after them, so a file an earlier launch left is never read.
# INT, TERM, HUP and USR1 are passed on to every process. The exit status is 0 when every process ended 0;
# else the first rank's status other than 0 and 75, or 75 when every rank that did not end 0 stopped with
# its checkpoint (75).
# Example: scripts/torchrun_local.sh --nproc_per_node 8 -- ./train --model_size 1.5B --zero_stage 1 \
#              --output_dir out/run1 --train_data 'data/fineweb_train_*.bin'
set -euo pipefail

die() {
    echo "error: $*" >&2
    exit 1
}

nproc=1
while [ $# -gt 0 ]; do
    case "$1" in
    --nproc_per_node) [ $# -ge 2 ] || die "--nproc_per_node: missing value"; nproc=$2; shift ;;
    --nproc_per_node=*) nproc=${1#*=} ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help; the program's own flags go after --)" ;;
    *) break ;;
    esac
    shift
done
[[ $nproc =~ ^[1-9][0-9]*$ ]] || die "--nproc_per_node: '$nproc' is not a positive integer"
[ $# -ge 1 ] || die "no PROGRAM (usage: scripts/torchrun_local.sh --nproc_per_node N -- PROGRAM [ARGS...])"

# A free TCP port: bound by the kernel's choice, then released (torchrun's own way of picking one).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
run_id="local-$(hostname -s)-$$-$(date +%s%N)"
pids=()
for ((rank = 0; rank < nproc; rank++)); do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$nproc LOCAL_WORLD_SIZE=$nproc GROUP_RANK=0 MASTER_ADDR=localhost \
        MASTER_PORT=$port TORCHELASTIC_RUN_ID=$run_id TORCHELASTIC_RESTART_COUNT=0 "$@" &
    pids+=($!)
done
forward() { kill -s "$1" "${pids[@]}" 2>/dev/null || true; }
for signal in INT TERM HUP USR1; do trap "forward $signal" "$signal"; done

statuses=()
for pid in "${pids[@]}"; do
    # wait returns early (above 128) when a trapped signal arrives: wait again until the process has ended
    while :; do
        status=0
        wait "$pid" || status=$?
        kill -0 "$pid" 2>/dev/null || break
    done
    statuses+=("$status")
done
final=0
for status in "${statuses[@]}"; do
    if [ "$status" != 0 ] && [ "$status" != 75 ]; then exit "$status"; fi
    [ "$status" = 75 ] && final=75
done
exit $final
