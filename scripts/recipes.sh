#!/usr/bin/env bash
# The FP8 recipe comparison (issue [7 of 9]): gpt2-124m (configs/gpt2-124m-converge.yaml, the
# large corpus and its validation split) trained once per recipe and seed on one GPU, every run's
# metrics (with val_loss every 100 steps) under $OUT; then scripts/recipe_table.py makes the table
# and the plot. From the repository root with bundle/ and data/ carried.
# Usage: scripts/recipes.sh. Environment: RECIPES (default "bf16 delayed current": bf16, or an
# fp8.scaling mode), SEEDS (default "1337"), STEPS (default: the config's 2000), CONFIG, OUT,
# FP8RT_BIN (default bundle/bin), RUN_TIMEOUT (seconds a run, default 400), FP8_EXTRA (more
# fp8 fields for the fp8 recipes, e.g. ", gelu_input_fp8: true") with TAG_SUFFIX (added to
# those runs' recipe names, e.g. "-gelu8", so that they sit beside the plain runs in one OUT).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
B=${FP8RT_BIN:-bundle/bin}
CONFIG=${CONFIG:-configs/gpt2-124m-converge.yaml}
[ -d bundle/lib ] && export LD_LIBRARY_PATH=$PWD/bundle/lib:${LD_LIBRARY_PATH:-}
for f in data/corpus-large.txt data/corpus-large-val.txt; do
  [ -s "$f" ] || gunzip -k "$f.gz" || { echo "recipes: $f.gz missing (scripts/make-corpus.sh --large)"; exit 1; }
done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"; cat bundle/VERSION 2>/dev/null | tee -a "$OUT/device.txt"
rc=0
for seed in ${SEEDS:-1337}; do
  for r in ${RECIPES:-bf16 delayed current}; do
    tag=${r}_s$seed
    [ "$r" = bf16 ] || tag=${r}${TAG_SUFFIX:-}_s$seed
    sed -e "s|\.\./data/|$PWD/data/|g" "$CONFIG" > "$OUT/$tag.yaml"
    if [ "$r" = bf16 ]; then
      sed -i "s/^precision:.*/precision: bf16/" "$OUT/$tag.yaml"
    else
      sed -i "s/^precision:.*/precision: fp8/; s/^fp8: {/fp8: {scaling: $r, /" "$OUT/$tag.yaml"
      [ -n "${FP8_EXTRA:-}" ] && sed -i "s/^\(fp8: {.*\)}/\1${FP8_EXTRA}}/" "$OUT/$tag.yaml"
    fi
    sed -i "s/^name:.*/name: $tag/; s/weight_decay: 0.1,/weight_decay: 0.1, seed: $seed,/" "$OUT/$tag.yaml"
    timeout "${RUN_TIMEOUT:-400}" $B/fp8train --config "$OUT/$tag.yaml" ${STEPS:+--steps $STEPS} \
      --metrics "$OUT/$tag.jsonl" > "$OUT/$tag.log" 2>&1
    c=$?; echo "$tag exit $c: $(grep val_loss "$OUT/$tag.log" | tail -1)"; [ $c -eq 0 ] || rc=1
  done
done
python3 scripts/recipe_table.py "$OUT" > "$OUT/recipes.md"; cat "$OUT/recipes.md"
# (the plot as PNG too, where librsvg's converter is installed)
if command -v rsvg-convert > /dev/null; then
  rsvg-convert -b white -z 1.5 "$OUT/recipes.svg" -o "$OUT/recipes.png"
fi
exit $rc
