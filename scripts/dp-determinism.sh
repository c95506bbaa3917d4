#!/usr/bin/env bash
# Is data-parallel training on GPUs deterministic, and do its replicas stay identical? Runs
# gpt2-124m at dp 2 (one GPU per rank through CUDA_VISIBLE_DEVICES, the FP8RT_* launcher) several
# times with FP8RT_STATE_HASHES=1, then compares every step's loss and state hashes across ranks
# and across runs (scripts/dp_compare.py). From the repository root with bundle/ and data/ carried.
# Usage: scripts/dp-determinism.sh [STEPS (default 25)]. Environment: OUT, FP8RT_BIN, BATCH
# (per rank, default 8), WARMUP (10), CKPT_EVERY (checkpoint period; default none), CHECK_EVERY
# (the trainer's own scale check; default off), HASH_EVERY (1), RUN_TIMEOUT (90 s a run), RUNS
# (names:precision:mode triples; mode overlap (the default), compute (FP8RT_COMM_STREAM=compute:
# collectives on the compute stream) or blocking (FP8RT_NCCL_BLOCKING=1)). Exits 1 when ranks or
# runs differ, 77 with fewer than 2 GPUs.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
B=${FP8RT_BIN:-bundle/bin}
STEPS=${1:-25}
export NCCL_NVLS_ENABLE=0
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then echo "dp-determinism: needs 2 GPUs"; exit 77; fi
[ -d bundle/lib ] && export LD_LIBRARY_PATH=$PWD/bundle/lib:${LD_LIBRARY_PATH:-}
RUNS=${RUNS:-"fp8a:fp8:overlap fp8b:fp8:overlap fp8c:fp8:compute fp8d:fp8:compute fp8e:fp8:blocking fp8f:fp8:blocking bf16a:bf16:overlap bf16b:bf16:overlap"}
port=29611
for run in $RUNS; do
  IFS=: read -r name prec cs <<< "$run"
  cat > "$OUT/$name.yaml" <<Y
name: $name
model: {n_layer: 12, n_embd: 768, n_head: 12, block_size: 1024, vocab_size: 50257}
data: {train: $PWD/data/corpus.txt, format: text}
train: {batch_size: ${BATCH:-8}, seq_len: 1024, total_steps: $STEPS, lr: 0.0006, min_lr: 0.00006,
        warmup_steps: ${WARMUP:-10}, checkpoint_every: ${CKPT_EVERY:-0}, weight_decay: 0.1, grad_clip: 1.0, log_every: 1}
precision: $prec
fp8: {history_len: 1024, amax_algo: max, first_step_current: ${FIRST_CURRENT:-true}}
parallel: {scale_check_every: ${CHECK_EVERY:-0}}
Y
  comm=(); [ "$cs" = compute ] && comm=(FP8RT_COMM_STREAM=compute)
  [ "$cs" = blocking ] && comm=(FP8RT_NCCL_BLOCKING=1)
  pids=(); mkdir -p "$OUT/dump_$name"
  for r in 0 1; do
    env "${comm[@]}" FP8RT_STATE_HASHES=${HASH_EVERY:-1} FP8RT_STATE_DUMP=$OUT/dump_$name CUDA_VISIBLE_DEVICES=$r FP8RT_RANK=$r FP8RT_LOCAL_RANK=0 FP8RT_WORLD_SIZE=2 \
      FP8RT_MASTER_ADDR=127.0.0.1 FP8RT_MASTER_PORT=$port \
      timeout ${RUN_TIMEOUT:-90} $B/fp8train --config "$OUT/$name.yaml" --metrics "$OUT/$name.jsonl" \
      ${CKPT_EVERY:+--checkpoint-dir "/tmp/ck_$name"} \
      > "$OUT/$name.r$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; echo "$name rank exit $?"; done
  tail -n 2 "$OUT/$name.r0.log"
  port=$((port + 1))
done
for run in $RUNS; do rm -rf "/tmp/ck_${run%%:*}"; done
python3 scripts/dp_compare.py "$OUT" $RUNS | tee "$OUT/compare.txt"
