#!/usr/bin/env bash
# `apiary sweep` on a real Slurm: a one-node slurmctld + slurmd (Debian's slurm-wlm, with
# munge for authentication) started on loopback in a temporary folder, the committed
# example sweep planned into a folder, `apiary sweep slurm` writing the job-array
# script, sbatch running its shards as array tasks (SLURM_ARRAY_TASK_ID picks each
# one's cells), the merge job waiting on the array, and its results.csv compared byte
# for byte with the same sweep run by the local thread pool.
#
# Needs root (the daemons run as root), slurm-wlm and munge; installs them with apt-get
# when they are missing. CI runs it after the test suite. Usage:
#   scripts/slurm-sweep-test.sh [path/to/apiary]    (default: builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

if [ $# -ge 1 ]; then
  APIARY=$(realpath "$1")
else
  cargo build --release --locked -q -p apiary-cli
  APIARY=$ROOT/target/release/apiary
fi

T=$(mktemp -d /tmp/apiary-slurm.XXXXXX)
cleanup() {
  local rc=$?
  for p in slurmd slurmctld munged; do
    [ -f "$T/$p.pid" ] && kill "$(cat "$T/$p.pid")" 2>/dev/null || true
  done
  sleep 1
  if [ $rc -ne 0 ]; then
    echo "--- slurmctld log" >&2; tail -n 30 "$T/slurmctld.log" 2>/dev/null >&2 || true
    echo "--- slurmd log" >&2; tail -n 30 "$T/slurmd.log" 2>/dev/null >&2 || true
    echo "--- shard logs" >&2; tail -n 5 "$T"/sweep/logs/* 2>/dev/null >&2 || true
  fi
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT

# munge, on its own key and socket.
mungekey --create --keyfile="$T/munge.key" --force
chmod 600 "$T/munge.key"
munged --force --socket="$T/munge.sock" --key-file="$T/munge.key" \
  --pid-file="$T/munged.pid" --log-file="$T/munged.log" --seed-file="$T/munge.seed"

NODE=$(hostname -s)
CPUS=$(nproc)
mkdir -p "$T/state" "$T/spool"
export SLURM_CONF=$T/slurm.conf
cat > "$SLURM_CONF" <<EOF
ClusterName=apiarytest
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=sweep Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -i
slurmd
for _ in $(seq 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed)'; then break; fi
  sleep 1
done
sinfo

# The sweep: planned into a folder, its 45 cells in 15 shards of 3, two at a time.
SWEEP=testdata/sweeps/philly-load.toml
"$APIARY" sweep plan "$SWEEP" -o "$T/sweep" > /dev/null 2>&1
SUBMIT=$("$APIARY" sweep slurm "$T/sweep" --count 3 --parallel 2 --apiary "$APIARY" --time 10)
grep -q '^#SBATCH --array=0-14%2$' "$T/sweep/sweep.sbatch"
# Submit exactly as `apiary sweep slurm` says to: the array, then the merge after it.
echo "submitting: $SUBMIT"
eval "$SUBMIT"
for _ in $(seq 300); do
  if [ -z "$(squeue -h 2>/dev/null)" ]; then break; fi
  sleep 1
done
if [ -n "$(squeue -h)" ]; then
  echo "the array did not finish in 5 minutes" >&2
  squeue >&2
  exit 1
fi
cat "$T/sweep/logs/merge.out"
grep -q 'merged 45 of 45 cells' "$T/sweep/logs/merge.out"
# Every shard ran as its own array task.
test "$(ls "$T"/sweep/logs/shard-*.out | wc -l)" -eq 15
grep -l 'from SLURM_ARRAY_TASK_ID' "$T"/sweep/logs/shard-*.out | wc -l | grep -qx 15

# The same sweep through the local thread pool gives the same bytes.
"$APIARY" sweep run "$SWEEP" -o "$T/local" -q
cmp "$T/sweep/results.csv" "$T/local/results.csv"
echo "slurm sweep test: 15 array tasks, merged results.csv identical to the local run"
