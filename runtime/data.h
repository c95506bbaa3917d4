// Training data: a corpus of tokens (raw UTF-8 through the byte-level tokenizer, or an
// llm.c/nanoGPT token shard) and a deterministic batch sampler whose cursor is checkpointed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt {

class TokenDataset {
 public:
  // Byte-level tokenizer: every byte of the file is one token in [0, 256).
  static Result<TokenDataset> LoadText(const std::string& path);
  // llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
  static Result<TokenDataset> LoadShard(const std::string& path);
  static Result<TokenDataset> Load(const std::string& path, const std::string& format);
  static TokenDataset FromTokens(std::vector<int32_t> tokens) {
    TokenDataset d;
    d.tokens_ = std::move(tokens);
    return d;
  }
  // Writes an llm.c shard (used by tests and by tools that pre-tokenize).
  static Status WriteShard(const std::string& path, const std::vector<int32_t>& tokens);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  int32_t max_token() const;

 private:
  std::vector<int32_t> tokens_;
};

// Where the sampler is: part of every checkpoint.
struct DataCursor {
  uint64_t epoch = 0;
  uint64_t index = 0;  // next window within this epoch's permutation
};

// Samples (B, T) input/target windows: the corpus is cut into windows of T+1 tokens, each epoch
// visits them in a permutation fixed by (seed, epoch). With several ranks, rank r takes every
// world-th window. Same seed + cursor -> same batches.
class DataLoader {
 public:
  DataLoader(const TokenDataset* data, int B, int T, uint64_t seed, int rank = 0, int world = 1);
  Status Init();  // fails if the corpus is shorter than one window per rank
  void NextBatch(int32_t* inputs, int32_t* targets);  // each (B, T)
  DataCursor cursor() const { return cursor_; }
  void set_cursor(DataCursor c);
  uint64_t num_windows() const { return num_windows_; }

 private:
  void Shuffle();
  const TokenDataset* data_;
  int B_, T_;
  uint64_t seed_;
  int rank_, world_;
  uint64_t num_windows_ = 0;
  std::vector<uint64_t> perm_;
  uint64_t perm_epoch_ = ~uint64_t{0};
  DataCursor cursor_;
};

}  // namespace fp8rt
