#!/usr/bin/env bash
# launch.sh: start PROGRAM as NNODES x NPROC_PER_NODE processes with Open MPI's mpirun, torchrun-style.
#
# Usage: scripts/launch.sh [--nnodes N] [--nproc_per_node P] [--hostfile FILE] [--oversubscribe]
#                          [--print] [--mpirun PATH] [--] PROGRAM [ARGS...]
#   --nnodes N          nodes to run on (default 1); N > 1 needs --hostfile
#   --nproc_per_node P  processes per node (default 1): one per GPU for ./train
#   --hostfile FILE     Open MPI hostfile, one node per line ('node1 slots=8'); the first N nodes are used
#   --oversubscribe     allow more processes than cores on a node (CPU tests on a small machine)
#   --print             print the mpirun command (one line, shell-quoted) instead of running it
#   --mpirun PATH       the mpirun to use (default: mpirun from PATH)
# Flags take `--flag value` or `--flag=value`. PROGRAM and ARGS are passed on unchanged; the first
# argument that is not a launcher flag (or everything after `--`) starts them.
# Every process learns its rank, world size and local rank from MPI; the trainers use the local rank as
# their GPU index.
# Stopping: Ctrl-C, SIGTERM, SIGHUP, SIGUSR1 or SIGUSR2 to this script become the trainers' stop signal
# (--stop_signal, SIGUSR1 by default) sent to every process through mpirun; the ranks finish their step,
# write a checkpoint however long it takes and exit 75, and so does this script (a second signal ends them
# at once). mpirun itself never sees a terminating signal: its own answer to one is to kill the processes
# about a second later, checkpoint or not, and exit 1. PROGRAM runs in the current directory on every node, so on several nodes the
# repository, the data and --output_dir must sit on a filesystem all of them share, at the same path.
# Examples:
#   scripts/launch.sh --nproc_per_node 8 -- ./train --dtype float8 --model_size 1.5B --zero_stage 1
#   scripts/launch.sh --nnodes 4 --nproc_per_node 8 --hostfile hosts -- ./train --dtype float8 \
#       --model_size 70B --zero_stage 3 --train_data 'data/llama2_train_*.bin'     (LLaMA-2 70B)
set -euo pipefail

die() {
    echo "error: $*" >&2
    exit 1
}

# One word, quoted for a POSIX shell only when it needs it: the printed command pastes back as it was.
quote() {
    if [[ $1 =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}

nnodes=1
nproc_per_node=1
hostfile=""
oversubscribe=0
print=0
mpirun=mpirun
while [ $# -gt 0 ]; do
    case "$1" in
    --nnodes | --nproc_per_node | --hostfile | --mpirun) # `--flag value`: rewritten as `--flag=value`
        [ $# -ge 2 ] || die "$1: missing value"
        set -- "$1=$2" "${@:3}"
        continue ;;
    --nnodes=*) nnodes=${1#*=} ;;
    --nproc_per_node=*) nproc_per_node=${1#*=} ;;
    --hostfile=*) hostfile=${1#*=} ;;
    --mpirun=*) mpirun=${1#*=} ;;
    --oversubscribe) oversubscribe=1 ;;
    --print) print=1 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help; the program's own flags go after --)" ;;
    *) break ;;
    esac
    shift
done

[[ $nnodes =~ ^0*[1-9][0-9]*$ ]] || die "--nnodes: '$nnodes' is not a positive integer"
[[ $nproc_per_node =~ ^0*[1-9][0-9]*$ ]] || die "--nproc_per_node: '$nproc_per_node' is not a positive integer"
nnodes=$((10#$nnodes)) # 10#: a leading zero is not octal
nproc_per_node=$((10#$nproc_per_node))
[ $# -gt 0 ] || die "no program given (usage: scripts/launch.sh [launcher flags] [--] PROGRAM [ARGS...])"

if [ -n "$hostfile" ]; then
    [[ -f $hostfile && -r $hostfile ]] || die "--hostfile: cannot read '$hostfile'"
    hosts=$(grep -cEv '^[[:space:]]*(#|$)' "$hostfile" || true)
    [ "$hosts" -ge "$nnodes" ] || die "--hostfile: '$hostfile' lists $hosts host(s), fewer than --nnodes $nnodes"
elif [ "$nnodes" -gt 1 ]; then
    die "--nnodes $nnodes: needs --hostfile FILE naming the nodes (one per line, e.g. 'node1 slots=$nproc_per_node')"
fi

# Each process runs OpenMP threads (the CPU trainer's GEMMs, host-side loops), by default one per core: P
# processes would put P busy-waiting threads on every core and slow each other down many times over. So a
# node's cores are divided among its processes (counted here: the nodes are assumed alike). Set
# OMP_NUM_THREADS to choose, and OMP_WAIT_POLICY=passive on cores shared with other work.
if [ -z "${OMP_NUM_THREADS:-}" ]; then
    cores=$(nproc)
    OMP_NUM_THREADS=$((cores / nproc_per_node > 0 ? cores / nproc_per_node : 1))
fi

cmd=("$mpirun" -np "$((nnodes * nproc_per_node))" --map-by "ppr:$nproc_per_node:node")
# No binding: Open MPI's default binds each process to one core (or socket), which would squeeze all of a
# process's OpenMP threads onto that core. NUMA binding would help a GPU process only when its cores sit
# near its GPU, and that mapping differs from machine to machine: placement is left to the OS scheduler.
cmd+=(--bind-to none)
[ -n "$hostfile" ] && cmd+=(--hostfile "$hostfile")
[ "$oversubscribe" = 1 ] && cmd+=(--oversubscribe)
# Open MPI refuses to run as root (containers often are) unless told; the environment alternative is
# OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1. The flag keeps the printed command complete.
[ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root)
# mpirun passes its own environment only to the processes of this node: -x sends a variable to every node.
# OMP_NUM_THREADS goes with its value so that a printed command runs the same elsewhere.
cmd+=(-x "OMP_NUM_THREADS=$OMP_NUM_THREADS" -x PATH)
[ -n "${LD_LIBRARY_PATH:-}" ] && cmd+=(-x LD_LIBRARY_PATH)
[ -n "${CUDA_VISIBLE_DEVICES+set}" ] && cmd+=(-x CUDA_VISIBLE_DEVICES)
for name in $(compgen -e | grep -E '^(NCCL_|OMP_|OPENBLAS_NUM_THREADS$)' | grep -vx OMP_NUM_THREADS || true); do
    cmd+=(-x "$name")
done
cmd+=("$@")

if [ "$print" = 1 ]; then
    line=""
    for word in "${cmd[@]}"; do line+="${line:+ }$(quote "$word")"; done
    echo "$line"
    exit 0
fi

command -v "$mpirun" >/dev/null ||
    die "mpirun not found ('$mpirun'): install Open MPI (apt-get install openmpi-bin) or give --mpirun PATH"
# The flags above (-x, --map-by ppr, --oversubscribe) are Open MPI's; MPICH's mpirun would misread them.
"$mpirun" --version 2>/dev/null | grep -q 'Open MPI' ||
    die "'$mpirun' is not Open MPI's mpirun (this wrapper builds Open MPI flags; for MPICH use its mpiexec directly)"

# The signal a stop is relayed as: the program's --stop_signal, which mpirun forwards to every process.
# With `--stop_signal none` the program has none, and mpirun gets SIGTERM: it ends the processes its way.
stop_signal=USR1
for ((i = 1; i <= $#; i++)); do
    case "${!i}" in
    --stop_signal=*) choice=${!i#*=} ;;
    --stop_signal) j=$((i + 1)); choice=${!j:-} ;;
    *) continue ;;
    esac
    case "$choice" in usr2) stop_signal=USR2 ;; none) stop_signal=TERM ;; *) stop_signal=USR1 ;; esac
done
# mpirun under setsid, away from the terminal: Ctrl-C and a closed terminal reach this script alone, which
# relays them.
setsid "${cmd[@]}" &
pid=$!
relay() {
    echo "launch.sh: SIG$1: the processes stop after their step with a checkpoint (a second signal ends them now)" >&2
    kill -"$stop_signal" "$pid" 2>/dev/null || true
}
for signal in INT TERM HUP USR1 USR2; do
    # shellcheck disable=SC2064 # the signal's name, fixed now on purpose
    trap "relay $signal" "$signal"
done
# wait returns early when a trapped signal arrives: wait again until mpirun has ended, with its status
status=0
while :; do
    wait "$pid" && status=0 || status=$?
    kill -0 "$pid" 2>/dev/null || break
done
exit "$status"
