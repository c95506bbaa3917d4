#!/usr/bin/env bash
# One call on a GPU node, from the repository root with bundle/ and data/ carried: device facts,
# the gpu test suite, the kernel benchmark table, and fp8train runs. Logs go to $OUT (or ./out).
# Usage: scripts/gpu-session.sh [tests] [bench] [train] [torch] [throughput] [comm] [baseline]
#        [memory] [recipespeed] [llama] [llamaspeed] [checkpoint] [recovery] [ckpt8b]
#        (default: tests bench train torch throughput)
# Environment: GPU_TEST_FILTER (gtest filter for tests), LLAMA_STEPS (llamaspeed; default 20),
#              LLAMA_PRECISIONS (llamaspeed; default "bf16 fp8"), CKPT_DIR (checkpoint; default
#              /tmp/fp8rt-ckpt), BASELINE (baseline, checkpoint; default bundle/bin/fp8train.base),
#              REC_CONFIG, REC_GPUS (recovery; default configs/gpt-1.3b.yaml on every GPU),
#              REC_FP8TRAIN (recovery; default bundle/bin/fp8train), REC_TAG (recovery: names
#              its output files rec<TAG>_*), CK8_SYNC (ckpt8b: 1 adds the synchronous save).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
B=bundle/bin
parts=${*:-tests bench train torch throughput}
STEPS_124M=${STEPS_124M:-30}; STEPS_13B=${STEPS_13B:-15}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"
cat bundle/VERSION | tee -a "$OUT/device.txt"
ldd $B/fp8train | grep -E 'not found|cublasLt|rocksdb' | tee -a "$OUT/device.txt"

if [[ $parts == *tests* ]]; then
  echo "== gpu tests"
  timeout 300 $B/fp8rt_gpu_tests --gtest_brief=1 --gtest_filter="${GPU_TEST_FILTER:-*}" \
    > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests exit $?"; tail -4 "$OUT/gpu_tests.log"
fi
if [[ $parts == *bench* ]]; then
  echo "== kernel bench"
  timeout 240 $B/fp8rt_kernel_bench > "$OUT/kernel_bench.log" 2>&1
  echo "kernel bench exit $?"; sed -n '/^| op/,$p' "$OUT/kernel_bench.log"
fi
if [[ $parts == *train* ]]; then
  echo "== quickstart on cuda:0"
  timeout 120 $B/fp8train --config configs/quickstart.yaml --device cuda:0 \
    --metrics "$OUT/quickstart.jsonl" --checkpoint-dir /tmp/qs > "$OUT/quickstart.log" 2>&1
  echo "quickstart exit $?"; tail -3 "$OUT/quickstart.log"
fi
if [[ $parts == *torch* ]]; then
  echo "== PyTorch reference check"
  for p in fp32 bf16; do
    mkdir -p /tmp/dump_$p
    $B/fp8rt_gpt_dump --out /tmp/dump_$p --device cuda:0 --precision $p > /dev/null
  done
  PYTHONUNBUFFERED=1 timeout 120 python3 scripts/torch_check.py /tmp/dump_fp32 /tmp/dump_bf16 \
    2>&1 | tee "$OUT/torch_check.log"
fi
if [[ $parts == *throughput* ]]; then
  echo "== throughput"
  for cfg in gpt2-124m gpt-1.3b; do
    steps=$STEPS_124M; [ $cfg = gpt-1.3b ] && steps=$STEPS_13B
    for p in bf16 fp8; do
      timeout 240 $B/fp8train --config configs/$cfg.yaml --device cuda:0 --precision $p \
        --steps $steps --metrics "$OUT/tp_${cfg}_$p.jsonl" > "$OUT/tp_${cfg}_$p.log" 2>&1
      echo "$cfg $p exit $?"; tail -2 "$OUT/tp_${cfg}_$p.log"
    done
  done
  python3 bench/train_summary.py gpt2-124m/bf16=$OUT/tp_gpt2-124m_bf16.jsonl \
    gpt2-124m/fp8=$OUT/tp_gpt2-124m_fp8.jsonl gpt-1.3b/bf16=$OUT/tp_gpt-1.3b_bf16.jsonl \
    gpt-1.3b/fp8=$OUT/tp_gpt-1.3b_fp8.jsonl | tee "$OUT/train_bench.md"
fi
if [[ $parts == *comm* ]]; then
  # comm/ on the GPU: every collective through NCCL in a world of one started by the FP8RT_*
  # environment (rendezvous + NCCL id over TCP), then the same through mpirun with one rank.
  echo "== comm check (NCCL, world of one)"
  FP8RT_RANK=0 FP8RT_WORLD_SIZE=1 FP8RT_MASTER_ADDR=127.0.0.1 FP8RT_MASTER_PORT=29517 \
    timeout 120 $B/fp8rt_comm_check --gpu 2>&1 | tee "$OUT/comm_check.log" | tail -3
  echo "comm check exit ${PIPESTATUS[0]}"
fi
if [[ $parts == *baseline* ]]; then
  # The step cost against a baseline fp8train (BASELINE, e.g. the previous main's, carried as
  # bundle/bin/fp8train.base), interleaved run by run: REPS runs each, gpt-1.3b bf16 and fp8.
  BASELINE=${BASELINE:-$B/fp8train.base}; REPS=${REPS:-3}
  echo "== baseline vs this build (gpt-1.3b, $REPS runs each, interleaved)"
  for r in $(seq "$REPS"); do
    for p in bf16 fp8; do
      for which in base new; do
        bin=$B/fp8train; [ $which = base ] && bin=$BASELINE
        timeout 240 "$bin" --config configs/gpt-1.3b.yaml --device cuda:0 --precision $p \
          --steps "$STEPS_13B" --metrics "$OUT/bl_${which}_${p}_$r.jsonl" > "$OUT/bl_${which}_${p}_$r.log" 2>&1
        echo "$which $p run $r exit $?"
      done
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/baseline.md"
import glob, json, statistics, sys
out = sys.argv[1]
print("| run | baseline tok/s (median of runs) | this build | ratio |\n|---|---|---|---|")
for p in ("bf16", "fp8"):
    med = {}
    for which in ("base", "new"):
        runs = []
        for f in sorted(glob.glob(f"{out}/bl_{which}_{p}_*.jsonl")):
            tps = [json.loads(l)["tokens_per_s"] for l in open(f) if '"tokens_per_s"' in l][3:]
            if tps: runs.append(statistics.median(tps))
        med[which] = statistics.median(runs) if runs else float("nan")
    print(f"| gpt-1.3b {p} | {med['base']:,.0f} | {med['new']:,.0f} | {med['new'] / med['base']:.4f} |")
PY
fi
if [[ $parts == *memory* ]]; then
  # The memory levers against a baseline fp8train without them (BASELINE, carried as
  # bundle/bin/fp8train.base): this build by default, with train.recompute: false or true (bf16),
  # and with fp8.keep_weight_transpose: true or false or fp8.cache_weights: false (fp8); gpt-1.3b,
  # --memory-report, REPS interleaved runs.
  BASELINE=${BASELINE:-$B/fp8train.base}; REPS=${REPS:-3}
  echo "== memory levers vs baseline (gpt-1.3b, $REPS runs each, interleaved)"
  sed 's/log_every: 1}/log_every: 1, recompute: false}/' configs/gpt-1.3b.yaml > configs/_saved.yaml
  sed 's/log_every: 1}/log_every: 1, recompute: true}/' configs/gpt-1.3b.yaml > configs/_recompute.yaml
  sed 's/amax_algo: max}/amax_algo: max, keep_weight_transpose: true}/' configs/gpt-1.3b.yaml \
    > configs/_keep_t.yaml
  sed 's/amax_algo: max}/amax_algo: max, keep_weight_transpose: false}/' configs/gpt-1.3b.yaml \
    > configs/_lean.yaml
  sed 's/amax_algo: max}/amax_algo: max, cache_weights: false}/' configs/gpt-1.3b.yaml \
    > configs/_uncached.yaml
  sed 's/amax_algo: max}/amax_algo: max, gelu_input_fp8: true}/' configs/gpt-1.3b.yaml \
    > configs/_gelu8.yaml
  sed 's/amax_algo: max}/amax_algo: max, cache_weights: false, gelu_input_fp8: true}/' \
    configs/gpt-1.3b.yaml > configs/_uncached_gelu8.yaml
  sed 's/log_every: 1}/log_every: 1, recompute: true}/; s/amax_algo: max}/amax_algo: max, cache_weights: false}/' \
    configs/gpt-1.3b.yaml > configs/_uncached_recompute.yaml
  # MEM_VARIANTS: precision:variant pairs (variants: base, new, saved = train.recompute: false,
  # recompute = train.recompute: true, keep_t, lean = without kept FP8 weight transposes,
  # uncached = fp8.cache_weights: false, gelu8 = fp8.gelu_input_fp8: true, uncachedgelu8 = both,
  # uncachedrecompute = fp8.cache_weights: false and train.recompute: true; start = this build's
  # config on bundle/bin/fp8train.start, the binary of an older commit, e.g. an issue's start;
  # base_X = variant X's config on the baseline binary).
  for r in $(seq "$REPS"); do
    for pv in ${MEM_VARIANTS:-bf16:base bf16:new bf16:recompute fp8:base fp8:new fp8:lean}; do
      p=${pv%:*}; v=${pv#*:}; bin=$B/fp8train; cfg=configs/gpt-1.3b.yaml
      [ $v = base ] && bin=$BASELINE
      [[ $v == base_* ]] && bin=$BASELINE
      [ ${v#base_} = saved ] && cfg=configs/_saved.yaml
      [ ${v#base_} = recompute ] && cfg=configs/_recompute.yaml
      [ ${v#base_} = keep_t ] && cfg=configs/_keep_t.yaml
      [ ${v#base_} = lean ] && cfg=configs/_lean.yaml
      [ ${v#base_} = uncached ] && cfg=configs/_uncached.yaml
      [ ${v#base_} = gelu8 ] && cfg=configs/_gelu8.yaml
      [ ${v#base_} = uncachedgelu8 ] && cfg=configs/_uncached_gelu8.yaml
      [ ${v#base_} = uncachedrecompute ] && cfg=configs/_uncached_recompute.yaml
      [ $v = start ] && bin=$B/fp8train.start
      timeout 240 "$bin" --config $cfg --device cuda:0 --precision $p --steps "$STEPS_13B" \
        --memory-report --metrics "$OUT/mem_${v}_${p}_$r.jsonl" > "$OUT/mem_${v}_${p}_$r.log" 2>&1
      echo "$v $p run $r exit $?"
    done
  done
  python3 bench/memory_summary.py "$OUT" | tee "$OUT/memory.md"
fi
if [[ $parts == *recipespeed* ]]; then
  # The FP8 recipes' throughput on this card, side by side: gpt2-124m and gpt-1.3b in bf16 and
  # fp8.scaling delayed / current / block, REPS interleaved runs each (median of steps 4..).
  REPS=${REPS:-2}
  echo "== recipes' tokens/s side by side ($REPS runs each, interleaved)"
  for cfg in gpt2-124m gpt-1.3b; do
    for r in bf16 delayed current block; do
      if [ $r = bf16 ]; then
        sed "s/^precision:.*/precision: bf16/" configs/$cfg.yaml > configs/_sp_${cfg}_$r.yaml
      else
        sed "s/^precision:.*/precision: fp8/; s/^fp8: {/fp8: {scaling: $r, /" configs/$cfg.yaml \
          > configs/_sp_${cfg}_$r.yaml
      fi
    done
  done
  for rep in $(seq "$REPS"); do
    for cfg in gpt2-124m gpt-1.3b; do
      steps=$STEPS_124M; [ $cfg = gpt-1.3b ] && steps=$STEPS_13B
      for r in bf16 delayed current block; do
        timeout 180 $B/fp8train --config configs/_sp_${cfg}_$r.yaml --device cuda:0 --steps $steps \
          --metrics "$OUT/sp_${cfg}_${r}_$rep.jsonl" > "$OUT/sp_${cfg}_${r}_$rep.log" 2>&1
        echo "$cfg $r run $rep exit $?"
      done
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/recipe_speed.md"
import glob, json, statistics, sys
d = sys.argv[1]
print("| model | recipe | tokens/s | vs bf16 | vs delayed |\n|---|---|---:|---:|---:|")
for cfg in ("gpt2-124m", "gpt-1.3b"):
    med = {}
    for r in ("bf16", "delayed", "current", "block"):
        runs = []
        for f in glob.glob(f"{d}/sp_{cfg}_{r}_*.jsonl"):
            t = [json.loads(l)["tokens_per_s"] for l in open(f) if '"tokens_per_s"' in l][3:]
            if t: runs.append(statistics.median(t))
        med[r] = statistics.median(runs) if runs else float("nan")
    for r in ("bf16", "delayed", "current", "block"):
        print(f"| {cfg} | {r} | {med[r]:,.0f} | {med[r] / med['bf16']:.3f} | {med[r] / med['delayed']:.3f} |")
PY
fi
if [[ $parts == *converge* ]]; then
  # The large corpus when it was carried (scripts/make-corpus.sh --large), else the small one.
  CONVERGE_CONFIG=${CONVERGE_CONFIG:-gpt2-124m}
  if [ -s data/corpus-large.txt.gz ] && [ "$CONVERGE_CONFIG" = gpt2-124m ]; then
    gunzip -kf data/corpus-large.txt.gz && CONVERGE_CONFIG=gpt2-124m-converge
  fi
  echo "== FP8 vs BF16, $CONVERGE_CONFIG, ${CONVERGE_STEPS:=2000} steps"
  for p in bf16 fp8; do
    timeout 280 $B/fp8train --config configs/$CONVERGE_CONFIG.yaml --device cuda:0 --precision $p \
      --steps $CONVERGE_STEPS --metrics "$OUT/conv_$p.jsonl" > "$OUT/conv_$p.log" 2>&1
    echo "$p exit $?"; tail -1 "$OUT/conv_$p.log"
  done
  python3 bench/fp8_vs_bf16.py "$OUT/conv_bf16.jsonl" "$OUT/conv_fp8.jsonl" "$OUT/fp8_vs_bf16.png"
fi
if [[ $parts == *llama\ * || $parts == *llama ]]; then
  # model.arch llama against transformers' LlamaForCausalLM: our logits and every gradient, from
  # the CPU model and the GPU one in fp32 and bf16 (scripts/llama_check.py).
  echo "== llama vs transformers"
  dumps=()
  for dp in cpu:fp32 cuda:0:fp32 cuda:0:bf16; do
    dev=${dp%:*}; p=${dp##*:}; d=/tmp/llama_${dev//:/}_$p
    mkdir -p $d
    $B/fp8rt_gpt_dump --arch llama --out $d --device $dev --precision $p > /dev/null || echo "dump $dp failed"
    dumps+=($d)
  done
  PYTHONUNBUFFERED=1 timeout 180 python3 scripts/llama_check.py "${dumps[@]}" 2>&1 | tee "$OUT/llama_check.log"
  echo "llama check exit ${PIPESTATUS[0]}"
fi
if [[ $parts == *llamaspeed* ]]; then
  # llama3-1b: fp8train against transformers' Llama with torch.compile (bench/llama_torch.py),
  # side by side on this GPU.
  echo "== llama3-1b throughput: fp8train and PyTorch"
  for p in ${LLAMA_PRECISIONS:-bf16 fp8}; do
    timeout 240 $B/fp8train --config configs/llama3-1b.yaml --device cuda:0 --precision $p \
      --steps "${LLAMA_STEPS:-20}" --metrics "$OUT/llama_$p.jsonl" > "$OUT/llama_$p.log" 2>&1
    echo "fp8train llama3-1b $p exit $?"; tail -2 "$OUT/llama_$p.log"
  done
  python3 bench/train_summary.py $(for p in ${LLAMA_PRECISIONS:-bf16 fp8}; do
    echo "llama3-1b/$p=$OUT/llama_$p.jsonl"; done) | tee "$OUT/llama_ours.md"
  for p in ${LLAMA_PRECISIONS:-bf16 fp8}; do
    PYTHONUNBUFFERED=1 timeout 240 python3 bench/llama_torch.py --precision $p \
      --steps "${LLAMA_STEPS:-20}" > "$OUT/llama_torch_$p.log" 2>&1
    echo "torch llama $p exit $?"; grep -E "^\| torch|^llama_torch" "$OUT/llama_torch_$p.log" | tail -3
  done
fi
if [[ $parts == *checkpoint* ]]; then
  # What a gpt-1.3b FP8 checkpoint costs (docs/PERFORMANCE.md "Checkpoints"): the disk's own
  # sequential write speed (dd), CRC-32C and the writer's pattern (fp8rt_io_bench), then the
  # previous build's synchronous save (BASELINE), this build's with train.async_checkpoint: false,
  # and this build's default (async) while training goes on. CKPT_DIR: where (default
  # /tmp/fp8rt-ckpt); each run's checkpoints are removed after it.
  D=${CKPT_DIR:-/tmp/fp8rt-ckpt}; BASELINE=${BASELINE:-$B/fp8train.base}
  mkdir -p "$D"
  echo "== checkpoints: disk"
  df -h "$D" | tee "$OUT/ckpt_disk.txt"
  for mode in oflag=direct conv=fdatasync; do
    echo "dd 4 GiB $mode: $(dd if=/dev/zero of="$D/dd.bin" bs=64M count=64 $mode 2>&1 | tail -1)" \
      | tee -a "$OUT/ckpt_disk.txt"
    rm -f "$D/dd.bin"
  done
  timeout 120 $B/fp8rt_io_bench --crc-gib 2 --dir "$D" --write-gib 8 | tee "$OUT/io_bench.md"
  # A config with checkpoints every $1 steps (and $2 appended to the train mapping).
  ckcfg() { sed -e "s/log_every: 1}/log_every: 1, checkpoint_every: $1$2}/" -e "s|\.\./data/|$PWD/data/|" configs/gpt-1.3b.yaml; }
  # Runs $1 (a binary) until its first checkpoint's metrics line, then kills it (no final save).
  first_save() {
    local bin=$1 name=$2; rm -rf "$D/$name" "$OUT/ck_$name.jsonl"
    $bin --config "/tmp/ck_$name.yaml" --device cuda:0 --steps 40 --checkpoint-dir "$D/$name" \
      --metrics "$OUT/ck_$name.jsonl" > "$OUT/ck_$name.log" 2>&1 & local pid=$!
    for _ in $(seq 2400); do
      grep -q '"checkpoint_s"' "$OUT/ck_$name.jsonl" 2>/dev/null && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "$name: $(grep -h '"checkpoint_s"' "$OUT/ck_$name.jsonl" | head -1)"
    rm -rf "$D/$name"
  }
  ckcfg 5 "" > /tmp/ck_base.yaml
  ckcfg 5 ", async_checkpoint: false" > /tmp/ck_sync.yaml
  [ -x "$BASELINE" ] && first_save "$BASELINE" base
  first_save $B/fp8train sync
  # Async: a checkpoint at step 100 written while steps 101.. train; the last at 200.
  ckcfg 100 "" > /tmp/ck_async.yaml
  rm -rf "$D/async" "$OUT/ck_async.jsonl"
  timeout 300 $B/fp8train --config /tmp/ck_async.yaml --device cuda:0 --steps 200 \
    --checkpoint-dir "$D/async" --metrics "$OUT/ck_async.jsonl" > "$OUT/ck_async.log" 2>&1
  echo "async exit $?"; grep -h '"checkpoint_s"' "$OUT/ck_async.jsonl"
  rm -rf "$D/async"
  python3 bench/checkpoint_summary.py "$OUT" | tee "$OUT/checkpoint.md"
fi
if [[ $parts == *ckpt8b* ]]; then
  # Llama-3-8B on 4 GPUs (configs/llama3-8b.yaml: tp 2 x ZeRO-1 dp 2; docs/PERFORMANCE.md
  # "Checkpoints"): the disk (dd), then the default asynchronous checkpoint at step 10 (each rank
  # snapshots its part to pinned host memory and trains on while a writer streams it), and with
  # CK8_SYNC=1 a synchronous one at step 5. Each run is killed once its save has committed.
  D=${CKPT_DIR:-/tmp/fp8rt-ckpt}/l8; mkdir -p "$D"
  df -h "$D" | tee "$OUT/l8_disk.txt"
  echo "dd 4 GiB oflag=direct: $(dd if=/dev/zero of="$D/dd.bin" bs=64M count=64 oflag=direct 2>&1 | tail -1)" \
    | tee -a "$OUT/l8_disk.txt"
  rm -f "$D/dd.bin"
  l8run() {  # name checkpoint_every extra-train-keys
    sed -e "s/log_every: 1}/log_every: 1, checkpoint_every: $2$3}/" -e "s|\.\./data/|$PWD/data/|" \
      configs/llama3-8b.yaml > "/tmp/l8_$1.yaml"
    rm -rf "$D/$1" "$OUT/l8_$1.jsonl"
    mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
      --mca btl self,tcp -np 4 $B/fp8train --config "/tmp/l8_$1.yaml" --steps 40 \
      --checkpoint-dir "$D/$1" --metrics "$OUT/l8_$1.jsonl" > "$OUT/l8_$1.log" 2>&1 & local pid=$!
    for _ in $(seq 4000); do
      grep -q '"checkpoint_s"' "$OUT/l8_$1.jsonl" 2>/dev/null && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    sleep 3  # (a few steps after the commit)
    pkill -9 -f "/tmp/l8_$1.yaml"; wait $pid 2>/dev/null
    echo "$1: $(grep -h '"checkpoint_s"' "$OUT/l8_$1.jsonl" | head -1)"
    du -sh "$D/$1" 2>/dev/null; rm -rf "$D/$1"
  }
  l8run async 10 ""
  [ "${CK8_SYNC:-0}" = 1 ] && l8run sync 5 ", async_checkpoint: false"
  python3 - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
for name in ("async", "sync"):
    p = Path(sys.argv[1]) / f"l8_{name}.jsonl"
    if not p.exists():
        continue
    rows = [json.loads(l) for l in p.read_text().splitlines() if l.startswith("{")]
    ck = next((r for r in rows if "checkpoint_s" in r), None)
    steps = {r["step"]: r["step_ms"] for r in rows if "step_ms" in r}
    if ck is None:
        print(f"{name}: no committed checkpoint"); continue
    s = ck["step"]
    before = [steps[k] for k in steps if s - 5 < k < s]
    print(f"{name}: checkpoint at step {s}: blocked {ck['checkpoint_blocked_s']:.3f} s, "
          f"to commit {ck['checkpoint_s']:.1f} s, {ck.get('checkpoint_bytes', 0) / 1e9:.1f} GB; "
          f"step ms before {statistics.median(before):.0f}, step {s} {steps.get(s, 0):.0f}, "
          f"step {s + 1} {steps.get(s + 1, 0):.0f}, later {[round(steps[k]) for k in sorted(steps) if k > s + 1][:8]}")
PY
fi
if [[ $parts == *recovery* ]]; then
  # A killed rank on this node, timed until the job trains again (docs/PERFORMANCE.md
  # "Recovery"): fp8d --standalone runs gpt-1.3b FP8 on every GPU (data parallel, ZeRO-1) with
  # checkpoints every 20 steps; rank 1 (or 0 alone) is SIGKILLed after step 30 and the job's
  # timing (detection, requeue and placement, process start, checkpoint load, first step) is
  # printed once it has trained again. CKPT_DIR: where the checkpoints go (removed after).
  D=${CKPT_DIR:-/tmp/fp8rt-ckpt}/recovery; R=/tmp/fp8d-recovery
  rm -rf "$R" "$D"; mkdir -p -m 700 "$R"; mkdir -p "$D"
  NG=${REC_GPUS:-$(nvidia-smi -L | wc -l)}
  export FP8D_DATA_DIR=$R
  $B/fp8d --standalone --port 0 --data-dir "$R" --fp8train "$PWD/${REC_FP8TRAIN:-$B/fp8train}" \
    --checkpoint-root "$D" --data-root "$PWD" > "$OUT/rec${REC_TAG:-}_fp8d.log" 2>&1 & FP=$!
  for _ in $(seq 300); do [ -s "$R/server" ] && break; sleep 0.1; done
  sed -e "s/log_every: 1}/log_every: 1, checkpoint_every: 20, keep_checkpoints: 1}/" \
    -e "s|\.\./data/|$PWD/data/|" "${REC_CONFIG:-configs/gpt-1.3b.yaml}" > /tmp/rec.yaml
  echo "parallel: {zero: true}" >> /tmp/rec.yaml
  J=$($B/fp8ctl submit /tmp/rec.yaml --gpus "$NG")
  echo "== recovery: job $J ($(sed -n "s/^name: //p" /tmp/rec.yaml) on $NG GPU(s))"
  field() { $B/fp8ctl status "$J" --json | python3 -c "
import json, sys; j = json.load(sys.stdin); v = j
for k in '$1'.split('.'): v = v.get(k) if isinstance(v, dict) else None
print(-1 if v is None else v)"; }
  for _ in $(seq 600); do
    [ "$(field checkpoint_step)" -ge 20 ] && [ "$(field progress.step)" -ge 30 ] && break
    sleep 0.5
  done
  victim=$(python3 -c "
import json; r = json.load(open('$R/node/ranks.json'))
print(max(r, key=lambda e: e['rank'])['pid'])")
  echo "killing rank pid $victim at step $(field progress.step) (checkpoint $(field checkpoint_step))"
  kill -9 "$victim"
  for _ in $(seq 600); do
    $B/fp8ctl events "$J" | grep -q "training again" && break
    sleep 0.5
  done
  $B/fp8ctl events "$J" | tee "$OUT/rec${REC_TAG:-}_events.txt"
  $B/fp8ctl status "$J" | tee "$OUT/rec${REC_TAG:-}_status.txt"
  $B/fp8ctl status "$J" --json > "$OUT/rec${REC_TAG:-}_job.json"
  $B/fp8ctl cancel "$J" > /dev/null
  kill -TERM $FP; wait $FP
  cp "$R/node/jobs/$J/metrics.jsonl" "$OUT/rec${REC_TAG:-}_metrics.jsonl"
  for f in "$R/node/jobs/$J"/logs/rank-*.log; do
    echo "---- ${f##*/}"; grep -v "^step " "$f" | tail -n 40
  done > "$OUT/rec${REC_TAG:-}_rank_logs.txt"
  grep -h "resume:" "$OUT/rec${REC_TAG:-}_rank_logs.txt"
  # The disk's own read speed, past the page cache, on the checkpoint's files.
  for f in $(ls "$D"/*/step_*/*.bin 2>/dev/null | head -n 2); do
    echo "dd read ${f##*/} iflag=direct: $(dd if="$f" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1)"
  done | tee "$OUT/rec${REC_TAG:-}_disk.txt"
  rm -rf "$D" "$R"
fi
