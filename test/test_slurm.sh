#!/usr/bin/env bash
# test_slurm.sh: scripts/slurm_train.sbatch on a real one-node Slurm cluster that the test starts (slurmctld
# and slurmd of Debian's slurmctld, slurmd and slurm-client packages, a slurm.conf of its own in a temporary
# directory, ports of their own) and always stops. The job runs ./train_cpu as 2 tasks under srun --mpi=pmix,
# a float8 d2 model (TRAINER and MODEL_FLAGS, the script's own overrides).
#  1. An uninterrupted job: exit 0.
#  2. The same job, sent Slurm's warning signal once 3 steps are logged (`scancel --batch --signal=USR1`, as
#     `#SBATCH --signal=B:USR1@300` sends it): the script relays it to srun, every rank checkpoints the same
#     step and exits 75, the job requeues itself (Restarts=1), and once it runs again (its begin time, which
#     Slurm delays by two minutes after a requeue, set to now) it resumes and completes; its final model,
#     state files and log steps equal job 1's byte for byte, and its output holds both runs (--open-mode=append).
#  3. The same job with every fsync slowed by half a second (test/slow_fsync_shim.c: a checkpoint of some 4 s),
#     cancelled by a plain `scancel JOB` once 3 steps are logged: Slurm sends SIGTERM to the tasks, srun and
#     the script alike, and refuses srun's kill of its tasks for a job that is ending, so both ranks
#     checkpoint the same step and exit 75, and the script waits for them and exits 75 without a requeue (the
#     job CANCELLED, ExitCode 75:0), no temp file left; submitted again, the job resumes and ends
#     byte-identical to job 1.
#  4. Slurm's time limit without the warning: a long job (100000 steps, fsync slowed) in a reservation that
#     is then ended, which Slurm handles as the time limit (TIMEOUT, Reason=TimeLimit, each task sent SIGTERM
#     twice, milliseconds apart) at its next periodic check, within 30 s: both ranks exit 75 with a complete
#     checkpoint of the same step, and the script requeues the job.
# Without slurmctld, slurmd or sbatch, or without a train_cpu built with MPI, one SKIPPED line, exit 0.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
test_init
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

for tool in slurmctld slurmd sbatch scontrol scancel srun; do
    if ! command -v "$tool" >/dev/null && ! [ -x "/usr/sbin/$tool" ]; then
        echo "SKIPPED test_slurm: $tool not installed (apt-get install slurmctld slurmd slurm-client)"
        exit 0
    fi
done
if ! grep -q libmpi <<<"$(ldd ./train_cpu)"; then
    echo "SKIPPED test_slurm: ./train_cpu is built without MPI (apt-get install libopenmpi-dev openmpi-bin)"
    exit 0
fi
export PATH="$PATH:/usr/sbin"

TMP=$(mktemp -d /tmp/test_slurm.XXXXXX)
CLUSTER="$TMP/slurm"
# the daemons by their pid files, whatever happened, then the directory
slurm_down() {
    local daemon pid
    for daemon in slurmd slurmctld; do
        pid=$(cat "$CLUSTER/$daemon.pid" 2>/dev/null) || continue
        kill "$pid" 2>/dev/null || continue
        for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
}
trap 'slurm_down; rm -rf "$TMP"' EXIT

# Two free TCP ports (the controller's and the node daemon's), not Slurm's defaults: a Slurm on this machine
# is left alone.
read -r ctld_port slurmd_port < <("$PY" -c "
import socket
ports = []
for _ in range(2):
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    ports.append(s)
print(*[s.getsockname()[1] for s in ports])")
host=$(hostname -s)
mkdir -p "$CLUSTER/state" "$CLUSTER/spool"
: >"$CLUSTER/plugstack.conf" # no SPANK plugins from /etc/slurm
# No cgroups (a container has none to delegate): processes tracked by their parent pids, no task binding.
# auth/none: no munge key to share (Slurm 23.11 removed it; there AuthType=auth/munge with munged started).
# config_overrides: the node is taken to have the 2 CPUs configured here, whatever it has. Addresses are
# given: the host's name need not resolve.
cat >"$CLUSTER/slurm.conf" <<EOF
ClusterName=test-slurm
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/none
CredType=cred/none
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
StateSaveLocation=$CLUSTER/state
SlurmdSpoolDir=$CLUSTER/spool
SlurmctldPidFile=$CLUSTER/slurmctld.pid
SlurmdPidFile=$CLUSTER/slurmd.pid
SlurmctldLogFile=$CLUSTER/slurmctld.log
SlurmdLogFile=$CLUSTER/slurmd.log
PlugStackConfig=$CLUSTER/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$CLUSTER/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for ((i = 0; i < 300; i++)); do
    [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && break
    sleep 0.1
done
if [ "$(sinfo -h -o %t 2>/dev/null)" != idle ]; then
    bad "the one-node cluster did not come up (node state '$(sinfo -h -o %t 2>/dev/null || true)'; $CLUSTER/*.log):"
    tail -5 "$CLUSTER/slurmctld.log" "$CLUSTER/slurmd.log" || true
    finish || exit 1
fi
ok "a one-node Slurm cluster (slurmctld and slurmd $(slurmd -V | cut -d' ' -f2), ports $ctld_port and $slurmd_port)"

test_data_dir "$TMP/data" text
steps=300
model="--model_size d2 --vocab 256 --seq_len 32 --batch_size 4 --dtype float8 --lr_schedule constant --steps $steps"
# A checkpoint that takes time: the trainer with each fsync half a second longer (test/slow_fsync_shim.c)
printf '#!/bin/sh\nLD_PRELOAD=%s SLOW_FSYNC_S=0.5 exec %s "$@"\n' "$PWD/test/build/slow_fsync_shim.so" \
    "$PWD/train_cpu" >"$TMP/slow_train_cpu"
chmod +x "$TMP/slow_train_cpu"
submit() { # NAME [TRAINER [MODEL_FLAGS [SBATCH_FLAG...]]]: the job script into $TMP/NAME (OUT_DIR) and
    #        $TMP/NAME.out, on ./train_cpu with $model unless told; prints the job id
    local name=$1 trainer=${2:-./train_cpu} flags=${3:-$model}
    shift $(($# < 3 ? $# : 3))
    sbatch --parsable --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=10:00 \
        --output="$TMP/$name.out" \
        --export="ALL,TRAINER=$trainer,MODEL_FLAGS=$flags,OUT_DIR=$TMP/$name,TRAIN_DATA=$TMP/data/text_train_*.bin,VAL_DATA=$TMP/data/text_val_*.bin" \
        "$@" scripts/slurm_train.sbatch
}
complete_checkpoint() { # DIR STEP: the step's model file and both ranks' state files, no temp file left
    [ -f "$(step_file "$1" model "$2" .bin)" ] && [ -f "$(step_file "$1" state "$2" _00000.bin)" ] &&
        [ -f "$(step_file "$1" state "$2" _00001.bin)" ] && [ "$(find "$1" -name '*.tmp*' | wc -l)" = 0 ]
}
wait_steps() { # DIR N: until DIR/train.jsonl holds N steps (at most 120 s)
    for ((i = 0; i < 1200; i++)); do
        [ "$(logged_steps "$1/train.jsonl")" -ge "$2" ] && break
        sleep 0.1
    done
}
wait_requeued() { # JOB: until it is pending again, its restart counted (at most 120 s)
    for ((i = 0; i < 1200; i++)); do
        [ "$(job_field "$1" Restarts)" = 1 ] && [ "$(job_field "$1" JobState)" = PENDING ] && break
        sleep 0.1
    done
}
job_field() { # JOB FIELD: a field of `scontrol show job` (the job stays listed for MinJobAge, 300 s)
    scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
wait_ended() { # JOB: until it is COMPLETED, FAILED or CANCELLED (at most 120 s); prints the state
    local state=""
    for ((i = 0; i < 1200; i++)); do
        state=$(job_field "$1" JobState)
        case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
        sleep 0.1
    done
    echo "$state"
}

job=$(submit straight)
state=$(wait_ended "$job")
if [ "$state" = COMPLETED ] && [ "$(job_field "$job" ExitCode)" = 0:0 ]; then
    ok "the uninterrupted job ($steps steps, 2 tasks): COMPLETED, exit 0"
else
    bad "the uninterrupted job: $state, exit $(job_field "$job" ExitCode) ($TMP/straight.out:)"
    tail -5 "$TMP/straight.out"
fi

job=$(submit stopped)
wait_steps "$TMP/stopped" 3
scancel --batch --signal=USR1 "$job"
wait_requeued "$job"
latest=$(cat "$TMP/stopped/latest_checkpoint" 2>/dev/null || echo none)
if [ "$(job_field "$job" Restarts)" = 1 ] && [ "$(job_field "$job" JobState)" = PENDING ] &&
    grep -q "tasks 0-1: Exited with exit code 75" "$TMP/stopped.out" && [ "$latest" != none ] &&
    [ "$latest" -lt "$steps" ] && [ -f "$(step_file "$TMP/stopped" state "$latest" _00000.bin)" ] &&
    [ -f "$(step_file "$TMP/stopped" state "$latest" _00001.bin)" ]; then
    ok "scancel --batch --signal=USR1: both tasks exit 75 with a checkpoint of step $latest, the job requeued"
else
    bad "the warning signal: job $(job_field "$job" JobState), restarts $(job_field "$job" Restarts), latest_checkpoint $latest ($TMP/stopped.out:)"
    tail -5 "$TMP/stopped.out"
fi
# Slurm holds a requeued job back for some two minutes, time for the first run's processes to end; the test
# waits for exactly that (no process of the job left on the node), then lets it start
for ((i = 0; i < 1200; i++)); do
    [ "$(scontrol listpids "$job" 2>/dev/null | tail -n +2 | wc -l)" = 0 ] && break
    sleep 0.1
done
scontrol update JobId="$job" StartTime=now 2>/dev/null || true # not pending: the check above failed
state=$(wait_ended "$job")
runs=$(grep -c '^train_cpu | model' "$TMP/stopped.out" || true)
if [ "$state" = COMPLETED ] && [ "$(job_field "$job" ExitCode)" = 0:0 ] && [ "$runs" = 2 ] &&
    grep -q "^resumed | step $latest " "$TMP/stopped.out"; then
    ok "the requeued job resumed from step $latest and completed, its output appended to the first run's"
else
    bad "the requeued job: $state, exit $(job_field "$job" ExitCode), $runs runs in its output ($TMP/stopped.out:)"
    tail -5 "$TMP/stopped.out"
fi
cp "$TMP/straight/train.jsonl" "$TMP/straight.jsonl"
cp "$TMP/stopped/train.jsonl" "$TMP/stopped.jsonl"
same_end "the requeued job" "$TMP/stopped" "$TMP/straight" "$steps" 2

# A plain scancel (Slurm's SIGTERM to every process of the job, SIGKILL after KillWait) while a checkpoint
# takes some 4 s
job=$(submit cancelled "$TMP/slow_train_cpu")
wait_steps "$TMP/cancelled" 3
start=$SECONDS
scancel "$job"
state=$(wait_ended "$job")
took=$((SECONDS - start))
latest=$(cat "$TMP/cancelled/latest_checkpoint" 2>/dev/null || echo none)
if [ "$state" = CANCELLED ] && [ "$(job_field "$job" ExitCode)" = 75:0 ] && [ "$(job_field "$job" Restarts)" = 0 ] &&
    grep -q "tasks 0-1: Exited with exit code 75" "$TMP/cancelled.out" &&
    grep -q "^stopped | step $latest of $steps | SIGTERM" "$TMP/cancelled.out" &&
    grep -q "the job was cancelled, so not requeued" "$TMP/cancelled.out" && [ "$latest" -lt "$steps" ] &&
    complete_checkpoint "$TMP/cancelled" "$latest"; then
    ok "a plain scancel, fsync slowed: both tasks exit 75 with a checkpoint of step $latest, the job CANCELLED after $took s with exit 75, not requeued"
else
    bad "a plain scancel: job $state, exit $(job_field "$job" ExitCode), restarts $(job_field "$job" Restarts), latest_checkpoint $latest, $(find "$TMP/cancelled" -name '*.tmp*' | wc -l) temp files ($TMP/cancelled.out:)"
    grep -v '^step\|^fp8\|^val' "$TMP/cancelled.out" | tail -8
fi
job=$(submit cancelled)
state=$(wait_ended "$job")
if [ "$state" = COMPLETED ] && [ "$(job_field "$job" ExitCode)" = 0:0 ] &&
    grep -q "^resumed | step $latest " "$TMP/cancelled.out"; then
    ok "the cancelled job, submitted again, resumed from step $latest and completed"
else
    bad "the cancelled job submitted again: $state, exit $(job_field "$job" ExitCode) ($TMP/cancelled.out:)"
    tail -5 "$TMP/cancelled.out"
fi
cp "$TMP/cancelled/train.jsonl" "$TMP/cancelled.jsonl"
same_end "the cancelled job" "$TMP/cancelled" "$TMP/straight" "$steps" 2

# The time limit without the warning: Slurm times out a job whose reservation has ended as one at its time
# limit (the same requests to slurmd), at slurmctld's next check of the time limits (every 30 s)
if scontrol create reservation ReservationName=ending Users="$(id -un)" Nodes="$host" StartTime=now Duration=10 \
    >/dev/null; then
    job=$(submit timed "$TMP/slow_train_cpu" "${model/--steps $steps/--steps 100000}" --reservation=ending)
    wait_steps "$TMP/timed" 3
    scontrol update ReservationName=ending EndTime=now+1 >/dev/null
    start=$SECONDS
    wait_requeued "$job"
    took=$((SECONDS - start))
    latest=$(cat "$TMP/timed/latest_checkpoint" 2>/dev/null || echo none)
    if [ "$(job_field "$job" Restarts)" = 1 ] && [ "$(job_field "$job" JobState)" = PENDING ] &&
        grep -q "CANCELLED AT .* DUE TO TIME LIMIT" "$TMP/timed.out" &&
        grep -q "tasks 0-1: Exited with exit code 75" "$TMP/timed.out" &&
        grep -q "^stopped | step $latest of 100000 | SIGTERM" "$TMP/timed.out" &&
        grep -q "requeued to resume" "$TMP/timed.out" && complete_checkpoint "$TMP/timed" "$latest"; then
        ok "the time limit without the warning: both tasks exit 75 with a checkpoint of step $latest, the job requeued ($took s after the reservation's end)"
    else
        bad "the time limit: job $(job_field "$job" JobState), restarts $(job_field "$job" Restarts), latest_checkpoint $latest, $(find "$TMP/timed" -name '*.tmp*' | wc -l) temp files ($TMP/timed.out:)"
        grep -v '^step\|^fp8\|^val' "$TMP/timed.out" | tail -8
    fi
    scancel "$job" 2>/dev/null || true
else
    bad "scontrol create reservation failed: the time limit's case not run"
fi
finish
