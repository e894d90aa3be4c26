#!/usr/bin/env bash
# test_launch.sh: scripts/launch.sh (the mpirun wrapper) and scripts/slurm_train.sbatch.
#  - --print: one node x 2 processes (-np 2, ppr mapping, no binding, the program's words intact through the
#    shell quoting, including a space, a quote, a glob and a $), 2 nodes x 4 with a hostfile (-np 8),
#    the OMP_NUM_THREADS default and passed-on value, -x of NCCL_* and CUDA_VISIBLE_DEVICES when set,
#    --allow-run-as-root exactly when root, --oversubscribe exactly when asked;
#  - refusals, each exit status 1, nothing on stdout and one 'error:' line: --nnodes 2 without a hostfile, a
#    hostfile with too few hosts (comments and blank lines do not count), a missing hostfile, --nproc_per_node
#    0 and x, no program, an mpirun that does not exist;
#  - scripts/slurm_train.sbatch is valid bash;
#  - with mpirun installed: a real 2-process run through the wrapper, both ranks answer; and, when train_cpu
#    is built with MPI (else skipped), a tiny 2-process ZeRO-1 training through it: one log, a model file
#    and one state file per rank. Whether the distributed training computes the right thing is for the
#    distributed trainer's own tests.
# Takes seconds. (no `set -e`: each check's status goes to `result`)
set -uo pipefail
# shellcheck source=test/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
tmp=
test_tmpdir tmp test_launch
launch=scripts/launch.sh

# The words of a printed command line, one per line, as the shell reads them back.
words() { eval "printf '%s\n' $1"; }

# ---------------------------------------------------------------------------------------------------------
# --print, one node
line=$(env -u OMP_NUM_THREADS -u CUDA_VISIBLE_DEVICES $launch --print --nproc_per_node 2 -- \
    ./train_cpu --train_data 'my data/x_*.bin' --note "it's \$HOME")
result $? "--print --nproc_per_node 2 exits 0"
echo "     $line"
[[ " $line " == *" -np 2 "* ]]; result $? "-np 2"
[[ " $line " == *" --map-by ppr:2:node "* && " $line " == *" --bind-to none "* ]]; result $? "2 per node, no binding"
[[ " $line " != *" --hostfile "* && " $line " != *" --oversubscribe "* ]]; result $? "no hostfile, no --oversubscribe"
threads=$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1))
[[ " $line " == *" -x OMP_NUM_THREADS=$threads "* ]]; result $? "OMP_NUM_THREADS defaults to cores / 2 = $threads"
[[ " $line " != *CUDA_VISIBLE_DEVICES* ]]; result $? "CUDA_VISIBLE_DEVICES not passed when unset"
if [ "$(id -u)" = 0 ]; then
    [[ " $line " == *" --allow-run-as-root "* ]]; result $? "--allow-run-as-root (running as root)"
else
    [[ " $line " != *" --allow-run-as-root "* ]]; result $? "no --allow-run-as-root (not root)"
fi
[ "$(words "$line" | tail -n 5)" = "$(printf '%s\n' ./train_cpu --train_data 'my data/x_*.bin' --note "it's \$HOME")" ]
result $? "the program and its arguments read back unchanged (space, quote, glob, \$)"
[ "$(words "$line" | head -n 1)" = mpirun ]; result $? "starts with mpirun"

line=$(OMP_NUM_THREADS=3 NCCL_DEBUG=WARN NCCL_SOCKET_IFNAME=ib0 CUDA_VISIBLE_DEVICES=0,1 \
    $launch --print --nproc_per_node 2 --oversubscribe ./train_cpu)
[[ " $line " == *" -x OMP_NUM_THREADS=3 "* ]]; result $? "a set OMP_NUM_THREADS is passed on as it is"
[[ " $line " == *" -x NCCL_DEBUG "* && " $line " == *" -x NCCL_SOCKET_IFNAME "* ]]; result $? "NCCL_* exported"
[[ " $line " == *" -x CUDA_VISIBLE_DEVICES "* ]]; result $? "CUDA_VISIBLE_DEVICES exported when set"
[[ " $line " == *" --oversubscribe "* ]]; result $? "--oversubscribe when asked"
[[ $line == *" ./train_cpu" ]]; result $? "the program without -- after the launcher flags"

# --print, two nodes
printf '# two nodes\nnode1 slots=4\n\n  node2 slots=4\n' >"$tmp/hosts"
line=$($launch --nnodes 2 --nproc_per_node=4 --hostfile "$tmp/hosts" --print -- ./train --zero_stage 3)
result $? "--print --nnodes 2 --nproc_per_node 4 --hostfile exits 0"
echo "     $line"
[[ " $line " == *" -np 8 "* && " $line " == *" --map-by ppr:4:node "* ]]; result $? "-np 8, 4 per node"
[[ " $line " == *" --hostfile $tmp/hosts "* ]]; result $? "--hostfile passed on"
[[ $line == *" ./train --zero_stage 3" ]]; result $? "the program and its flags at the end"

# ---------------------------------------------------------------------------------------------------------
# refusals
refused() { # WHAT PATTERN LAUNCHER-ARGS...
    local what=$1 pattern=$2
    shift 2
    $launch "$@" >"$tmp/out" 2>"$tmp/err"
    local status=$?
    [ "$status" = 1 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "^error: $pattern" "$tmp/err"
    result $? "$what: exit status $status, '$(head -c 200 "$tmp/err")'"
}
printf 'node1 slots=8\n# node2 slots=8\n\n' >"$tmp/one_host"
refused "--nnodes 2 without a hostfile" "--nnodes 2: needs --hostfile" --nnodes 2 --print ./train
refused "a hostfile with one host for 2 nodes" "--hostfile: '$tmp/one_host' lists 1 host" \
    --nnodes 2 --hostfile "$tmp/one_host" --print ./train
refused "a missing hostfile" "--hostfile: cannot read '$tmp/nope'" --hostfile "$tmp/nope" --print ./train
refused "--nproc_per_node 0" "--nproc_per_node: '0' is not a positive integer" --nproc_per_node 0 --print ./train
refused "--nproc_per_node x" "--nproc_per_node: 'x' is not a positive integer" --nproc_per_node x --print ./train
refused "no program" "no program given" --nproc_per_node 2 --print --
refused "an mpirun that does not exist" "mpirun not found .*apt-get install openmpi-bin" --mpirun "$tmp/mpirun" ./train

bash -n scripts/slurm_train.sbatch
result $? "scripts/slurm_train.sbatch is valid bash"

# ---------------------------------------------------------------------------------------------------------
# real runs
if ! command -v mpirun >/dev/null; then
    echo "SKIPPED the runs through mpirun: mpirun not found (apt-get install openmpi-bin)"
    finish
    exit
fi
# shellcheck disable=SC2016 # expanded by the started processes
timeout 60 $launch --nproc_per_node 2 --oversubscribe -- bash -c 'echo rank=$OMPI_COMM_WORLD_RANK' >"$tmp/ranks" 2>&1
result $? "a 2-process run through the wrapper exits 0"
[ "$(sort "$tmp/ranks")" = "$(printf 'rank=0\nrank=1')" ]
result $? "ranks 0 and 1 both answered: $(tr '\n' ' ' <"$tmp/ranks")"

if ! grep -q libmpi <<<"$(ldd ./train_cpu 2>/dev/null)"; then
    echo "SKIPPED the 2-process training: ./train_cpu is missing or built without MPI (apt-get install" \
         "libopenmpi-dev, then make train_cpu)"
    finish
    exit
fi
test_data_dir "$tmp/data" text >/dev/null
steps=3
OMP_NUM_THREADS=1 timeout 120 $launch --nproc_per_node 2 --oversubscribe -- ./train_cpu --model_size d2 \
    --vocab 256 --seq_len 32 --batch_size 2 --steps $steps --val_every 0 --val_batches 1 --zero_stage 1 \
    --train_data "$tmp/data/text_train_*.bin" --val_data "$tmp/data/text_val_*.bin" --output_dir "$tmp/run" \
    >"$tmp/train.out" 2>"$tmp/train.err"
status=$?
result $status "a tiny 2-process ZeRO-1 training through the wrapper exits 0"
[ "$status" = 0 ] || tail -n 3 "$tmp/train.err"
# Rank 0 alone prints the steps; two copies that do not know of each other would print them twice.
[ "$(grep -c '^step ' "$tmp/train.out")" = $steps ]; result $? "one log: $steps step lines"
[ "$(find "$tmp/run" -name 'model_*.bin' | wc -l)" = 1 ] && [ "$(find "$tmp/run" -name 'state_*.bin' | wc -l)" = 2 ]
result $? "its checkpoint: one model file, one state file per rank"
finish
