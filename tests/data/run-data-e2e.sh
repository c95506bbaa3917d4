#!/usr/bin/env bash
# Bring your own data, end to end on the CPU (ctest label data; CI runs it after the unit tests):
# fp8data trains two SentencePiece BPE tokenizers on the project's large corpus
# (scripts/make-corpus.sh --large), 32,000 pieces (uint16 shards) and 70,000 (uint32 shards),
# tokenizes the corpus with each (a validation split and fp8data.json beside the shards) and
# verifies every id; then fp8train trains a gpt2-124m-shaped model and llama-tiny on the 32K
# shards, llama-tiny on the 70K ones, and a llama with Llama-3's vocabulary (128,256) on the
# uint32 shards; fp8train --generate decodes the trained model's text with the tokenizer.
# Usage: run-data-e2e.sh BUILD_DIR. Exits 77 (skipped) where the large corpus cannot be made.
set -euo pipefail
build=$(cd "${1:?usage: run-data-e2e.sh BUILD_DIR}" && pwd)
cd "$(dirname "$0")/../.."
repo=$PWD
fp8data=$build/cli/fp8data
fp8train=$build/runtime/fp8train
work=$(mktemp -d /tmp/fp8rt_data_e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "data-e2e: FAILED: $*" >&2; exit 1; }
step() { echo "== $*"; }

if ! bash scripts/make-corpus.sh --large >"$work/corpus.log" 2>&1; then
  cat "$work/corpus.log"
  echo "data-e2e: skipped: scripts/make-corpus.sh --large could not build the corpus" >&2
  exit 77
fi
gunzip -c data/corpus-large.txt.gz >"$work/corpus-large.txt"
cd "$work"

# The command line: bare, the help (exit 2); a mistyped verb, named with the nearest one.
rc=0; bare=$("$fp8data" 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "^Usage: fp8data" <<<"$bare" || fail "bare fp8data: exit $rc, $bare"
rc=0; typo=$("$fp8data" tokenise 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "unknown command 'tokenise'; did you mean 'tokenize'?" <<<"$typo" \
  || fail "a mistyped verb: exit $rc, $typo"
for v in 32000 70000; do
  step "train-tokenizer: bpe, $v pieces"
  "$fp8data" train-tokenizer --input corpus-large.txt --vocab-size "$v" --out "tok/bpe$v.model"
  step "tokenize with bpe$v"
  "$fp8data" tokenize --input corpus-large.txt --tokenizer "tok/bpe$v.model" --out "bpe$v" \
    2>"tokenize$v.err" | tee "tokenize$v.out"
  grep -q '100.0%' "tokenize$v.err" || fail "no progress bar reached 100% ($(cat "tokenize$v.err"))"
  "$fp8data" verify "bpe$v" | tee "verify$v.out"
  grep -q "bpe$v/train: .*(vocabulary $v): ok" "verify$v.out" || fail "verify $v"
  grep -q "bpe$v/val: " "verify$v.out" || fail "no validation split for $v"
done
python3 - <<'EOF' || fail "metadata"
import json
for v, ids in ((32000, "uint16"), (70000, "uint32")):
    m = json.load(open(f"bpe{v}/fp8data.json"))
    assert m["ids"] == ids, (v, m["ids"])
    assert m["tokenizer"]["vocab_size"] == v and m["tokenizer"]["model"] == "tokenizer.model"
    assert m["train"]["tokens"] > 5_000_000 and m["val"]["tokens"] > 50_000, m
# The shard headers: llm.c's magic and version by id width.
import struct
for v, magic, version in ((32000, 20240520, 1), (70000, 20240801, 7)):
    h = struct.unpack("<3i", open(f"bpe{v}/train/shard_000000.bin", "rb").read(12))
    assert h[:2] == (magic, version), (v, h)
print("data-e2e: metadata and shard headers as documented")
EOF
step "tokenize again: up to date"
"$fp8data" tokenize --input corpus-large.txt --tokenizer tok/bpe32000.model --out bpe32000 \
  2>/dev/null | grep -q "is up to date" || fail "a second tokenize was not up to date"

# Configs over the shards: a gpt2-124m shape (vocabulary 32,000), llama-tiny (32,000 and
# 70,000), a llama with Llama-3's 128,256 ids over the uint32 shards.
write_config() {  # name eval-tokens dir model-line
  cat >"$1.yaml" <<EOF
name: $1
model: $4
data: {train: $3/train, val: $3/val, format: tokens, tokenizer: $3/fp8data.json}
train: {batch_size: 2, seq_len: 64, total_steps: 20, lr: 0.003, min_lr: 0.0003, warmup_steps: 2,
        log_every: 5, eval_every: 10, eval_tokens: $2, sample_every: 10, sample_tokens: 16}
precision: fp32
EOF
}
tiny="arch: llama, n_layer: 2, n_embd: 64, n_head: 4, n_kv_head: 2, ffn_hidden: 160, block_size: 64"
# (The 124M model evaluates one micro-batch: its forward takes seconds on two cores.)
write_config gpt2-124m-bpe32000 128 bpe32000 \
  "{n_layer: 12, n_embd: 768, n_head: 12, block_size: 1024, vocab_size: 32000}"
write_config llama-tiny-bpe32000 4096 bpe32000 "{$tiny, vocab_size: 32000}"
write_config llama-tiny-bpe70000 4096 bpe70000 "{$tiny, vocab_size: 70000}"
write_config llama-tiny-vocab128256 4096 bpe70000 "{$tiny, vocab_size: 128256}"
for run in gpt2-124m-bpe32000:2 llama-tiny-bpe32000:20 llama-tiny-bpe70000:20 \
           llama-tiny-vocab128256:20; do
  name=${run%%:*} steps=${run##*:}
  step "fp8train $name, $steps steps"
  "$fp8train" --config "$name.yaml" --steps "$steps" --checkpoint-dir "ck-$name" \
    --metrics "$name.jsonl" 2>&1 | tee "$name.log"
  grep -q '"loss"' "$name.jsonl" || fail "$name wrote no loss"
  grep -q "data: .* tokens in 1 shard(s)" "$name.log" || fail "$name: no data line"
done
python3 - <<'EOF' || fail "losses"
import json, math
for name, vocab in (("llama-tiny-bpe32000", 32000), ("llama-tiny-bpe70000", 70000),
                    ("llama-tiny-vocab128256", 128256)):
    losses = [json.loads(l)["loss"] for l in open(f"{name}.jsonl") if '"loss"' in l]
    first, last = losses[0], losses[-1]
    # The first loss is about ln(vocab) (uniform), and training lowers it.
    assert abs(first - math.log(vocab)) < 1.0, (name, first, math.log(vocab))
    assert last < first - 0.3, (name, first, last)
    print(f"data-e2e: {name}: loss {first:.2f} (ln {vocab} = {math.log(vocab):.2f}) -> {last:.2f}")
EOF
grep -q "sample: " llama-tiny-bpe32000.log || fail "no sample line"
step "fp8train --generate with the tokenizer"
"$fp8train" --generate ck-llama-tiny-bpe32000 --tokenizer bpe32000/fp8data.json \
  --prompt "The license " --max-new-tokens 30 | tee generate.out
grep -q "^The license " generate.out || fail "the prompt is not where the text starts"
if grep -q "<[0-9]*>" generate.out; then fail "ids, not text: $(cat generate.out)"; fi
echo "data-e2e: passed"
