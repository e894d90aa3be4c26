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
submit() { # NAME: the job script on train_cpu into $TMP/NAME (OUT_DIR) and $TMP/NAME.out; prints the job id
    sbatch --parsable --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=10:00 \
        --output="$TMP/$1.out" \
        --export="ALL,TRAINER=./train_cpu,MODEL_FLAGS=$model,OUT_DIR=$TMP/$1,TRAIN_DATA=$TMP/data/text_train_*.bin,VAL_DATA=$TMP/data/text_val_*.bin" \
        scripts/slurm_train.sbatch
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
for ((i = 0; i < 1200; i++)); do
    [ "$(logged_steps "$TMP/stopped/train.jsonl")" -ge 3 ] && break
    sleep 0.1
done
scancel --batch --signal=USR1 "$job"
# requeued: pending again, its restart counted
for ((i = 0; i < 1200; i++)); do
    [ "$(job_field "$job" Restarts)" = 1 ] && [ "$(job_field "$job" JobState)" = PENDING ] && break
    sleep 0.1
done
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
finish
