#!/usr/bin/env bash
# fp8train under a real Slurm on this one machine: munged, slurmctld and slurmd started in a
# temporary directory (their own socket, ports, state and logs; nothing of /etc is used), then
#   a. `srun -n 2` of fp8train gives the same per-step losses as `mpirun -np 2` (both on Gloo);
#   b. scripts/slurm/fp8-pretrain.sbatch (its GPU lines removed) is requeued twice while it trains:
#      `scontrol requeue` (SIGTERM to the ranks) and `scancel --signal=USR1` (what the script's
#      --signal=USR1@120 sends before the time limit: the ranks checkpoint, exit 3, and the script
#      requeues itself); each requeue resumes from the checkpoint written at the signal, and every
#      step's loss equals the uninterrupted srun run of part a.
# Usage: tests/slurm/run-slurm-test.sh [FP8TRAIN]  (default: $FP8TRAIN, else build-cpu/ or build/
#        runtime/fp8train). Exit 0 pass, 1 fail, 77 skipped (not root, or Slurm, munge or mpirun
#        missing: scripts/install-deps.sh installs them). About 100 s on 2 cores.
# Environment: FP8RT_SLURM_KEEP=1 keeps the temporary directory (logs, metrics, checkpoints);
# FP8RT_SLURM_TEST_TIMEOUT (default 540 s) bounds the whole test.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PATH=$PATH:/usr/sbin:/sbin
START=$SECONDS
KEEP=${FP8RT_SLURM_KEEP:-0} LIMIT=${FP8RT_SLURM_TEST_TIMEOUT:-540}   # read before FP8RT_* is cleared
say() { echo "slurm-test: $*"; }
skip() { say "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (slurmd launches the job's tasks)"
for c in munged munge unmunge slurmctld slurmd slurmstepd srun sbatch scontrol sinfo squeue \
         scancel mpirun python3 timeout getent; do
  command -v "$c" >/dev/null 2>&1 || skip "'$c' is not installed (scripts/install-deps.sh: slurm-wlm munge openmpi-bin)"
done
BIN=${1:-${FP8TRAIN:-}}
if [ -z "$BIN" ]; then
  for b in "$ROOT/build-cpu/runtime/fp8train" "$ROOT/build/runtime/fp8train"; do
    [ -x "$b" ] && BIN=$b && break
  done
fi
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then say "FAIL: no fp8train binary (give its path)"; exit 1; fi
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

# This test is its own cluster: nothing inherited from a surrounding job or launcher.
for v in $(env | sed -n 's/^\(\(SLURM\|SBATCH\|SRUN\|SALLOC\|OMPI\|PMIX\|FP8RT\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
  unset "$v"
done

T=$(mktemp -d /tmp/fp8rt-slurm.XXXXXX)
chmod 755 "$T"
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/log" "$T/run"
BG_PIDS=() MUNGED_PID="" CTLD_PID="" SLURMD_PID="" FAILED=0

# Stops a daemon we started: SIGTERM, then SIGKILL after 10 s.
stop_pid() {
  local pid=$1 _
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

# Processes that are not this shell's descendants but carry $T in their environment or command
# line (slurmstepd and job tasks inherit SLURM_CONF=$T/slurm.conf): whatever the daemons left.
leftovers() {
  python3 - "$T" "$$" <<'PY'
import os, sys
tag, me = sys.argv[1].encode(), int(sys.argv[2])
def ppid(p):
    try:
        return int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
    except Exception:
        return 0
for p in filter(str.isdigit, os.listdir("/proc")):
    p = int(p)
    try:
        blob = open(f"/proc/{p}/environ", "rb").read() + open(f"/proc/{p}/cmdline", "rb").read()
    except Exception:
        continue
    if tag not in blob:
        continue
    q, ours = p, False
    while q > 1:
        if q == me:
            ours = True
            break
        q = ppid(q)
    if not ours:
        print(p)
PY
}

diagnostics() {
  echo "---- diagnostics (temporary directory $T)"
  if [ -n "$CTLD_PID" ] && kill -0 "$CTLD_PID" 2>/dev/null; then
    timeout 10 sinfo -N -l 2>&1; timeout 10 sinfo -R 2>&1; timeout 10 squeue -l 2>&1
    for j in ${JOB_B:-}; do timeout 10 scontrol show job "$j" 2>&1; done
  fi
  local f
  for f in "$T"/log/*.log "$T"/log/*.out "$T"/run/*.log "$T"/run/*.out "$T"/run/*.err; do
    [ -s "$f" ] || continue
    [[ $f == *d.out && -s ${f%.out}.log ]] && continue   # a daemon's stderr repeats its log
    echo "---- tail -n 25 $f"
    tail -n 25 "$f"
  done
}

cleanup() {
  local rc=$? p _ jobs=() pids=()
  trap - EXIT INT TERM
  [ "$FAILED" -eq 1 ] && rc=1
  if [ -n "$CTLD_PID" ] && kill -0 "$CTLD_PID" 2>/dev/null; then
    mapfile -t jobs < <(timeout 10 squeue -h -o %i 2>/dev/null)
    if [ ${#jobs[@]} -gt 0 ]; then
      say "cancelling leftover job(s) ${jobs[*]}"
      timeout 10 scancel "${jobs[@]}" 2>/dev/null
      for _ in $(seq 60); do [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    fi
  fi
  for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && diagnostics
  stop_pid "$SLURMD_PID"; stop_pid "$CTLD_PID"; stop_pid "$MUNGED_PID"
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  sleep 0.5
  mapfile -t pids < <(leftovers)
  if [ ${#pids[@]} -gt 0 ]; then
    say "killing leftover processes: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null
  fi
  if [ "$KEEP" = 1 ]; then say "kept $T"; else rm -rf "$T"; fi
  say "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (exit $rc)") in $((SECONDS - START)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

fail() { say "FAIL: $*"; FAILED=1; exit 1; }

# Every wait below is bounded, and all of them together by DEADLINE (ctest's TIMEOUT should be
# longer, so that this script, not a SIGKILL, stops what it started).
DEADLINE=$((START + LIMIT))
bounded() {  # secs: min(secs, time left before the deadline)
  local left=$((DEADLINE - SECONDS))
  [ "$left" -gt 0 ] || return 1
  echo $(($1 < left ? $1 : left))
}

# Polls `cmd...` every 0.2 s until it succeeds; fails naming `what` after `secs` seconds.
wait_for() {
  local secs what=$2 end
  secs=$(bounded "$1") || fail "the test ran past its deadline of $((DEADLINE - START)) s"
  shift 2
  end=$((SECONDS + secs))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || fail "timed out after ${secs} s waiting for $what"
    sleep 0.2
  done
}

# Runs `cmd...` under `timeout secs` in the background (so Ctrl-C is handled at once), output to
# `log`; returns its exit code.
run_logged() {
  local secs log=$2 pid rc
  secs=$(bounded "$1") || fail "the test ran past its deadline of $((DEADLINE - START)) s"
  shift 2
  timeout "$secs" "$@" > "$log" 2>&1 &
  pid=$!
  BG_PIDS+=("$pid")
  wait "$pid"
  rc=$?
  [ "$rc" -eq 124 ] && say "'$*' timed out after $secs s"
  return "$rc"
}

free_ports() {
  python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])'
}

# ---- munge: a fresh key, our own socket
say "temporary directory $T; fp8train $BIN"
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$T/munge/munge.key"
SOCK=$T/munge/munge.socket
munged -F -f --socket="$SOCK" --key-file="$T/munge/munge.key" --pid-file="$T/munge/munged.pid" \
  --log-file="$T/munge/munged.log" --seed-file="$T/munge/munged.seed" > "$T/log/munged.out" 2>&1 &
MUNGED_PID=$!
munge_ok() { munge -n -S "$SOCK" 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1; }
wait_for 20 "munged to answer on $SOCK" munge_ok

# ---- slurm.conf: one node (this host, 127.0.0.1), every path in $T
NODE=$(hostname -s 2>/dev/null)
getent hosts "$NODE" >/dev/null 2>&1 || NODE=localhost   # fp8train resolves the node name
CPUS=$(nproc); [ "$CPUS" -ge 2 ] || CPUS=2               # config_overrides: 2 tasks always fit
read -r CTLD_PORT SLURMD_PORT < <(free_ports)
FIRST_JOB=$((100 + RANDOM % 9000))   # fp8train's default rendezvous port derives from the job id
touch "$T/plugstack.conf"
export SLURM_CONF=$T/slurm.conf
cat > "$SLURM_CONF" <<EOF
# Written by tests/slurm/run-slurm-test.sh: a one-node cluster in $T.
ClusterName=fp8rt-test
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's restart (default 120 s)
AuthInfo=socket=$SOCK,cred_expire=5
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$T/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=1
MpiDefault=none
JobRequeue=1
FirstJobId=$FIRST_JOB
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
MinJobAge=600
InactiveLimit=0
MailProg=/bin/true
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -f "$SLURM_CONF" > "$T/log/slurmctld.out" 2>&1 &
CTLD_PID=$!
slurmd -D -f "$SLURM_CONF" -N "$NODE" > "$T/log/slurmd.out" 2>&1 &
SLURMD_PID=$!
node_idle() {
  kill -0 "$CTLD_PID" 2>/dev/null || fail "slurmctld exited"
  kill -0 "$SLURMD_PID" 2>/dev/null || fail "slurmd exited"
  [ "$(timeout 10 sinfo -h -N -n "$NODE" -o %t 2>/dev/null)" = idle ]
}
wait_for 60 "node $NODE to be idle in sinfo" node_idle
say "cluster up in $((SECONDS - START)) s: node $NODE ($CPUS CPUs), slurmctld :$CTLD_PORT," \
    "slurmd :$SLURMD_PORT"

# ---- the run: tiny GPT, 60 steps, a checkpoint every 5, Gloo under both launchers
CORPUS=$ROOT/data/corpus.txt
if [ ! -s "$CORPUS" ]; then   # as tests/common/corpus.cc: the license texts Debian ships
  CORPUS=$T/corpus.txt
  find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$CORPUS"
  [ "$(wc -c < "$CORPUS")" -gt 10000 ] || fail "no corpus: $ROOT/data/corpus.txt is missing" \
    "(scripts/make-corpus.sh) and /usr/share/common-licenses is too small"
fi
STEPS=60
cat > "$T/tiny.yaml" <<EOF
name: slurm-tiny
model: {n_layer: 2, n_embd: 64, n_head: 4, block_size: 64, vocab_size: 256}
data: {train: $CORPUS, format: text}
train: {batch_size: 4, seq_len: 64, total_steps: $STEPS, lr: 0.003, min_lr: 0.0003,
        warmup_steps: 5, log_every: 1, checkpoint_every: 5}
precision: fp8
fp8: {history_len: 16, amax_algo: max}
parallel: {cpu_backend: gloo, scale_check_every: 10, collective_timeout_s: 60}
EOF
cd "$T/run" || fail "cd $T/run"

# Compares the metrics (rows with a loss) of two files step by step: loss and grad_norm must be
# bit-identical (the same backend and summation order on the CPU). Every row of the second file
# is checked, so a step run twice (before and after a requeue) must agree with itself too.
same_losses() {
  python3 - "$@" <<'PY'
import json, sys
a_path, b_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def rows(p):
    return [json.loads(l) for l in open(p) if '"loss"' in l]
a = {r["step"]: r for r in rows(a_path)}
b = rows(b_path)
bad = [r["step"] for r in b if r["step"] not in a or
       (r["loss"], r["grad_norm"]) != (a[r["step"]]["loss"], a[r["step"]]["grad_norm"])]
missing = sorted(set(range(1, steps + 1)) - {r["step"] for r in b})
print(f"  {len(b)} rows of {b_path.split('/')[-1]} against {a_path.split('/')[-1]}: "
      f"final loss {b[-1]['loss'] if b else None!r} vs {a[steps]['loss'] if steps in a else None!r}; "
      f"steps differing: {bad or 'none'}; steps missing: {missing or 'none'}")
sys.exit(1 if bad or missing or len(a) != steps else 0)
PY
}

# ---- a. srun -n 2 against mpirun -np 2
t0=$SECONDS
say "a. srun -n 2 fp8train ($STEPS steps)"
run_logged 240 "$T/run/a_srun.log" srun -n 2 --kill-on-bad-exit=1 --time=4 "$BIN" \
  --config "$T/tiny.yaml" --device cpu --checkpoint-dir "$T/ck_srun" --metrics "$T/run/a_srun.jsonl" \
  || fail "srun -n 2 fp8train exited $? (log: a_srun.log)"
grep -q "2 rank(s) via srun, collectives on gloo" "$T/run/a_srun.log" \
  || fail "the srun ranks did not say '2 rank(s) via srun, collectives on gloo'"
say "a. mpirun -np 2 fp8train"
run_logged 240 "$T/run/a_mpirun.log" mpirun --allow-run-as-root --oversubscribe --bind-to none \
  --mca btl self,tcp -np 2 "$BIN" --config "$T/tiny.yaml" --device cpu \
  --checkpoint-dir "$T/ck_mpirun" --metrics "$T/run/a_mpirun.jsonl" \
  || fail "mpirun -np 2 fp8train exited $? (log: a_mpirun.log)"
grep -q "2 rank(s) via mpirun, collectives on gloo" "$T/run/a_mpirun.log" \
  || fail "the mpirun ranks did not say '2 rank(s) via mpirun, collectives on gloo'"
same_losses "$T/run/a_mpirun.jsonl" "$T/run/a_srun.jsonl" "$STEPS" \
  || fail "srun and mpirun losses differ (tolerance: bit-identical)"
say "a. passed in $((SECONDS - t0)) s: srun and mpirun losses bit-identical over $STEPS steps"

# ---- b. the sbatch example, requeued twice
t0=$SECONDS
sed -e '/^#SBATCH --gpus-per-node/d' -e '/^#SBATCH --exclusive/d' \
  "$ROOT/scripts/slurm/fp8-pretrain.sbatch" > "$T/run/job.sbatch"
CK=$T/ck_job
# SLURM_STDERRMODE: srun's --error for the ranks, written by slurmstepd (so the last lines of a
# signalled rank are kept even when the job's srun is killed with it), appended across restarts.
JOB_B=$(FP8TRAIN=$BIN FP8_CONFIG=$T/tiny.yaml CKPT_DIR=$CK SLURM_STDERRMODE="$T/run/b-rank%t.err" \
  timeout 30 sbatch --parsable --chdir="$T/run" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
  --time=30 --output="$T/run/b_job.out" "$T/run/job.sbatch" --device cpu \
  --metrics "$T/run/b_job.jsonl") || fail "sbatch failed"
say "b. sbatch scripts/slurm/fp8-pretrain.sbatch: job $JOB_B"
job_field() { timeout 10 scontrol show job -o "$JOB_B" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p"; }
latest() { cat "$CK/LATEST" 2>/dev/null; }
running_with() {   # restarts: the job runs its ${1}th restart
  local s
  s=$(job_field JobState)
  case $s in PENDING | RUNNING | COMPLETING | REQUEUED) ;; *) fail "job $JOB_B is $s";; esac
  [ "$s" = RUNNING ] && [ "$(job_field Restarts)" = "$1" ]
}
new_checkpoint() { [ -n "$(latest)" ] && [ "$(latest)" != "$1" ]; }
resumed_from() {   # the checkpoint the job script's restart $1 resumed from (its first line)
  sed -n "s/^fp8-pretrain: job $JOB_B restart $1: resuming from \(step_[0-9]*\) .*/\1/p" \
    "$T/run/b_job.out" 2>/dev/null | head -1
}
has_resumed() { [ -n "$(resumed_from "$1")" ]; }
[ "$(job_field Requeue)" = 1 ] || fail "job $JOB_B is not requeueable (#SBATCH --requeue)"

wait_for 120 "job $JOB_B to run" running_with 0
wait_for 120 "job $JOB_B's first checkpoint" new_checkpoint ""
say "b. $(latest) written: scontrol requeue $JOB_B (SIGTERM to the ranks)"
timeout 10 scontrol requeue "$JOB_B" || fail "scontrol requeue $JOB_B failed"
wait_for 120 "job $JOB_B to run again after the requeue" running_with 1
wait_for 30 "restart 1 of job $JOB_B to say where it resumes" has_resumed 1
FIRST_RESUME=$(resumed_from 1)
say "b. restarted (Restarts=1) from $FIRST_RESUME"
wait_for 120 "job $JOB_B's first checkpoint after the requeue" new_checkpoint "$FIRST_RESUME"
say "b. $(latest) written: scancel --signal=USR1 $JOB_B (as --signal=USR1@120 before the time limit)"
timeout 10 scancel --signal=USR1 "$JOB_B" || fail "scancel --signal=USR1 $JOB_B failed"
wait_for 120 "the job script to requeue job $JOB_B itself" running_with 2
wait_for 30 "restart 2 of job $JOB_B to say where it resumes" has_resumed 2
SECOND_RESUME=$(resumed_from 2)
say "b. restarted (Restarts=2) from $SECOND_RESUME"
job_done() {
  local s
  s=$(job_field JobState)
  case $s in COMPLETED) return 0 ;; PENDING | RUNNING | COMPLETING | REQUEUED) return 1 ;; esac
  fail "job $JOB_B ended $s (ExitCode $(job_field ExitCode))"
}
wait_for 240 "job $JOB_B to complete" job_done
[ "$(job_field Restarts)" = 2 ] || fail "job $JOB_B completed after $(job_field Restarts) restarts, not 2"
[ "$(job_field ExitCode)" = 0:0 ] || fail "job $JOB_B exit code $(job_field ExitCode)"

# The job's own account of itself (--open-mode=append keeps every run in one file).
OUTF=$T/run/b_job.out
grep -q "restart 0: starting afresh" "$OUTF" || fail "the first run did not start afresh"
grep -q "fp8train exited 3" "$OUTF" || fail "after SIGUSR1 fp8train did not exit 3 (preempted)"
# Three runs, each continuing right after the step its signal stopped at: rank 0's log (appended
# across restarts) has each stop and the next run's first step, and the metrics every step once.
python3 - "$T/run/b-rank0.err" "$T/run/b_job.jsonl" "$FIRST_RESUME" "$SECOND_RESUME" "$STEPS" <<'PY' \
  || fail "the requeued runs did not continue from their checkpoints"
import json, re, sys
log, metrics, steps = sys.argv[1], sys.argv[2], int(sys.argv[5])
resumes = [int(s[5:]) for s in sys.argv[3:5]]
runs, stops = [[]], []
for line in open(log):
    if m := re.match(r"step (\d+)/", line):
        runs[-1].append(int(m[1]))
    elif m := re.search(r"stopped by signal after step (\d+) \(checkpoint written\)", line):
        stops.append(int(m[1]))
        runs.append([])
print("  rank 0's log: " + ", ".join(f"steps {r[0]}..{r[-1]}" if r else "no steps" for r in runs) +
      f"; stopped by signal after steps {stops}; restarts resumed from {resumes}")
logged = [json.loads(l)["step"] for l in open(metrics) if '"loss"' in l]
print(f"  metrics: {len(logged)} rows, steps " +
      ("1.." + str(steps) + " each once" if logged == list(range(1, steps + 1)) else str(logged)))
ok = (stops == resumes and len(runs) == 3 and all(runs) and runs[0][0] == 1 and
      all(runs[i][-1] == stops[i] and runs[i + 1][0] == stops[i] + 1 for i in range(2)) and
      runs[2][-1] == steps and logged == list(range(1, steps + 1)))
sys.exit(0 if ok else 1)
PY
same_losses "$T/run/a_srun.jsonl" "$T/run/b_job.jsonl" "$STEPS" \
  || fail "the requeued job's losses differ from the uninterrupted run (tolerance: bit-identical)"
say "b. passed in $((SECONDS - t0)) s: requeued at $FIRST_RESUME (SIGTERM) and $SECOND_RESUME" \
    "(SIGUSR1), resumed there, losses bit-identical to the uninterrupted run"
