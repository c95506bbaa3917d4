// Training data: a corpus of tokens (raw UTF-8 through the byte-level tokenizer, an llm.c token
// shard or a Megatron-LM indexed dataset), memory-mapped, and a deterministic batch sampler whose
// cursor is checkpointed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt {

// llm.c's token shard headers (dev/data/data_common.py): magic and version by id width.
inline constexpr int32_t kShardMagicUint16 = 20240520, kShardVersionUint16 = 1;
inline constexpr int32_t kShardMagicUint32 = 20240801, kShardVersionUint32 = 7;

class TokenDataset {
 public:
  // Byte-level tokenizer: every byte of the file is one token in [0, 256).
  static Result<TokenDataset> LoadText(const std::string& path);
  // llm.c token shard: a header of 256 little-endian int32 (magic, version, token count, then
  // zeros), then the token ids: magic 20240520 with version 1 for uint16 ids (llm.c's GPT-2
  // shards), magic 20240801 with version 7 for uint32 ids (llm.c's Llama-3 shards).
  static Result<TokenDataset> LoadShard(const std::string& path);
  // Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py, index version 1):
  // `prefix`.idx holds the header "MMIDIDX\0\0", the version (uint64, 1), the dtype code (uint8:
  // 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16; 6 and 7, floats, are refused), the
  // sequence count and the document count (uint64), then each sequence's length (int32), its byte
  // offset in `prefix`.bin (int64) and the document index (int64, document_count entries:
  // 0, ..., sequence_count). The sequences are read in order, one after another (as Megatron's
  // GPT dataset concatenates documents; its EOD tokens, if the preprocessing appended them, stay).
  static Result<TokenDataset> LoadMegatron(const std::string& prefix);
  static Result<TokenDataset> Load(const std::string& path, const std::string& format);
  static TokenDataset FromTokens(std::vector<int32_t> tokens);
  // Writes an llm.c shard (used by tests and by tools that pre-tokenize): uint16 ids when every
  // id fits (kAuto) or when asked, uint32 otherwise or when asked.
  enum class ShardIds { kAuto, kUint16, kUint32 };
  static Status WriteShard(const std::string& path, const std::vector<int32_t>& tokens,
                           ShardIds ids = ShardIds::kAuto);

  // The ids stay in the file, memory-mapped in their own width (one byte, two or four), and are
  // widened as windows are copied out: host memory does not grow with the corpus. (A Megatron
  // dataset whose sequences do not follow one another in its .bin is copied instead.) The files
  // must stay as they are while a run reads them: one cut short under it ends the run (SIGBUS).
  uint64_t size() const { return n_; }
  // Tokens [at, at + n) as int32; at + n <= size().
  void Copy(uint64_t at, uint64_t n, int32_t* out) const;
  std::vector<int32_t> tokens() const;  // all of them (tests, small corpora)
  int32_t max_token() const { return max_; }
  // Bytes this dataset holds in its own memory (a mapping is the page cache's).
  size_t owned_bytes() const { return owned_bytes_; }

 private:
  // Reads every id once: the largest (max_token), and a refusal of ids outside 0..2^31 - 1.
  Status Scan(const std::string& what);
  std::shared_ptr<const void> keep_;  // what base_ points into: a mapping or an owned vector
  const uint8_t* base_ = nullptr;
  int width_ = 4;       // bytes per id: 1, 2, 4 or 8
  bool signed_ = true;  // ids stored signed (int8, int16, int32, int64)
  uint64_t n_ = 0;
  int32_t max_ = -1;
  size_t owned_bytes_ = 0;
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
