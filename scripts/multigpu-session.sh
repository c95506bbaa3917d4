#!/usr/bin/env bash
# One call on a multi-GPU node (issue [9 of 9]), from the repository root with bundle/ and data/
# carried: collectives, data-parallel equivalence, ZeRO-1, a killed rank, and scaling, with every
# log under $OUT. NVLink multicast stays off (NCCL_NVLS_ENABLE=0, as the device's KINDS.md asks).
# Usage: scripts/multigpu-session.sh [comm] [equiv] [fault] [scaling]   (default: all four)
# Environment: NGPU (default: nvidia-smi's count), STEPS (scaling steps, default 12).
# Written before a multi-GPU machine was lent: the first run is also its test.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
B=bundle/bin
parts=${*:-comm equiv fault scaling}
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
STEPS=${STEPS:-12}
export NCCL_NVLS_ENABLE=0
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
     -x LD_LIBRARY_PATH --mca btl self,tcp)
nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"
cat bundle/VERSION | tee -a "$OUT/device.txt"
sizes=(2); [ "$NGPU" -ge 4 ] && sizes=(2 4)

# Median tokens/s of steps 4.. of a metrics file.
median_tps() {
  python3 - "$1" <<'PY'
import json, statistics, sys
t = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"tokens_per_s"' in l][3:]
print(f"{statistics.median(t):.0f}" if t else "nan")
PY
}

if [[ $parts == *comm* ]]; then
  echo "== collectives"
  for n in "${sizes[@]}"; do
    timeout 120 "${MPI[@]}" -np "$n" $B/fp8rt_comm_check --gpu > "$OUT/comm_check_$n.log" 2>&1
    echo "comm_check $n GPUs exit $?"
    timeout 300 "${MPI[@]}" -np "$n" $B/fp8rt_comm_bench --gpu > "$OUT/comm_bench_$n.md" 2>&1
    echo "comm_bench $n GPUs exit $?"; cat "$OUT/comm_bench_$n.md"
  done
  # Two "nodes": no NVLink/P2P, no shared memory: NCCL's network transport over loopback TCP.
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 120 "${MPI[@]}" -x NCCL_P2P_DISABLE \
    -x NCCL_SHM_DISABLE -np 2 $B/fp8rt_comm_check --gpu > "$OUT/comm_check_net.log" 2>&1
  echo "comm_check over the network transport exit $?"
fi

# A small GPT on the GPUs; the same global batch at every dp (batch_size = 8 / dp).
small_config() {  # name dp zero precision
  cat > "$OUT/$1.yaml" <<EOF
name: $1
model: {n_layer: 4, n_embd: 256, n_head: 4, block_size: 256}
data: {train: $(pwd)/data/corpus.txt}
train: {batch_size: $((8 / $2)), seq_len: 256, total_steps: 50, lr: 0.001}
precision: $4
fp8: {first_step_current: false}
parallel: {zero: $3, scale_check_every: 1, collective_timeout_s: 60}
EOF
}
if [[ $parts == *equiv* ]]; then
  echo "== equivalence (losses of steps 1..10; scales checked on every rank every step)"
  for p in bf16 fp8; do
    small_config "eq1_$p" 1 false $p
    timeout 200 $B/fp8train --config "$OUT/eq1_$p.yaml" --steps 10 --metrics "$OUT/eq1_$p.jsonl" \
      --checkpoint-dir "$OUT/ck_eq1_$p" > "$OUT/eq1_$p.log" 2>&1
    echo "dp 1 $p exit $?"
    for n in "${sizes[@]}"; do
      for z in false true; do
        tag=eq${n}_${z}_$p
        small_config "$tag" "$n" $z $p
        timeout 300 "${MPI[@]}" -np "$n" $B/fp8train --config "$OUT/$tag.yaml" --steps 10 \
          --metrics "$OUT/$tag.jsonl" --checkpoint-dir "$OUT/ck_$tag" > "$OUT/$tag.log" 2>&1
        echo "dp $n zero $z $p exit $?"
      done
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/equivalence.md"
import glob, json, os, sys
out = sys.argv[1]
def losses(f):
    return [json.loads(l)["loss"] for l in open(f) if '"loss"' in l] if os.path.exists(f) else []
print("| run | vs dp 1: largest relative loss difference over 10 steps | amax collectives/step |")
print("|---|---:|---|")
for f in sorted(glob.glob(f"{out}/eq[24]_*.jsonl")):
    p = f.rsplit("_", 1)[1].split(".")[0]
    a, b = losses(f"{out}/eq1_{p}.jsonl"), losses(f)
    d = max((abs(x - y) / abs(x) for x, y in zip(a, b)), default=float("nan"))
    amax = sorted({json.loads(l).get("amax_collectives", -1) for l in open(f) if '"loss"' in l})
    print(f"| {os.path.basename(f)[:-6]} | {d:.2e} | {amax} |")
PY
fi

if [[ $parts == *fault* ]]; then
  echo "== a rank killed mid-run (the others must exit 4 naming it, never hang)"
  small_config fault 2 false fp8
  ( timeout 120 "${MPI[@]}" -np 2 $B/fp8train --config "$OUT/fault.yaml" --steps 100000 \
      --metrics "$OUT/fault.jsonl" > "$OUT/fault.log" 2>&1; echo "fault run exit $?" ) &
  runner=$!
  for _ in $(seq 600); do [ -s "$OUT/fault.jsonl" ] && break; sleep 0.1; done
  sleep 2
  victim=$(pgrep -f "^$B/fp8train --config $OUT/fault.yaml" | tail -1)  # a rank, not mpirun
  start=$(date +%s)
  [ -n "$victim" ] && kill -9 "$victim"
  wait $runner
  echo "ended $(( $(date +%s) - start )) s after the kill"; grep -m3 -E "exited or lost|rank" "$OUT/fault.log"
fi

if [[ $parts == *scaling* ]]; then
  echo "== scaling: gpt-1.3b per-GPU tokens/s at dp 1, ${sizes[*]} (median of steps 4..$STEPS)"
  for p in bf16 fp8; do
    timeout 300 $B/fp8train --config configs/gpt-1.3b.yaml --precision $p --steps "$STEPS" \
      --metrics "$OUT/sc1_$p.jsonl" > "$OUT/sc1_$p.log" 2>&1
    one=$(median_tps "$OUT/sc1_$p.jsonl")
    echo "| gpt-1.3b $p | dp 1 | $one tok/s | 1 GPU |" | tee -a "$OUT/scaling.md"
    for n in "${sizes[@]}"; do
      for z in false true; do
        sed "s/^parallel:.*//" configs/gpt-1.3b.yaml > "$OUT/sc.yaml"
        echo "parallel: {zero: $z}" >> "$OUT/sc.yaml"
        sed -i "s|\.\./data/|$(pwd)/data/|" "$OUT/sc.yaml"
        timeout 400 "${MPI[@]}" -np "$n" $B/fp8train --config "$OUT/sc.yaml" --precision $p \
          --steps "$STEPS" --metrics "$OUT/sc${n}_${z}_$p.jsonl" > "$OUT/sc${n}_${z}_$p.log" 2>&1
        all=$(median_tps "$OUT/sc${n}_${z}_$p.jsonl")
        python3 -c "a, o = float('$all') / $n, float('$one'); print(f'| gpt-1.3b $p | dp $n zero $z | {a:.0f} tok/s per GPU | {a / o:.3f} of 1 GPU |')" \
          | tee -a "$OUT/scaling.md"
      done
    done
  done
fi
