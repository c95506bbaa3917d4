#!/usr/bin/env bash
# One call on a multi-GPU node (issue [9 of 9]), from the repository root with bundle/ and data/
# carried: collectives, data-parallel equivalence, ZeRO-1, a killed rank, and scaling, with every
# log under $OUT. NVLink multicast stays off (NCCL_NVLS_ENABLE=0, as the device's KINDS.md asks).
# Usage: scripts/multigpu-session.sh [devices] [comm] [equiv] [equivx] [equivs] [determinism] [fault] [scaling] [profile] [overlap]
#        [tpequiv] [twonode] [tpscale] [largest] [zero3] [product] (fp8d --standalone + fp8ctl on this node:
#        scripts/multigpu-product.sh; determinism: scripts/dp-determinism.sh)
#        (default: all but overlap, which compares gradient-reduction settings at dp 2, and profile,
#        rank 0's ops at dp 1 and the largest of SIZES with ZeRO-1)
# Environment: NGPU (default: nvidia-smi's count), SIZES (the dp/tp sizes, default "2 4" with 4 GPUs), STEPS (scaling steps, default 12),
# EQUIV_ZERO (equiv's parallel.zero settings, default "false true 3"),
# FP8TRAIN (the fp8train of scaling and profile), SCALING_ZERO (default "false true"), GPT13_FP8 and
# GPT13_PARALLEL (more fields for the gpt-1.3b configs' fp8 and parallel maps, e.g.
# "keep_weight_transpose: false", "grad_reduce_dtype: bf16"), SCALING_CONFIG (scaling's model
# instead of configs/gpt-1.3b.yaml, e.g. configs/llama3-1b.yaml; the fields above apply to it),
# SCALING_VARIANTS (parallel-field sets separated by ';', each run at every size after the other
# in turn, e.g. "sparse_embedding_grad: true;sparse_embedding_grad: false"),
# SCALING_PRECISIONS and PROFILE_PRECISIONS (default "bf16 fp8" and "fp8"), FP8RT_BIN
# (the binaries, default bundle/bin). Exits 1 when a check fails, 77 (skipped) with fewer than 2 GPUs;
# ctest runs its equiv and fault parts as the multigpu label (tests/CMakeLists.txt).
# Written before a multi-GPU machine was lent: the first run is also its test.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
B=${FP8RT_BIN:-bundle/bin}
TRAIN=${FP8TRAIN:-$B/fp8train}  # scaling and profile: another build to compare against
parts=${*:-devices comm equiv equivs determinism fault scaling tpequiv twonode tpscale largest}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if [ "$NGPU" -lt 2 ]; then
  echo "multigpu-session: needs 2 or more GPUs, found $NGPU: skipped"; exit 77
fi
STEPS=${STEPS:-12}
export NCCL_NVLS_ENABLE=0
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
     -x LD_LIBRARY_PATH --mca btl self,tcp)
for v in $(env | grep -o -E '^(FP8RT_)?NCCL_[A-Z_0-9]*' | grep -v '^NCCL_NVLS_ENABLE$'); do
  MPI+=(-x "$v")  # e.g. NCCL_MAX_CTAS, FP8RT_NCCL_CTA_POLICY
done
nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"
cat bundle/VERSION | tee -a "$OUT/device.txt"
sizes=(2); [ "$NGPU" -ge 4 ] && sizes=(2 4)
[ -n "${SIZES:-}" ] && read -r -a sizes <<< "$SIZES"  # e.g. SIZES=4: only 4 GPUs
rc=0
want() { [[ " $parts " == *" $1 "* ]]; }  # a part named on the command line (whole words)

# Median of a metric (default tokens_per_s) over steps 4.. of a metrics file.
median_tps() {
  python3 - "$1" "${2:-tokens_per_s}" <<'PY'
import json, statistics, sys
t = [json.loads(l).get(sys.argv[2], float("nan")) for l in open(sys.argv[1])
     if '"tokens_per_s"' in l][3:]
print(f"{statistics.median(t):.{0 if sys.argv[2] == 'tokens_per_s' else 2}f}" if t else "nan")
PY
}

# gpt-1.3b's config with "parallel: {$2}" and absolute data paths, written to $1.
gpt13_yaml() {  # file parallel-fields; GPT13_FP8 / GPT13_PARALLEL: more fp8 / parallel fields
  sed "s/^parallel:.*//" "${SCALING_CONFIG:-configs/gpt-1.3b.yaml}" > "$1"
  echo "parallel: {$2${GPT13_PARALLEL:+, $GPT13_PARALLEL}}" >> "$1"
  [ -n "${GPT13_FP8:-}" ] && sed -i "s/^fp8: {\(.*\)}/fp8: {\1, $GPT13_FP8}/" "$1"
  sed -i "s|\.\./data/|$(pwd)/data/|" "$1"
}

if want comm; then
  echo "== collectives"
  for n in "${sizes[@]}"; do
    timeout 120 "${MPI[@]}" -np "$n" $B/fp8rt_comm_check --gpu > "$OUT/comm_check_$n.log" 2>&1
    c=$?; echo "comm_check $n GPUs exit $c"; [ $c -eq 0 ] || { rc=1; tail -5 "$OUT/comm_check_$n.log"; }
    timeout 300 "${MPI[@]}" -np "$n" $B/fp8rt_comm_bench --gpu > "$OUT/comm_bench_$n.md" 2>&1
    echo "comm_bench $n GPUs exit $?"; cat "$OUT/comm_bench_$n.md"
  done
  # Two "nodes": no NVLink/P2P, no shared memory: NCCL's network transport over loopback TCP.
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 120 "${MPI[@]}" -x NCCL_P2P_DISABLE \
    -x NCCL_SHM_DISABLE -np 2 $B/fp8rt_comm_check --gpu > "$OUT/comm_check_net.log" 2>&1
  c=$?; echo "comm_check over the network transport exit $c"
  [ $c -eq 0 ] || { rc=1; tail -5 "$OUT/comm_check_net.log"; }
fi

# A small GPT on the GPUs; the same global batch at every dp (batch_size = 8 / dp). lr 3e-4: at 1e-3
# the loss of step 10 on this corpus spikes (3.8 -> 7.3, in bf16 and fp8 alike, and recovers at
# step 11), and a spike multiplies the last-bit differences between the runs by 10.
small_config() {  # name dp zero precision [grad_accum (default 1: batch 8 / dp)]
  local ga=${5:-1}
  cat > "$OUT/$1.yaml" <<EOF
name: $1
model: {n_layer: 4, n_embd: 256, n_head: 4, block_size: 256}
data: {train: $(pwd)/data/corpus.txt}
train: {batch_size: $((8 / $2 / ga)), grad_accum: $ga, seq_len: 256, total_steps: 50, lr: 0.0003}
precision: $4
fp8: {first_step_current: false}
parallel: {zero: $3, scale_check_every: 1, collective_timeout_s: 60}
EOF
}
# run10 TAG RANKS [more fp8train arguments]: $OUT/TAG.yaml for 10 steps (alone, or under mpirun),
# metrics to $OUT/TAG.jsonl, output to $OUT/TAG.log; returns fp8train's exit code.
run10() {
  local tag=$1 n=$2; shift 2
  local cmd=(timeout 200); [ "$n" -gt 1 ] && cmd=(timeout 300 "${MPI[@]}" -np "$n")
  "${cmd[@]}" $B/fp8train --config "$OUT/$tag.yaml" --steps 10 --metrics "$OUT/$tag.jsonl" "$@" \
    > "$OUT/$tag.log" 2>&1
}
# fp8train --device auto under a launcher that gives each rank one GPU (srun --gpus-per-task 1):
# rank r sees only GPU r, its local rank says r, and it must use the one GPU it sees; a rank that
# sees several GPUs but not its own local rank is refused (exit 2), never moved onto another GPU.
if want devices; then
  echo "== devices: one visible GPU per rank"
  small_config dev 2 false fp8
  pids=()
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES=$r FP8RT_RANK=$r FP8RT_LOCAL_RANK=$r FP8RT_WORLD_SIZE=2 \
      FP8RT_MASTER_ADDR=127.0.0.1 FP8RT_MASTER_PORT=29591 timeout 120 $B/fp8train \
      --config "$OUT/dev.yaml" --steps 5 --metrics "$OUT/dev.jsonl" > "$OUT/dev.r$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}"; c=$?; echo "rank $r (sees GPU $r only) exit $c"
    grep -m1 -i "device" "$OUT/dev.r$r.log"; [ $c -eq 0 ] || rc=1; done
  CUDA_VISIBLE_DEVICES=0,1 FP8RT_RANK=0 FP8RT_LOCAL_RANK=5 FP8RT_WORLD_SIZE=1 timeout 60 \
    $B/fp8train --config "$OUT/dev.yaml" --steps 1 > "$OUT/dev_bad.log" 2>&1
  c=$?; echo "local rank 5 with GPUs 0,1 visible: exit $c (want 2)"; tail -1 "$OUT/dev_bad.log"
  [ $c -eq 2 ] || { echo "devices: FAIL"; rc=1; }
fi

if want equiv; then
  echo "== equivalence (losses of steps 1..10; scales checked on every rank every step)"
  for p in bf16 fp8; do
    small_config "eq1_$p" 1 false $p
    run10 "eq1_$p" 1 --checkpoint-dir "$OUT/ck_eq1_$p"
    echo "dp 1 $p exit $?"
    for n in "${sizes[@]}"; do
      for z in ${EQUIV_ZERO:-false true 3}; do
        tag=eq${n}_${z}_$p
        small_config "$tag" "$n" $z $p
        run10 "$tag" "$n" --checkpoint-dir "$OUT/ck_$tag"
        echo "dp $n zero $z $p exit $?"
      done
    done
  done
  # The control for dp n: one rank with micro-batches of 8 / n sequences, n of them accumulated:
  # the same GEMM shapes as each rank of dp n, the same global batch. A dp n run should be as
  # close to it as to nothing else (the only differences: the order the gradients are summed in).
  for p in bf16 fp8; do
    for n in "${sizes[@]}"; do
      small_config "eqc${n}_$p" 1 false $p "$n"
      run10 "eqc${n}_$p" 1
      echo "dp 1, $n micro-batches of $((8 / n)) (control for dp $n) $p exit $?"
    done
  done
  # Resume: 5 steps, then --resume to 10, against the uninterrupted eq${sizes[0]}_*_fp8 runs above.
  for z in ${EQUIV_ZERO:-false true 3}; do
    tag=rs_$z
    small_config "$tag" "${sizes[0]}" $z fp8
    for args in "--steps 5" "--steps 10 --resume"; do
      timeout 300 "${MPI[@]}" -np "${sizes[0]}" $B/fp8train --config "$OUT/$tag.yaml" $args \
        --metrics "$OUT/$tag.jsonl" --checkpoint-dir "$OUT/ck_$tag" >> "$OUT/$tag.log" 2>&1
      echo "resume zero $z ($args) exit $?"
    done
  done
  # Tolerances: bf16 and fp8 losses within 1e-3 relative of dp 1 over 10 steps (the GEMMs of a
  # smaller per-rank batch round differently on the GPU; 2 x H100 measured <= 9e-5); ZeRO-1 vs
  # plain dp within 1e-3; fp8 runs
  # exactly one amax all-reduce per step; a resumed run's losses bit-identical to the whole run's.
  python3 - "$OUT" "${sizes[0]}" <<'PY' | tee "$OUT/equivalence.md"
import glob, os, sys
sys.path.insert(0, "scripts")
from losses import rows, rel_diff as diff
out, rs_dp, bad = sys.argv[1], sys.argv[2], []
print("| run | against | largest relative loss difference, 10 steps | tolerance | amax collectives/step |")
print("|---|---|---:|---:|---|")
for f in sorted(glob.glob(f"{out}/eq[24]_*.jsonl")):
    tag = os.path.basename(f)[:-6]
    n, z, p = tag[2:].split("_")
    amax = sorted({r.get("amax_collectives", -1) for r in rows(f)})
    against = [f"eq1_{p}"] + ([f"eq{n}_false_{p}"] if z != "false" else [])
    for g in against:
        if not os.path.exists(f"{out}/{g}.jsonl"): continue  # (EQUIV_ZERO left it out)
        d = diff(rows(f"{out}/{g}.jsonl"), rows(f))
        ok = d <= 1e-3 and (p != "fp8" or amax == [1])
        bad += [] if ok else [tag]
        print(f"| {tag} | {g} | {d:.2e} | 1e-3 | {amax} |" + ("" if ok else " FAIL"))
# Against the control with the same per-rank GEMM shapes (reported; 1e-3 as above).
for f in sorted(glob.glob(f"{out}/eqc*.jsonl")):
    n, p = os.path.basename(f)[3:-6].split("_")
    for z in ("false", "true", "3"):
        if not os.path.exists(f"{out}/eq{n}_{z}_{p}.jsonl"): continue
        d = diff(rows(f), rows(f"{out}/eq{n}_{z}_{p}.jsonl"))
        if d == float("inf"): continue
        ok = d <= 1e-3
        bad += [] if ok else [f"eq{n}_{z}_{p} vs control"]
        print(f"| eq{n}_{z}_{p} | eqc{n}_{p} (dp 1, {n} x {8 // int(n)}) | {d:.2e} | 1e-3 | |" + ("" if ok else " FAIL"))
for z in ("false", "true", "3"):
    if not os.path.exists(f"{out}/rs_{z}.jsonl"): continue
    a, b = rows(f"{out}/eq{rs_dp}_{z}_fp8.jsonl"), rows(f"{out}/rs_{z}.jsonl")
    same = len(a) == len(b) == 10 and all(x["loss"] == y["loss"] for x, y in zip(a, b))
    bad += [] if same else [f"rs_{z}"]
    print(f"| rs_{z} (dp {rs_dp}, 5 steps + resume) | eq{rs_dp}_{z}_fp8 | {diff(a, b):.2e} | exact | |" + ("" if same else " FAIL"))
print("\nfailed: " + (", ".join(bad) if bad else "none"))
sys.exit(1 if bad else 0)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi

if want equivs; then
  # parallel.sparse_embedding_grad on NCCL: gpt2 (tied) and llama (untied: no dense part, ZeRO-1's
  # window zeroed, then every rank's rows added) at dp 2 and 4 with ZeRO-1, sparse and dense, each
  # against dp 1. The tokens are the corpus's bytes doubled (a token shard), so every rank's window
  # of the 256-row table receives rows.
  echo "== equivalence, sparse embedding gradient"
  python3 - "$OUT/spread.bin" <<'PY'
import struct, sys
b = open("data/corpus.txt", "rb").read()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(b), *([0] * 253)))
    f.write(struct.pack(f"<{len(b)}H", *(2 * (x % 128) for x in b)))
PY
  sconfig() {  # name arch dp zero precision sparse
    local model="{n_layer: 4, n_embd: 256, n_head: 4, block_size: 256}"
    [ "$2" = llama ] && model="{arch: llama, n_layer: 4, n_embd: 256, n_head: 4, n_kv_head: 2, ffn_hidden: 512, block_size: 256}"
    cat > "$OUT/$1.yaml" <<EOF
name: $1
model: $model
data: {train: $OUT/spread.bin, format: tokens}
train: {batch_size: $((8 / $3)), seq_len: 256, total_steps: 50, lr: 0.0003}
precision: $5
fp8: {first_step_current: false}
parallel: {zero: $4, sparse_embedding_grad: $6, scale_check_every: 1, collective_timeout_s: 60}
EOF
  }
  for a in gpt2 llama; do
    for p in ${EQUIVS_PRECISIONS:-bf16 fp8}; do
      sconfig "eqs1_${a}_$p" $a 1 false $p true; run10 "eqs1_${a}_$p" 1; echo "$a dp 1 $p exit $?"
      for n in "${sizes[@]}"; do
        for sp in true false; do
          tag=eqs${n}_${a}_${p}_$sp
          sconfig "$tag" $a "$n" true $p $sp; run10 "$tag" "$n"; echo "$a dp $n ZeRO-1 $p sparse $sp exit $?"
        done
      done
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/equivalence_sparse.md"
import glob, os, sys
sys.path.insert(0, "scripts")
from losses import rows as rows_of, rel_diff as diff
out, bad = sys.argv[1], []
rows = lambda tag: rows_of(f"{out}/{tag}.jsonl")
print("| run | against | largest relative loss difference, 10 steps | tolerance |")
print("|---|---|---:|---:|")
for f in sorted(glob.glob(f"{out}/eqs[24]_*_true.jsonl")):
    tag = os.path.basename(f)[:-6]
    n, a, p, _ = tag[3:].split("_")
    for against in (f"eqs1_{a}_{p}", f"eqs{n}_{a}_{p}_false"):
        d = diff(rows(against), rows(tag))
        ok = d <= 1e-3 and len(rows(tag)) == 10
        bad += [] if ok else [f"{tag} vs {against}"]
        print(f"| {tag} | {against} | {d:.2e} | 1e-3 |" + ("" if ok else " FAIL"))
print("\nfailed: " + (", ".join(bad) if bad else "none"))
sys.exit(1 if bad else 0)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if want equivx; then
  # ZeRO-1 beyond the defaults (the weight gather's overlap under each): current scaling against
  # dp 1 with current scaling, 2 micro-batches per rank against dp 1 (same global batch), and
  # fp8.keep_weight_transpose: false (each weight transposed just before its dgrad) against the
  # default, which it must equal bit for bit; and, without ZeRO-1, fp8.cache_weights: false
  # against plain dp, also bit for bit.
  echo "== equivalence, ZeRO-1 variants"
  xconfig() {  # name dp zero fp8-extra [grad_accum]: small_config (fp8), then more fp8 settings
    small_config "$1" "$2" "$3" fp8 "${5:-1}"
    sed -i "s/^fp8: {first_step_current: false}/fp8: {first_step_current: false$4}/" "$OUT/$1.yaml"
  }
  xconfig eqx1_delayed 1 false ""; xconfig eqx1_cur 1 false ", scaling: current"
  for tag in eqx1_delayed eqx1_cur; do run10 "$tag" 1; echo "$tag exit $?"; done
  for n in "${sizes[@]}"; do
    xconfig "eqx${n}_keep" "$n" true ""
    xconfig "eqx${n}_lean" "$n" true ", keep_weight_transpose: false"
    xconfig "eqx${n}_cur" "$n" true ", scaling: current"
    xconfig "eqx${n}_ga2" "$n" true "" 2
    # (plain dp: fp8.cache_weights: false does not run with ZeRO-1)
    xconfig "eqx${n}_plain" "$n" false ""
    xconfig "eqx${n}_uncached" "$n" false ", cache_weights: false"
    for v in keep lean cur ga2 plain uncached; do
      run10 "eqx${n}_$v" "$n"
      echo "dp $n ZeRO-1 $v exit $?"
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/equivalence_x.md"
import glob, os, sys
sys.path.insert(0, "scripts")
from losses import rows as rows_of, rel_diff as diff
out, bad = sys.argv[1], []
def rows(tag):
    return rows_of(f"{out}/{tag}.jsonl")
print("| run | against | largest relative loss difference, 10 steps | tolerance | gather ms (steps 2..) |")
print("|---|---|---:|---:|---|")
for f in sorted(glob.glob(f"{out}/eqx[24]_*.jsonl")):
    tag = os.path.basename(f)[:-6]
    n, v = tag[3:].split("_")
    against, tol = {"keep": ("eqx1_delayed", 1e-3), "lean": (f"eqx{n}_keep", 0.0),
                    "cur": ("eqx1_cur", 1e-3), "ga2": ("eqx1_delayed", 1e-3),
                    "plain": ("eqx1_delayed", 1e-3), "uncached": (f"eqx{n}_plain", 0.0)}[v]
    d = diff(rows(against), rows(tag))
    gather = [round(r.get("weight_gather_ms", -1), 2) for r in rows(tag)][1:4]
    ok = d <= tol
    bad += [] if ok else [tag]
    print(f"| {tag} | {against} | {d:.2e} | {'exact' if tol == 0 else tol} | {gather} |" + ("" if ok else " FAIL"))
print("\nfailed: " + (", ".join(bad) if bad else "none"))
sys.exit(1 if bad else 0)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi

if want determinism; then
  # gpt2-124m at dp 2, five runs (fp8 x 3, bf16 x 2): every rank's gradients, weights, moments and
  # FP8 scale state hashed after every step must agree, and runs must repeat bit for bit.
  echo "== determinism: replicas identical after every step, runs identical"
  BATCH=16 WARMUP=100 HASH_EVERY=1 RUN_TIMEOUT=120 FP8RT_BIN="$B" OUT="$OUT/determinism" \
    RUNS="det_a:fp8:overlap det_b:fp8:overlap det_c:fp8:overlap det_d:bf16:overlap det_e:bf16:overlap" \
    bash scripts/dp-determinism.sh 12
  c=$?; echo "determinism exit $c"; [ $c -eq 0 ] || rc=1
fi

if want fault; then
  echo "== a rank killed mid-run (the others must exit 4 naming it, never hang)"
  small_config fault 2 false fp8
  sed -i 's/total_steps: 50/total_steps: 1000000/' "$OUT/fault.yaml"
  ( timeout 120 "${MPI[@]}" -np 2 $B/fp8train --config "$OUT/fault.yaml" \
      --metrics "$OUT/fault.jsonl" > "$OUT/fault.log" 2>&1; echo $? > "$OUT/fault.rc" ) &
  runner=$!
  for _ in $(seq 600); do [ -s "$OUT/fault.jsonl" ] && break; sleep 0.1; done
  sleep 2
  victim=""
  for p in $(pgrep -f "fp8train --config $OUT/fault.yaml"); do   # a rank, not mpirun
    [ "$(cat /proc/$p/comm 2>/dev/null)" = fp8train ] && victim=$p
  done
  start=$(date +%s)
  [ -n "$victim" ] && kill -9 "$victim"
  wait $runner
  took=$(( $(date +%s) - start ))
  echo "mpirun exit $(cat "$OUT/fault.rc"), $took s after SIGKILL to pid ${victim:-none}"
  grep -m3 -E "exited|lost|peer" "$OUT/fault.log"
  { [ -n "$victim" ] && [ "$took" -le 90 ] && grep -q -E "exited|lost" "$OUT/fault.log"; } || {
    echo "fault: FAIL"; rc=1; }
fi

if want scaling; then
  model=$(basename "${SCALING_CONFIG:-gpt-1.3b}" .yaml)
  echo "== scaling: $model per-GPU tokens/s at dp 1, ${sizes[*]} (median of steps 4..$STEPS), $TRAIN"
  for p in ${SCALING_PRECISIONS:-bf16 fp8}; do
    gpt13_yaml "$OUT/sc1.yaml" "zero: false"  # (GPT13_FP8 applies to one GPU too)
    timeout 300 $TRAIN --config "$OUT/sc1.yaml" --precision $p --steps "$STEPS" \
      --metrics "$OUT/sc1_$p.jsonl" > "$OUT/sc1_$p.log" 2>&1
    one=$(median_tps "$OUT/sc1_$p.jsonl")
    echo "| $model $p | dp 1 | $one tok/s | 1 GPU |" | tee -a "$OUT/scaling.md"
    IFS=';' read -r -a variants <<< "${SCALING_VARIANTS:-}"
    [ ${#variants[@]} -eq 0 ] && variants=("")
    for n in "${sizes[@]}"; do
      for z in ${SCALING_ZERO:-false true}; do
        for vi in "${!variants[@]}"; do
          v=${variants[$vi]}; tag="sc${n}_${z}${v:+_v$vi}_$p"
          GPT13_PARALLEL="${GPT13_PARALLEL:+$GPT13_PARALLEL${v:+, }}$v" gpt13_yaml "$OUT/sc.yaml" "zero: $z"
          timeout 400 "${MPI[@]}" -np "$n" $TRAIN --config "$OUT/sc.yaml" --precision $p \
            --steps "$STEPS" --metrics "$OUT/$tag.jsonl" > "$OUT/$tag.log" 2>&1
          all=$(median_tps "$OUT/$tag.jsonl")
          python3 -c "a, o = float('$all') / $n, float('$one'); print(f'| $model $p | dp $n zero $z${v:+ ($v)} | {a:.0f} tok/s per GPU | {a / o:.3f} of 1 GPU |')" \
            | tee -a "$OUT/scaling.md"
        done
      done
    done
  done
fi
if want profile; then
  # Where the step's time goes on rank 0 (--profile-ops: CUDA events around every op on the
  # compute stream, steps 3..; the marks add about 2%): one GPU against dp N with ZeRO-1.
  n=${sizes[-1]}
  for p in ${PROFILE_PRECISIONS:-fp8}; do
    timeout 300 $TRAIN --config configs/gpt-1.3b.yaml --precision $p --steps "$STEPS" \
      --profile-ops > "$OUT/prof1_$p.log" 2>&1
    gpt13_yaml "$OUT/prof.yaml" "zero: true"
    timeout 400 "${MPI[@]}" --tag-output -np "$n" $TRAIN --config "$OUT/prof.yaml" \
      --precision $p --steps "$STEPS" --profile-ops > "$OUT/prof${n}_$p.log" 2>&1
    echo "-- profile $p, 1 GPU:"; grep -A45 "^op (per step)" "$OUT/prof1_$p.log"
    echo "-- profile $p, dp $n with ZeRO-1, rank 0:"
    grep "^\[1,0\]" "$OUT/prof${n}_$p.log" | sed 's/^\[1,0\]<std...>://' | grep -A45 "^op (per step)"
  done
fi
if want scaling; then
  # Where the time and memory go (medians of steps 4..): the step time over one GPU's (the
  # reduction not hidden by the backward, an upper bound), the amax all-reduce's share, ZeRO-1's
  # weight all-gather (FP8 bytes in fp8, BF16 in bf16) and memory per GPU.
  python3 - "$OUT" <<'PY' | tee "$OUT/scaling_breakdown.md"
import glob, json, os, statistics, sys
out = sys.argv[1]
def med(f, k):
    v = [json.loads(l).get(k) for l in open(f) if '"tokens_per_s"' in l][3:]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else float("nan")
print("| run | step ms | over 1 GPU (not hidden) | grad reduce span ms | amax reduce ms (share) | weight all-gather ms | memory per GPU GiB |")
print("|---|---:|---:|---:|---:|---:|---:|")
for p in ("bf16", "fp8"):
    one = f"{out}/sc1_{p}.jsonl"
    if not os.path.exists(one): continue
    s1 = med(one, "step_ms")
    print(f"| {p} 1 GPU | {s1:.1f} | - | - | - | - | {med(one, 'device_used_gib'):.1f} |")
    for f in sorted(f for f in glob.glob(f"{out}/sc*_*_{p}.jsonl") if not os.path.basename(f).startswith("sc1_")):
        s, a = med(f, "step_ms"), med(f, "amax_reduce_ms")
        print(f"| {os.path.basename(f)[:-6]} | {s:.1f} | {s - s1:.1f} ms ({(s - s1) / s:.1%}) | "
              f"{med(f, 'grad_reduce_ms'):.1f} | {a:.3f} ({a / s:.3%}) | {med(f, 'weight_gather_ms'):.1f} | "
              f"{med(f, 'device_used_gib'):.1f} |")
PY
fi
if want overlap; then
  echo "== overlap: gpt-1.3b at dp 1 and 2, gradient-reduction settings (medians, steps 4..$STEPS)"
  gpt13() {  # tag ranks "parallel settings" precision [NAME=value...]
    local tag=$1 n=$2 par=$3 prec=$4; shift 4
    gpt13_yaml "$OUT/$tag.yaml" "$par"
    if [ "$n" = 1 ]; then
      env "$@" timeout 300 $B/fp8train --config "$OUT/$tag.yaml" --precision $prec \
        --steps "$STEPS" --metrics "$OUT/$tag.jsonl" > "$OUT/$tag.log" 2>&1
    else
      local xs=(); for e in "$@"; do xs+=(-x "$e"); done
      timeout 300 "${MPI[@]}" "${xs[@]}" -np "$n" $B/fp8train --config "$OUT/$tag.yaml" \
        --precision $prec --steps "$STEPS" --metrics "$OUT/$tag.jsonl" > "$OUT/$tag.log" 2>&1
    fi
    echo "| $tag | $prec | dp $n | {$par} $* | $(median_tps "$OUT/$tag.jsonl") tok/s | step $(median_tps "$OUT/$tag.jsonl" step_ms) ms | grad reduce $(median_tps "$OUT/$tag.jsonl" grad_reduce_ms) ms | weight all-gather $(median_tps "$OUT/$tag.jsonl" weight_gather_ms) ms |" | tee -a "$OUT/overlap.md"
  }
  for prec in ${OVERLAP_PRECISIONS:-bf16 fp8}; do
    gpt13 ov1_$prec 1 "zero: false" $prec
    gpt13 ov2_$prec 2 "zero: false" $prec
    gpt13 ov2_zero_$prec 2 "zero: true" $prec
  done
fi
if want tpequiv; then
  echo "== tensor parallelism: tp 2 (and dp 2 x tp 2, tp 4 on 4 GPUs) against tp 1"
  for p in bf16 fp8; do
    small_config "tp1_$p" 1 false $p
    run10 "tp1_$p" 1
    echo "tp 1 $p exit $?"
    grids=("2 1 2"); [ "$NGPU" -ge 4 ] && grids+=("4 2 2" "4 1 4")  # ranks dp tp
    for g in "${grids[@]}"; do
      set -- $g; n=$1; d=$2; t=$3
      tag=tp${t}_${n}_$p
      small_config "$tag" "$d" false $p
      sed -i "s/^parallel: {/parallel: {tp: $t, /" "$OUT/$tag.yaml"
      run10 "$tag" "$n"
      echo "tp $t on $n GPUs $p exit $?"
    done
  done
  # Tolerance: 1e-3 relative on the losses of 10 steps (bf16 rounds the partial sums before the
  # TP all-reduce); one amax all-reduce per step in fp8.
  python3 - "$OUT" <<'PY' | tee "$OUT/tp_equivalence.md"
import glob, os, sys
sys.path.insert(0, "scripts")
from losses import rows, rel_diff
out, bad = sys.argv[1], []
print("| run | against | largest relative loss difference, 10 steps | tolerance | amax collectives/step |")
print("|---|---|---:|---:|---|")
for f in sorted(glob.glob(f"{out}/tp[24]_*.jsonl")):
    tag = os.path.basename(f)[:-6]
    p = tag.rsplit("_", 1)[1]
    a, b = rows(f"{out}/tp1_{p}.jsonl"), rows(f)
    d = rel_diff(a, b)
    amax = sorted({r.get("amax_collectives", -1) for r in b})
    ok = d <= 1e-3 and (p != "fp8" or amax == [1])
    bad += [] if ok else [tag]
    print(f"| {tag} | tp1_{p} | {d:.2e} | 1e-3 | {amax} |" + ("" if ok else " FAIL"))
print("\nfailed: " + (", ".join(bad) if bad else "none"))
sys.exit(1 if bad else 0)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi

# Two "nodes" on one machine: the ranks in two host groups (NCCL_HOSTID differs between them, so
# NCCL sees two hosts), NVLink P2P and shared memory off (NCCL's network transport, over loopback
# TCP), started without mpirun through fp8train's own TCP rendezvous (FP8RT_MASTER_ADDR/PORT), as
# on two real nodes. dp 2 x tp 2 fp8 on 4 GPUs (tp within a group, dp across), dp 2 on 2; the
# losses against the same grid over NVLink (tpequiv's run) and one GPU, within 1e-3.
if want twonode; then
  echo "== two host groups over NCCL's network transport (fp8train's TCP rendezvous, no mpirun)"
  if [ "$NGPU" -ge 4 ]; then n=4; d=2; t=2; else n=2; d=2; t=1; fi
  small_config twonode "$d" false fp8
  [ "$t" -gt 1 ] && sed -i "s/^parallel: {/parallel: {tp: $t, /" "$OUT/twonode.yaml"
  pids=()
  for r in $(seq 0 $((n - 1))); do
    NCCL_HOSTID=fp8rt-group$((r * 2 / n)) NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
      FP8RT_RANK=$r FP8RT_LOCAL_RANK=$r FP8RT_WORLD_SIZE=$n FP8RT_MASTER_ADDR=127.0.0.1 \
      FP8RT_MASTER_PORT=29593 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 200 $B/fp8train \
      --config "$OUT/twonode.yaml" --steps 10 --metrics "$OUT/twonode.jsonl" \
      > "$OUT/twonode.r$r.log" 2>&1 &
    pids+=($!)
  done
  for r in $(seq 0 $((n - 1))); do wait "${pids[$r]}"; c=$?; echo "rank $r exit $c"; [ $c -eq 0 ] || rc=1; done
  grep -h -m2 -E "NET/Socket|Using network|via NET" "$OUT"/twonode.r*.log | head -4
  ref=tp${t}_${n}_fp8; [ "$t" = 1 ] && ref=eq2_false_fp8
  python3 - "$OUT" "$ref" <<'PY' | tee "$OUT/twonode.md"
import sys
sys.path.insert(0, "scripts")
from losses import rows, rel_diff
out, ref = sys.argv[1], sys.argv[2]
a, bad, compared = rows(f"{out}/twonode.jsonl"), [], 0
for g in (ref, "tp1_fp8", "eq1_fp8"):
    b = rows(f"{out}/{g}.jsonl")
    if not b: continue  # run with tpequiv (or equiv) for the references
    compared += 1
    d = rel_diff(a, b)
    bad += [] if d <= 1e-3 else [g]
    print(f"| two host groups, network transport | {g} | {d:.2e} | 1e-3 |" + ("" if d <= 1e-3 else " FAIL"))
if not compared:
    bad.append("no reference run to compare with (run tpequiv in the same OUT)")
print("failed: " + (", ".join(bad) if bad else "none"))
sys.exit(1 if bad or not a else 0)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi

if want tpscale; then
  echo "== tensor parallelism: gpt-1.3b at tp 1 and tp ${sizes[*]} (one replica over the GPUs)"
  sed "s/^parallel:.*//" configs/gpt-1.3b.yaml | sed "s|\.\./data/|$(pwd)/data/|" > "$OUT/tp13_1.yaml"
  for p in ${TP_PRECISIONS:-fp8 bf16}; do
    timeout 300 $B/fp8train --config "$OUT/tp13_1.yaml" --precision $p --steps "$STEPS" \
      --metrics "$OUT/tp13_1_$p.jsonl" > "$OUT/tp13_1_$p.log" 2>&1
    c=$?; [ $c -eq 0 ] || { echo "tp 1 $p exit $c"; tail -3 "$OUT/tp13_1_$p.log"; rc=1; continue; }
    one=$(median_tps "$OUT/tp13_1_$p.jsonl")
    echo "| gpt-1.3b $p | tp 1 | $one tok/s | $(median_tps "$OUT/tp13_1_$p.jsonl" step_ms) ms | 1.000 | $(median_tps "$OUT/tp13_1_$p.jsonl" device_used_gib) GiB |" | tee -a "$OUT/tp.md"
    for n in "${sizes[@]}"; do
      cp "$OUT/tp13_1.yaml" "$OUT/tp13_$n.yaml"; echo "parallel: {tp: $n}" >> "$OUT/tp13_$n.yaml"
      timeout 300 "${MPI[@]}" -np "$n" $B/fp8train --config "$OUT/tp13_$n.yaml" --precision $p \
        --steps "$STEPS" --metrics "$OUT/tp13_${n}_$p.jsonl" > "$OUT/tp13_${n}_$p.log" 2>&1
      c=$?; [ $c -eq 0 ] || { echo "tp $n $p exit $c"; tail -3 "$OUT/tp13_${n}_$p.log"; rc=1; continue; }
      all=$(median_tps "$OUT/tp13_${n}_$p.jsonl")
      per=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / $n / float(sys.argv[2]):.3f}')" "$all" "$one")
      echo "| gpt-1.3b $p | tp $n ($n GPUs, one replica) | $all tok/s | $(median_tps "$OUT/tp13_${n}_$p.jsonl" step_ms) ms | $per per GPU | $(median_tps "$OUT/tp13_${n}_$p.jsonl" device_used_gib) GiB |" | tee -a "$OUT/tp.md"
    done
  done
fi

# The largest GPT of configs/: gpt-6.7b, data parallel over every GPU with ZeRO-1 (its FP32 state
# does not fit one GPU beside the activations), fp8 and bf16: per-GPU tokens/s, MFU, memory.
if want largest; then
  BIG=${LARGEST_CONFIG:-configs/gpt-6.7b.yaml}  # or configs/gpt-13b.yaml (tp 2 x ZeRO-1)
  echo "== the largest model: $BIG on $NGPU GPUs (median of steps 4..$STEPS)"
  sed "s|\.\./data/|$(pwd)/data/|" "$BIG" > "$OUT/big.yaml"
  for p in ${LARGEST_PRECISIONS:-fp8 bf16}; do
    timeout 400 "${MPI[@]}" -np "$NGPU" $B/fp8train --config "$OUT/big.yaml" --precision $p \
      --steps "$STEPS" --metrics "$OUT/big_$p.jsonl" > "$OUT/big_$p.log" 2>&1
    c=$?; echo "$(basename "$BIG" .yaml) $p exit $c"; [ $c -eq 0 ] || { rc=1; tail -5 "$OUT/big_$p.log"; }
    all=$(median_tps "$OUT/big_$p.jsonl")
    per=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / $NGPU:.0f}')" "$all")
    echo "| $(basename "$BIG" .yaml) $p | $NGPU GPUs, $(grep '^parallel' "$BIG") | $per tok/s per GPU | step $(median_tps "$OUT/big_$p.jsonl" step_ms) ms | MFU $(median_tps "$OUT/big_$p.jsonl" mfu) | $(median_tps "$OUT/big_$p.jsonl" device_used_gib) GiB per GPU | model $(median_tps "$OUT/big_$p.jsonl" model_gib) GiB |" | tee -a "$OUT/largest.md"
  done
fi

if want zero3; then
  # ZeRO-3 (docs/SCALING.md), medians of steps 4..$STEPS on every GPU: gpt-1.3b (B 4 x T 2048
  # per GPU) at dp 1 and with each of ZERO3_VARIANTS (';'-separated parallel fields; default
  # ZeRO-1, ZeRO-3, ZeRO-3 keeping the gathered weights, hybrid ZeRO-3 in groups of 2); with
  # ZERO3_LLAMA=1 also
  # llama3-8b (configs/llama3-8b-zero3.yaml) in fp8, with train.recompute, with the
  # nondeterministic cuDNN backward, in bf16 (plain and recompute), and configs/llama3-8b.yaml
  # (tp 2 x ZeRO-1) beside it.
  z3run() {  # tag ranks config precision [fp8train arguments]
    local tag=$1 n=$2 cfg=$3 p=$4; shift 4
    local cmd=(timeout 300); [ "$n" -gt 1 ] && cmd=(timeout 300 "${MPI[@]}" -np "$n")
    "${cmd[@]}" $B/fp8train --config "$cfg" --precision $p --steps "$STEPS" \
      --metrics "$OUT/$tag.jsonl" "$@" > "$OUT/$tag.log" 2>&1
    local c=$?; [ $c -eq 0 ] || { rc=1; tail -3 "$OUT/$tag.log"; }
    python3 - "$OUT/$tag.jsonl" "$n" "$tag" "$c" <<'PY' | tee -a "$OUT/zero3.md"
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l][3:]
m = lambda k: statistics.median([x[k] for x in r if k in x] or [float("nan")])
n = int(sys.argv[2])
print(f"| {sys.argv[3]} | exit {sys.argv[4]} | {m('tokens_per_s') / n:.0f} tok/s per GPU | "
      f"{m('step_ms'):.1f} ms | MFU {m('mfu'):.3f} | {m('device_used_gib'):.2f} GiB (model "
      f"{m('model_gib'):.2f}) | grad span {m('grad_reduce_ms'):.0f} ms | gathers {m('weight_gather_ms'):.0f} ms |")
PY
  }
  for p in ${ZERO3_PRECISIONS:-fp8 bf16}; do
    gpt13_yaml "$OUT/z1g.yaml" "zero: false"
    [ "${ZERO3_DP1:-1}" = 1 ] && z3run "g13_dp1_$p" 1 "$OUT/z1g.yaml" $p
    IFS=';' read -r -a zvariants <<< "${ZERO3_VARIANTS:-zero: true;zero: 3;zero: 3, keep_gathered_weights: true;zero: 3, shard_group: 2}"
    for z in "${zvariants[@]}"; do
      gpt13_yaml "$OUT/zg.yaml" "$z"
      tag="g13_dp${NGPU}_$(echo "$z" | tr -d ' ,:' | sed 's/keep_gathered_weightstrue/keep/')_$p"
      z3run "$tag" "$NGPU" "$OUT/zg.yaml" $p
    done
  done
  if [ "${ZERO3_LLAMA:-0}" = 1 ]; then
    sed "s|\.\./data/|$(pwd)/data/|" configs/llama3-8b-zero3.yaml > "$OUT/l8z3.yaml"
    sed "s/train: {batch_size: 1,/train: {recompute: true, batch_size: 1,/" "$OUT/l8z3.yaml" \
      > "$OUT/l8z3r.yaml"
    sed "s|\.\./data/|$(pwd)/data/|" configs/llama3-8b.yaml > "$OUT/l8z1.yaml"
    z3run l8_z3_fp8 "$NGPU" "$OUT/l8z3.yaml" fp8 --memory-report
    z3run l8_z3_fp8_recompute "$NGPU" "$OUT/l8z3r.yaml" fp8
    z3run l8_z3_fp8_nondet "$NGPU" "$OUT/l8z3.yaml" fp8 --attention cudnn-nondeterministic
    z3run l8_z3_bf16 "$NGPU" "$OUT/l8z3.yaml" bf16
    z3run l8_z3_bf16_recompute "$NGPU" "$OUT/l8z3r.yaml" bf16
    z3run l8_tp2_zero1_fp8 "$NGPU" "$OUT/l8z1.yaml" fp8
  fi
fi

if want product; then
  echo "== the product: fp8d --standalone + fp8ctl on $NGPU GPUs"
  OUT="$OUT" FP8RT_BIN="$B" NGPU="$NGPU" bash scripts/multigpu-product.sh || rc=1
fi
exit $rc
