#!/usr/bin/env bash
# FP8 vs BF16 on gpt2-124m-converge over several seeds, one queue of runs per GPU, on a GPU node
# with bundle (BUNDLE, default bundle) and data/corpus-large.txt.gz carried. Writes every run's
# metrics (conv_VARIANT_seedS.jsonl, gzipped into one conv_runs.tar) and a table of final-loss
# gaps with a plot per FP8 variant (converge_summary.md, bench/fp8_vs_bf16_seeds.py) to $OUT.
# Usage: SEEDS="1337 2 3 4" VARIANTS="bf16 fp8" scripts/converge-seeds.sh
#   bf16        --precision bf16
#   fp8         --precision fp8 with the config's recipe (first step with current scaling)
#   fp8_unit    fp8, first step at scale 1 (fp8.first_step_current: false)
#   fp8_m1      fp8 with margin 1
set -uo pipefail
OUT=${OUT:-out}
BUNDLE=${BUNDLE:-bundle}
SEEDS=${SEEDS:-1337 2 3 4}
VARIANTS=${VARIANTS:-bf16 fp8}
STEPS=${STEPS:-2000}
mkdir -p "$OUT"
gunzip -kf data/corpus-large.txt.gz || exit 1
NGPU=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"

config_for() {  # variant seed -> path of a generated config next to the preset (same data path)
  local v=$1 s=$2 f=configs/_conv_${1}_${2}.yaml
  sed -e "s/log_every: 1}/log_every: 1, seed: $s}/" configs/gpt2-124m-converge.yaml > "$f"
  case $v in
    fp8_unit) sed -i "s/amax_algo: max}/amax_algo: max, first_step_current: false}/" "$f" ;;
    fp8_m1) sed -i "s/amax_algo: max}/amax_algo: max, margin: 1}/" "$f" ;;
  esac
  grep -q "seed: $s" "$f" || { echo "cannot set the seed in $f" >&2; return 1; }
  echo "$f"
}

jobs=()
for s in $SEEDS; do for v in $VARIANTS; do jobs+=("$v $s"); done; done
for ((g = 0; g < NGPU; ++g)); do
  (
    for ((i = g; i < ${#jobs[@]}; i += NGPU)); do
      read -r v s <<< "${jobs[$i]}"
      p=fp8; [ "$v" = bf16 ] && p=bf16
      cfg=$(config_for "$v" "$s") || continue
      start=$(date +%s)
      CUDA_VISIBLE_DEVICES=$g timeout 400 "$BUNDLE/bin/fp8train" --config "$cfg" --device cuda:0 \
        --precision $p --steps "$STEPS" --metrics "$OUT/conv_${v}_seed$s.jsonl" \
        > "$OUT/conv_${v}_seed$s.log" 2>&1
      echo "gpu $g: $v seed $s exit $? in $(( $(date +%s) - start )) s"
    done
  ) &
done
wait

for v in $VARIANTS; do
  [ "$v" = bf16 ] && continue
  echo "== $v vs bf16"
  python3 bench/fp8_vs_bf16_seeds.py "$OUT" "$OUT/fp8_vs_bf16_seeds_$v.png" --variant "$v"
done | tee "$OUT/converge_summary.md"
gzip -f "$OUT"/conv_*.jsonl
tar -cf "$OUT/conv_runs.tar" -C "$OUT" $(cd "$OUT" && ls conv_*.jsonl.gz conv_*.log) && \
  rm -f "$OUT"/conv_*.jsonl.gz "$OUT"/conv_*.log
rm -f configs/_conv_*.yaml
