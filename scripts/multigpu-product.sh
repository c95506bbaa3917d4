#!/usr/bin/env bash
# The product on a multi-GPU node (issue [9 of 9], "The product on a multi-GPU node"), run by
# scripts/multigpu-session.sh product: fp8d --standalone finds the GPUs through NVML; an
# all-GPU fp8 data-parallel job submitted with fp8ctl is preempted with `fp8ctl preempt` after its
# step-100 checkpoint, resumes, and its losses after the resume equal an uninterrupted run's; a
# SIGKILLed rank restarts the gang from its checkpoint; smaller jobs (a 2-GPU and 1-GPU jobs on 4+
# GPUs) share the node by gang placement while an all-GPU job waits. Logs under $OUT/product.
# Exits 1 when a check fails.
set -uo pipefail
OUT=${OUT:-out}/product
B=${FP8RT_BIN:-bundle/bin}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
mkdir -p "$OUT"
export FP8D_DATA_DIR=$OUT/fp8d NCCL_NVLS_ENABLE=0
rm -rf "$FP8D_DATA_DIR"
rc=0
fail() { echo "FAIL: $*"; rc=1; }
ctl() { "$B/fp8ctl" "$@"; }
field() {  # job expr: a Python expression over the job's JSON `j`
  ctl status "$1" --json | python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"
}
wait_for() {  # job expr timeout_s
  for _ in $(seq 1 $(( $3 * 2 ))); do
    [ "$(field "$1" "$2")" = True ] && return 0
    sleep 0.5
  done
  return 1
}

"$B/fp8d" --standalone --port 0 --fp8train "$B/fp8train" --stop-grace 60 \
  > "$OUT/fp8d.log" 2>&1 &
FP8D=$!
trap 'kill -TERM $FP8D 2>/dev/null; wait $FP8D 2>/dev/null' EXIT
for _ in $(seq 1 100); do [ -s "$FP8D_DATA_DIR/server" ] && break; sleep 0.1; done
ctl nodes | tee "$OUT/nodes.txt"
grep -q "${NGPU}x" "$OUT/nodes.txt" || fail "fp8d did not find $NGPU GPUs through NVML"

# gpt2-124m shape on the corpus, data parallel over every GPU, checkpoints every 100 steps.
sed -e "s|\.\./data/|$(pwd)/data/|" -e "s/total_steps: 2000/total_steps: 300/" \
  -e "s/log_every: 1}/log_every: 1, checkpoint_every: 100}/" configs/gpt2-124m.yaml > "$OUT/dp.yaml"
grep -q "checkpoint_every: 100" "$OUT/dp.yaml" || fail "could not write the job's config"

echo "== an uninterrupted $NGPU-GPU fp8 job"
A=$(ctl submit "$OUT/dp.yaml" --gpus "$NGPU" --name plain --wait 2> "$OUT/plain.txt")
c=$?; tail -3 "$OUT/plain.txt"; [ $c -eq 0 ] || fail "job $A did not complete (exit $c)"
ctl status "$A" | tee "$OUT/status_plain.txt"

echo "== the same job, preempted after its step-100 checkpoint, then resumed"
P=$(ctl submit "$OUT/dp.yaml" --gpus "$NGPU" --name preempted)
wait_for "$P" "j['state'] == 'RUNNING' and j['checkpoint_step'] >= 100" 300 || fail "job $P never passed step 100"
ctl preempt "$P" | tee "$OUT/preempt.txt"
wait_for "$P" "j['state'] in ('COMPLETED', 'FAILED', 'CANCELLED')" 600 || fail "job $P did not end"
ctl events "$P" | tee "$OUT/events_preempted.txt"
grep -q "PREEMPTING -> PREEMPTED" "$OUT/events_preempted.txt" || fail "job $P was not preempted"
[ "$(field "$P" "j['state']")" = COMPLETED ] || fail "job $P did not complete"
python3 - "$FP8D_DATA_DIR/node/jobs/$A/metrics.jsonl" "$FP8D_DATA_DIR/node/jobs/$P/metrics.jsonl" \
  <<'PY' | tee "$OUT/resume_check.txt" || rc=1
import json, sys
def losses(p):
    return {j["step"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j}
a, p = losses(sys.argv[1]), losses(sys.argv[2])
first = min(p)
same = sum(a[s] == p[s] for s in p)
worst = max(abs(a[s] - p[s]) for s in p)
print(f"resumed at step {first}: {same} of {len(p)} losses identical to the uninterrupted run, "
      f"largest difference {worst:.3g}")
sys.exit(0 if first > 100 and same == len(p) else 1)
PY

echo "== a SIGKILLed rank: the gang restarts from its checkpoint"
K=$(ctl submit "$OUT/dp.yaml" --gpus "$NGPU" --name killed)
wait_for "$K" "j['state'] == 'RUNNING' and j['checkpoint_step'] >= 100" 300 || fail "job $K never passed step 100"
pid=$(python3 -c "import json; r=[x for x in json.load(open('$FP8D_DATA_DIR/node/ranks.json')) if x['job']==$K]; print(r[-1]['pid'])")
kill -9 "$pid"
wait_for "$K" "j['state'] in ('COMPLETED', 'FAILED', 'CANCELLED')" 600 || fail "job $K did not end"
ctl events "$K" | tee "$OUT/events_killed.txt"
[ "$(field "$K" "j['state']")" = COMPLETED ] || fail "job $K did not complete"
[ "$(field "$K" "j['restarts']")" = 1 ] || fail "job $K was not restarted once"

echo "== smaller jobs share the node (with 4+ GPUs a 2-GPU job among them); an all-GPU job waits"
sed "s/total_steps: 300/total_steps: 400/" "$OUT/dp.yaml" > "$OUT/one.yaml"
ones=()
sizes=(); left=$NGPU
[ "$NGPU" -ge 4 ] && { sizes+=(2); left=$((NGPU - 2)); }
for _ in $(seq 1 "$left"); do sizes+=(1); done
for g in "${sizes[@]}"; do ones+=("$(ctl submit "$OUT/one.yaml" --gpus "$g" --name "share$g")"); done
W=$(ctl submit "$OUT/dp.yaml" --gpus "$NGPU" --name waits)
for j in "${ones[@]}"; do
  wait_for "$j" "j['state'] == 'RUNNING'" 120 || fail "job $j (${sizes[*]} GPUs) did not run"
done
ctl list | tee "$OUT/sharing.txt"
gpus=$(for j in "${ones[@]}"; do field "$j" "' '.join(str(g) for p in j['placement'] for g in p['gpus'])"; done | tr ' ' '\n' | sort)
echo "GPUs held by the sharing jobs: $(echo $gpus)" | tee -a "$OUT/sharing.txt"
[ "$(echo "$gpus" | sort -u | wc -l)" = "$NGPU" ] && [ "$(echo "$gpus" | wc -l)" = "$NGPU" ] ||
  fail "the sharing jobs (${sizes[*]} GPUs) do not each have their own GPUs"
[ "$(field "$W" "j['state']")" = PENDING ] || fail "job $W did not wait"
field "$W" "j['reason']" | tee -a "$OUT/sharing.txt"
wait_for "$W" "j['state'] == 'COMPLETED'" 900 || fail "job $W did not complete after the others"
for j in "${ones[@]}"; do [ "$(field "$j" "j['state']")" = COMPLETED ] || fail "job $j"; done
ctl list | tee -a "$OUT/sharing.txt"
python3 - "$FP8D_DATA_DIR" "$A" <<'PY' | tee "$OUT/throughput.txt"
import json, statistics, sys
m = [json.loads(l) for l in open(f"{sys.argv[1]}/node/jobs/{sys.argv[2]}/metrics.jsonl")]
t = [x["tokens_per_s"] for x in m if "tokens_per_s" in x and x["step"] > 20]
print(f"uninterrupted job: median {statistics.median(t):.0f} tok/s over steps > 20 ({len(t)} steps)")
PY
echo "product: exit $rc"
exit $rc
