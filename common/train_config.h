// The training config (fp8train's run configuration): one YAML file per run, every key
// documented in configs/README.md, unknown keys refused by name. One type for every program that
// reads it (fp8train, fp8ctl, the scheduler, the node daemon).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/fp8_recipe.h"
#include "common/precision.h"
#include "common/status.h"
#include "common/strict_yaml.h"

namespace fp8rt {

// model.arch: the family of the model.
//   gpt2: learned positions, LayerNorm, GELU MLP (4C unless ffn_hidden), biases, LM head tied to
//     the token embedding;
//   llama: rotary positions (rope_theta), RMSNorm, SwiGLU MLP (ffn_hidden), grouped-query
//     attention (n_kv_head), no biases, untied LM head.
enum class Arch { kGpt2, kLlama };
inline const char* ArchName(Arch a) { return a == Arch::kLlama ? "llama" : "gpt2"; }

struct ModelConfig {
  int n_layer = 2;          // L. Default: 2
  int n_embd = 64;          // C. Default: 64
  int n_head = 4;           // NH; C must be a multiple of it. Default: 4
  int block_size = 64;      // maximum sequence length (positions in wpe). Default: 64
  int vocab_size = 256;     // V; padded to a multiple of 128 for the LM head. Default: 256 (bytes)
  Arch arch = Arch::kGpt2;  // Default: gpt2
  // Key/value heads (grouped-query attention; must divide n_head); 0: n_head. Default: 0
  int n_kv_head = 0;
  // The MLP's hidden width F; 0: 4C. Default: 0
  int ffn_hidden = 0;
  float rope_theta = 10000.0f;  // llama: RoPE's base. Default: 10000
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  bool llama() const { return arch == Arch::kLlama; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
  int head_size() const { return n_embd / n_head; }
  // Parameter count N (GPT-2's tied LM head counted once; the vocabulary padding included), as
  // used by the MFU formula 6N + 12LCT.
  int64_t num_params() const;
  // The parameters that multiply in the 6N of the MFU formula: num_params() less llama's input
  // embedding (a lookup; gpt2's tied table counts once, as the LM head).
  int64_t matmul_params() const {
    return num_params() - (llama() ? int64_t{padded_vocab()} * n_embd : 0);
  }
  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  // data.train and data.val: each a list of entries (a single entry may be written as a string):
  // a file, a directory (its shards: with format tokens every *.bin file, with megatron every
  // .idx/.bin pair by its prefix, with text every regular file; names starting with "." skipped)
  // or a glob (`shards/train_*.bin`; with megatron it matches the .idx files). The shards are
  // read in the order of the entries, a directory's and a glob's in byte order of their names.
  std::vector<std::string> train;  // Default: [] (required)
  std::vector<std::string> val;    // optional. Default: []
  // "text" (UTF-8, byte tokenizer), "tokens" (llm.c shards, uint16 or uint32 ids) or "megatron"
  // (Megatron-LM indexed datasets, each entry a .bin/.idx path prefix). Default: text
  std::string format = "text";
  // A resumed run whose training shards are not the ones its checkpoint recorded (by name and
  // token count): "refuse" ends it naming what changed; "new_epoch" starts the next epoch's
  // permutation over the new set. Default: refuse
  std::string on_change = "refuse";
  // The tokenizer the ids come from, to show samples (train.sample_every) as text: a
  // SentencePiece .model, or the fp8data.json that fp8data writes beside its shards. Default: ""
  // (ids below 256 as bytes, others as <id>)
  std::string tokenizer;
  bool operator==(const DataConfig&) const = default;
};

// fp8.scaling (common/fp8_recipe.h's ScalingMode): where each FP8 tensor's scale comes from.
//   delayed: from the amax history of earlier steps (reduced over ranks once per step);
//   current: from the tensor's own amax, computed just before its cast (reduced over the TP group
//     first when the tensor is split over it, over the ZeRO-1 group for a weight's shards);
//   block: one scale per 1 x 128 block of activations and gradients and per 128 x 128 block of
//     weights, from that block's amax in the cast itself (DeepSeek-V3's recipe; E4M3 throughout,
//     power-of-two scales; cuBLASLt's block-scaled GEMMs, Hopper only). Nothing is reduced across
//     ranks and nothing carries over between steps.

struct Fp8Config {
  ScalingMode mode = ScalingMode::kDelayed;  // fp8.scaling. Default: delayed
  // fp8.history_len, fp8.amax_algo, fp8.margin and fp8.recipe, parsed straight into the kernels'
  // config (its defaults are the defaults: history 1024, max, margin 0, hybrid).
  DelayedScalingConfig scaling;
  int telemetry_every =
      100;  // per-tensor amax/scale/saturation report period; 0 = off. Default: 100
  // The first step of a fresh (or --reset-fp8-history) scale state casts every FP8 tensor with
  // current scaling (its own amax) instead of the initial scale 1, which flushes small gradients
  // to zero. Later steps use delayed scaling. Default: true
  bool first_step_current = true;
  // Keep each FP8 weight's transposed copy (the dgrad GEMM's operand) beside it, written by the
  // weight's cast once per step. false: each layer's transposed copies are made from its cached
  // FP8 weights a layer ahead of its dgrads (delayed scaling: on the weight-cast stream), into a
  // buffer of two layers': 1.03 GiB less at gpt-1.3b, 0.7% of its tokens/s. Default: true
  bool keep_weight_transpose = true;
  // Keep every FP8 weight from its cast to its dgrad. false: no FP8 weight is kept between the
  // passes: each linear layer's weight is cast from the FP32 master for its forward GEMM, in
  // every micro-batch, and again, transposed only, for its dgrad (delayed scaling: both a layer
  // ahead, on the weight-cast stream), into a buffer of two layers' weights (as PyTorch's float8
  // linears cast in both passes). The codes are the same bit for bit (the same master weights,
  // the step's same scale); the weights' amaxes and saturation counts come from the step's first
  // forward cast. 2.16 GiB less at gpt-1.3b for one more read of the FP32 master per pass (1.6%
  // of its tokens/s); keep_weight_transpose then has no effect. Not with parallel.zero (each
  // rank holds a shard of the master: the FP8 weights are what it gathers) or fp8.scaling:
  // block. Default: true
  bool cache_weights = true;
  // gpt2: save each layer's GELU input (the FC output, which the GELU backward reads) in FP8,
  // E4M3 at scale 1, instead of in BF16: half its memory (1.5 GiB at gpt-1.3b). Lossy: the
  // backward's GELU'(x) reads x with 3 mantissa bits (an error of at most 1/16 of x; values
  // above 448 read as 448, where GELU' is 1). The forward is unchanged. With a BF16 FC2 and
  // train.recompute the GELU output that FC2's weight gradient reads is recomputed from the codes
  // too (lossy there as well); an FP8 FC2 keeps its input's FP8 copy then (GELU of the codes is
  // not what its forward read). No effect outside precision: fp8. The GELU backward fused into
  // the FC gradient's cast reads the codes directly; elsewhere (the calibrating first step,
  // current and block scaling, BF16 FC2) they are dequantized first. Not with llama (SwiGLU).
  // Default: false
  bool gelu_input_fp8 = false;
  // Causal attention in FP8 too (cuDNN's fused FP8 attention on the GPU, its emulation on the
  // CPU): Q, K, V and the output in E4M3, the probabilities quantized before the second matmul,
  // the output gradient, the score gradient and dQ/dK/dV in the gradients' format; each of those
  // six tensors per layer has its own delayed scale in the scale state (named
  // h<l>.attention.<tensor>), and their amaxes join the step's one amax reduction. Delayed scaling
  // only (cuDNN takes the output scales before it runs). On Hopper cuDNN's FP8 backward takes
  // head size 128 only: other head sizes are refused at start. Default: false
  bool attention = false;
  // Per layer kind: true runs its GEMMs in FP8. Defaults: linears in FP8, LM head in BF16.
  bool qkv = true;        // Default: true
  bool attn_proj = true;  // Default: true
  bool fc = true;         // Default: true
  bool fc_proj = true;    // Default: true
  bool lm_head = false;   // Default: false
  bool operator==(const Fp8Config&) const = default;
};

struct TrainConfig {
  int batch_size = 4;         // B (micro-batch). Default: 4
  int seq_len = 64;           // T <= block_size. Default: 64
  int grad_accum = 1;         // micro-batches per optimizer step. Default: 1
  int total_steps = 200;      // length of the LR schedule. Default: 200
  float lr = 1e-3f;           // peak learning rate. Default: 1e-3
  float min_lr = 1e-4f;       // floor of the cosine decay. Default: 1e-4
  int warmup_steps = 10;      // linear warmup. Default: 10
  float weight_decay = 0.1f;  // AdamW, 2-D weights only. Default: 0.1
  float beta1 = 0.9f;         // Default: 0.9
  float beta2 = 0.95f;        // Default: 0.95
  float eps = 1e-8f;          // Default: 1e-8
  // How AdamW stores its two moments: "fp32", or "bf16" (half the optimizer-state memory and
  // less traffic; each moment is rounded to nearest even when stored, the update itself runs in
  // FP32). Checkpoints hold them as FP32 either way, so a run can resume with the other choice.
  // Default: fp32
  std::string moments_dtype = "fp32";
  float grad_clip = 1.0f;     // global-norm clipping; <= 0 disables. Default: 1.0
  uint64_t seed = 1337;       // init and data sampling. Default: 1337
  int checkpoint_every = 0;   // steps between checkpoints; 0: only at exit. Default: 0
  // Checkpoints are written while training goes on: each rank snapshots what it owns (on the
  // device where it has room) and a writer thread writes and commits it (runtime/
  // checkpoint_saver.h). false: training waits for each write. Default: true
  bool async_checkpoint = true;
  // A checkpoint that cannot be written (a full disk, an I/O error): "stop" ends the run with
  // exit code 6, "continue" goes on with a warning in the metrics and the job's status; either
  // way the last committed checkpoint stands. Default: stop
  std::string on_checkpoint_error = "stop";
  // Retention: after each commit, the checkpoints older than the newest keep_checkpoints are
  // removed, except those at a multiple of keep_checkpoints_every (0: none kept for that); the
  // one a resume takes is never removed. 0: every checkpoint is kept. Defaults: 0, 0
  int keep_checkpoints = 0;
  int keep_checkpoints_every = 0;
  int log_every = 1;  // metrics line period. Default: 1
  // With data.val: every this many steps, and after the last, the mean loss over the first
  // eval_tokens tokens of data.val (the same tokens every time) goes to the metrics as val_loss;
  // 0: after the last step only. Default: 250
  int eval_every = 250;
  // Held-out tokens per evaluation, rounded down to whole (batch_size x seq_len) micro-batches
  // (at least one) and capped at what data.val holds. Default: 65536
  int64_t eval_tokens = 65536;
  // A Hugging Face directory of model.arch (model.safetensors + config.json, as --export-hf writes
  // or transformers saves: GPT2LMHeadModel, LlamaForCausalLM) whose weights start the run instead
  // of a random initialisation (continued pretraining); its shapes must be this model's. Relative
  // to the config file. Ignored on --resume (the checkpoint has the weights). Default: "" (random)
  std::string init_from;
  // Every this many steps (and after the last), the lead rank prints a sample of sample_tokens
  // tokens continuing "\n" to the log (llm.c does this; runtime/generate.h, on the CPU: each
  // sample exports the weights from the device). 0: never. Default: 0
  int sample_every = 0;
  int sample_tokens = 64;  // Default: 64
  // The linear layers' inputs are recomputed in the backward instead of kept per layer: a layer
  // that does not run in FP8 recomputes its LayerNorm (RMSNorm) or GELU (SwiGLU) output; an FP8
  // block linear (per-tensor scaling) keeps no FP8 transposed copy of its input but casts it
  // again, from the recomputed norm or activation (GELU fused into the cast) or the saved
  // attention output. Default: false (at gpt-1.3b in BF16: 4.4 GiB less for 2.2% of the step)
  bool recompute = false;
  // With grad_accum 1 and without parallel.zero: layer l's saved activations (those that fit) lie
  // in the weight-gradient memory of layers 0..l-1, which the backward writes only after layer l's
  // backward has read them, and which the next forward writes only after AdamW has read the
  // gradients. Default: true
  bool share_gradient_memory = true;
  bool operator==(const TrainConfig&) const = default;
};

// parallel.zero: read as false/true (0/1) or 3, written back as false, true or 3.
struct ZeroStage {
  int stage = 0;
  ZeroStage(int s = 0) : stage(s) {}  // NOLINT: `zero = true` and `zero = 3` both read well
  explicit operator bool() const { return stage > 0; }
  bool operator==(const ZeroStage&) const = default;
};

// parallel.*: how this run spreads over the ranks its launcher started (comm/README.md).
struct ParallelConfig {
  // Data-parallel replicas; 0: the world size / tp. dp x tp must equal the world size. Default: 0
  int dp = 0;
  // Tensor-parallel ranks per replica (Megatron-style: heads and FC columns split; must divide
  // model.n_head). Ranks r..r+tp-1 with r a multiple of tp form one replica: keep them on one
  // node. Default: 1
  int tp = 1;
  // ZeRO over the data-parallel ranks (docs/SCALING.md says which to pick):
  //   false (0): none, every rank holds the whole model's state;
  //   true (1): ZeRO-1, each rank keeps 1/dp of the FP32 master weights and AdamW moments,
  //     gradients are reduce-scattered and the FP8 (and BF16) weights all-gathered after AdamW;
  //   3: ZeRO-3 (full sharding), the gradients are kept 1/dp as well and the layers' weights
  //     are all-gathered (as FP8 bytes) just before each layer's forward and backward, one layer
  //     ahead, and freed after it; each layer's gradients are reduce-scattered as soon as its
  //     backward has made them. Default: false
  ZeroStage zero;
  // Hybrid sharding (with parallel.zero): the data-parallel ranks are cut into groups of this many
  // consecutive ones (a node's GPUs), each holding one sharded copy of the model's state; the
  // groups are replicas, and each gradient part is all-reduced across them after its
  // reduce-scatter within the group (the token embedding's gradient is then reduced densely).
  // Must divide the data-parallel size and be at least 2. 0: one group of every rank.
  // Default: 0
  int shard_group = 0;
  // With parallel.zero: 3, keep every layer's gathered weights (FP8 with their transposed copies,
  // BF16 where a layer is not FP8) from its forward to its backward and over the step's
  // micro-batches: each layer is all-gathered once per step instead of twice per micro-batch, for
  // the memory of all layers' gathered weights (ZeRO-1's weights; the gradients stay sharded).
  // Default: false
  bool keep_gathered_weights = false;
  // The dtype gradients travel in between ranks: fp32, or bf16 (half the bytes; each bucket is
  // rounded to BF16 before the sum and the sum back to FP32 after it). Default: fp32
  std::string grad_reduce_dtype = "fp32";
  // The token embedding's gradient, dense in memory but touched only in the rows of the batch's
  // tokens: true reduces its dense part (the tied LM head's weight gradient, earlier
  // micro-batches) as soon as the LM head's backward has made it (overlapped with the backward),
  // and adds the last micro-batch's embedding rows of every rank (gathered: tokens and output
  // gradients) to the sum, so no collective of the (vocabulary x width) table waits at the end of
  // the backward. false: reduced as one dense tensor after the embedding backward. Default: true
  bool sparse_embedding_grad = true;
  // Gradients are reduced in buckets of about this many MiB (whole layers). Default: 25
  double bucket_mb = 25;
  // A collective (or a step waiting on one) taking longer ends the job naming it. Default: 600
  int collective_timeout_s = 600;
  // CPU collectives: auto (Open MPI under mpirun, Gloo otherwise), mpi or gloo. Default: auto
  std::string cpu_backend = "auto";
  // Every this many steps all ranks compare a hash of their FP8 scales and histories; a mismatch
  // stops the job. 0: never. Default: 100
  int scale_check_every = 100;
  bool operator==(const ParallelConfig&) const = default;
};

// The files a config names, which a run reads: each entry of data.train and data.val (a file,
// a directory or a glob; with data.format megatron path prefixes of .bin/.idx pairs),
// data.tokenizer and train.init_from (a Hugging Face directory). The one list of them: everything
// that moves a config elsewhere or checks what it may open (common/input_paths.h) walks it.
// kDataShards: an entry of data.train/data.val, by data.format (a file, a directory, a glob);
// kMegatronPrefix: one .bin/.idx pair by its path prefix.
// kTokenizer: a file; an fp8data.json with the tokenizer.model beside it.
enum class InputKind { kFile, kHfDirectory, kDataShards, kMegatronPrefix, kTokenizer };
struct InputPath {
  std::string key;  // "data.train", or "data.train[2]" in a list of several
  InputKind kind;
  std::string* path;   // "" when not given
  std::string format;  // data.format, for kDataShards
};
struct ConstInputPath {
  std::string key;
  InputKind kind;
  const std::string* path;
  std::string format;
};

struct RunConfig {
  std::string name = "run";  // Default: run
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  Precision precision = Precision::kFp8;  // Default: fp8
  Fp8Config fp8;
  ParallelConfig parallel;
  Status Validate() const;
  std::vector<InputPath> Inputs();
  std::vector<ConstInputPath> Inputs() const;
  // Makes every relative input path absolute against `base_dir` (itself made absolute), with
  // "." and ".." resolved lexically.
  void ResolveInputs(const std::string& base_dir);
  bool operator==(const RunConfig&) const = default;
};

// The most bytes a config file may hold: the scheduler's request limit. Default: 1 MiB
inline constexpr size_t kMaxConfigBytes = size_t{1} << 20;
// The most entries data.train or data.val may list (a directory or a glob names any number of
// shards). Default: 4096
inline constexpr size_t kMaxListEntries = 4096;

// Reads a parsed YAML/JSON mapping (a file, or the `config` of a job spec). Errors name the key
// path ("train.batch_size"), the value, what is allowed and, for YAML, the line. `what` names the
// document when it is not a mapping.
Result<RunConfig> ReadRunConfig(const strict::Value& root, const std::string& what);
// Parses YAML or JSON text, then ReadRunConfig.
Result<RunConfig> ParseRunConfig(const std::string& yaml_text, const std::string& what = "config");
// Reads a config file (a regular file of at most kMaxConfigBytes); errors start with its path.
// Relative input paths are made absolute against the file's directory.
Result<RunConfig> LoadRunConfig(const std::string& path);
// The config as JSON: every key, defaults included, floats in their shortest form, so that
// ParseRunConfig(RunConfigToJson(c)) == c. What a job stores and what the node hands fp8train.
std::string RunConfigToJson(const RunConfig& config);

}  // namespace fp8rt
