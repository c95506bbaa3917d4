// Text generation from a checkpoint (fp8train --generate, train.sample_every): the model's
// FP32 master weights run token by token on the CPU with a KV cache (each new token attends to
// the cached keys and values of the ones before it: one matrix-vector product per weight per
// token, not a forward pass over the whole context), and the next token is sampled with a
// temperature and top-k. The forward is the training model's in FP32 (gpt2: LayerNorm eps 1e-5,
// tanh GELU, the LM head tied to wte; llama: RMSNorm eps 1e-5, RoPE at each token's position, the
// cache holding the n_kv_head key/value heads, SwiGLU, its own LM head; the vocabulary padding
// never sampled); tests compare its logits
// with the CPU training model's Forward. On the CPU whatever device trained the model: a 124M
// model generates tens of tokens a second on a few cores.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/rng.h"
#include "common/status.h"
#include "common/train_config.h"
#include "runtime/tokenizer.h"

namespace fp8rt {

struct SampleOptions {
  // Tokens to generate. When the context (model.block_size) is full, the model starts again from
  // the last block_size / 2 tokens of the text and goes on. Default: 200
  int max_new_tokens = 200;
  // Softmax temperature; 0 takes the most likely token every time (greedy). Default: 1.0
  float temperature = 1.0f;
  // Sample among the k most likely tokens only; 0: all. Default: 0
  int top_k = 0;
  // The sampling stream's seed: the same seed, prompt and weights give the same text. Default: 1337
  uint64_t seed = 1337;
};

// The model's forward (gpt2 or llama) one token at a time with a KV cache of up to
// model.block_size positions.
class GptSampler {
 public:
  // `master`: the whole model's FP32 weights in Layout order (ExportState, CheckpointArray).
  static Result<GptSampler> Create(const ModelConfig& m, std::vector<float> master);
  // Feeds `token` at the next position and returns the logits of what follows it (vocab_size
  // values). OutOfRange-like InvalidArgument past block_size or for a token outside the vocabulary.
  Result<std::vector<float>> Feed(int32_t token);
  int position() const { return pos_; }
  void Reset() { pos_ = 0; }

 private:
  GptSampler(const ModelConfig& m, std::vector<float> master);
  ModelConfig m_;
  std::vector<float> w_;
  std::vector<float> k_cache_, v_cache_;  // (L, block_size, C) each
  int pos_ = 0;
};

// Picks the next token from logits (temperature, top-k) with `rng`.
int32_t SampleToken(const std::vector<float>& logits, const SampleOptions& o, SplitMix64& rng);

// The prompt (at least one token, at most block_size), then max_new_tokens sampled ones: the
// continuation only.
Result<std::vector<int32_t>> Generate(const ModelConfig& m, std::vector<float> master,
                                      const std::vector<int32_t>& prompt, const SampleOptions& o);

// The tokens a sample starts from: `prompt` encoded; an empty prompt is the start of a
// document (the tokenizer's end-of-document id, or "\n" without one).
Result<std::vector<int32_t>> PromptTokens(const Tokenizer& tokenizer, const std::string& prompt);

// fp8train --generate: the checkpoint in `checkpoint_dir` (LATEST, or `step` >= 0) continues
// `prompt`, encoded and the continuation decoded with `tokenizer`; the prompt and continuation go
// to `out` as text.
Status GenerateFromCheckpoint(const std::string& checkpoint_dir, int64_t step,
                              const std::string& prompt, const SampleOptions& o,
                              const Tokenizer& tokenizer, std::ostream& out);

}  // namespace fp8rt
