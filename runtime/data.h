// Training data: a corpus of tokens (raw UTF-8 through the byte-level tokenizer, an llm.c token
// shard or a Megatron-LM indexed dataset), memory-mapped, and a deterministic batch sampler whose
// cursor is checkpointed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/train_config.h"

namespace fp8rt {

// llm.c's token shard headers (dev/data/data_common.py): magic and version by id width.
inline constexpr int32_t kShardMagicUint16 = 20240520, kShardVersionUint16 = 1;
inline constexpr int32_t kShardMagicUint32 = 20240801, kShardVersionUint32 = 7;

// An llm.c shard's header for `count` ids of `width` bytes (2 or 4): its 256 int32, as written.
std::array<int32_t, 256> ShardHeader(int width, int64_t count);
// `ids` appended to `out` as little-endian ids of `width` bytes (2 or 4), as a shard holds them.
void AppendShardIds(const int32_t* ids, size_t n, int width, std::string* out);

// A dataset: one or more shards (files, or Megatron .bin/.idx pairs) read one after another.
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
  // One shard of `format` (text, tokens or megatron).
  static Result<TokenDataset> Load(const std::string& path, const std::string& format);
  // Every shard the entries of data.train or data.val (`key`) name (common/input_paths.h's
  // ExpandShards: files, directories, globs), one after another. A shard with no token is refused
  // by name.
  static Result<TokenDataset> Load(const std::vector<std::string>& entries,
                                   const std::string& format, const std::string& key);
  // Exactly the shards `shards` (files, or Megatron prefixes), opened as they are: no directory
  // listed, no glob expanded (what input confinement checked is what is read).
  static Result<TokenDataset> LoadShards(const std::vector<std::string>& shards,
                                         const std::string& format, const std::string& key);
  static TokenDataset FromTokens(std::vector<int32_t> tokens);
  // `parts` one after another, each part's shards kept as they are.
  static TokenDataset Concat(std::vector<TokenDataset> parts);
  // Writes an llm.c shard (used by tests and by tools that pre-tokenize): uint16 ids when every
  // id fits (kAuto) or when asked, uint32 otherwise or when asked.
  enum class ShardIds { kAuto, kUint16, kUint32 };
  static Status WriteShard(const std::string& path, const std::vector<int32_t>& tokens,
                           ShardIds ids = ShardIds::kAuto);

  // The ids stay in the files, memory-mapped in their own width (one byte, two or four), and are
  // widened as windows are copied out: host memory does not grow with the corpus. (A Megatron
  // dataset whose sequences do not follow one another in its .bin is copied instead.) The files
  // must stay as they are while a run reads them: one cut short under it ends the run (SIGBUS).
  uint64_t size() const { return n_; }
  // Tokens [at, at + n) as int32; at + n <= size(); a range may span shards. An id at or above
  // the vocabulary (set_vocab_size; by default any id outside 0..2^31 - 1) is an error naming
  // its shard and its position there: ids are checked as they are read, never all at load.
  Status Copy(uint64_t at, uint64_t n, int32_t* out) const;
  void set_vocab_size(int32_t vocab) { vocab_ = vocab; }
  // Reads every id once against `vocab`: the first one at or above it is an error as Copy's.
  // Returns the largest id.
  Result<int32_t> CheckIds(int32_t vocab) const;
  std::vector<int32_t> tokens() const;  // all of them (tests, small corpora)
  // Bytes this dataset holds in its own memory (a mapping is the page cache's).
  size_t owned_bytes() const { return owned_bytes_; }
  // Bytes its ids take where they lie (files, or owned memory).
  uint64_t id_bytes() const;

  struct ShardInfo {
    std::string path;     // the file (or Megatron prefix) as opened; "" for FromTokens
    uint64_t first = 0;   // its first token's position in the dataset
    uint64_t tokens = 0;  // how many it holds
  };
  size_t num_shards() const { return shards_.size(); }
  ShardInfo shard(size_t i) const;
  // Which shard holds token `at` (< size()).
  size_t ShardOf(uint64_t at) const;
  // The shard set, for a checkpoint: a JSON list of [file name, token count], in order.
  std::string ShardList() const;
  // Why the shard set `recorded` (a ShardList) is not this dataset's, naming what changed; ""
  // when it is the same (file names compared, not directories: the data may move).
  std::string CompareShardList(const std::string& recorded) const;

 private:
  struct Shard {
    std::string path;
    std::shared_ptr<const void> keep;  // what base points into: a mapping or an owned vector
    const uint8_t* base = nullptr;
    int width = 4;          // bytes per id: 1, 2, 4 or 8
    bool is_signed = true;  // ids stored signed (int8, int16, int32, int64)
    uint64_t first = 0;
    uint64_t n = 0;
  };
  static TokenDataset Single(std::string path, std::shared_ptr<const void> keep,
                             const uint8_t* base, int width, bool is_signed, uint64_t n);
  // Ids [at, at + n) of `s` into `out`; an id at or above `vocab` is an error naming where.
  static Status Widen(const Shard& s, uint64_t at, uint64_t n, int32_t vocab, int32_t* out);
  std::vector<Shard> shards_;
  uint64_t n_ = 0;
  int32_t vocab_ = INT32_MAX;
  size_t owned_bytes_ = 0;
};

// data.train (or, with `validation`, data.val) of `c`, reading ids against model.vocab_size.
// A dataset of at most kEagerCheckBytes of ids is checked whole here, so that a wrong id stops
// the run before it starts; a larger one as its windows are read (fp8data verify checks a whole
// corpus beforehand).
inline constexpr uint64_t kEagerCheckBytes = uint64_t{256} << 20;
// With `exact`, the entries are the shards ConfineInputs(..., expand) checked (LoadShards).
Result<TokenDataset> OpenDataset(const RunConfig& c, bool validation, bool exact = false);

// Where the sampler is: part of every checkpoint.
struct DataCursor {
  uint64_t epoch = 0;
  uint64_t index = 0;  // next window within this epoch's permutation
  // The shards it counts windows of (TokenDataset::ShardList; DataLoader::cursor fills it in).
  std::string shards;
};

// Samples (B, T) input/target windows: each shard is cut into windows of T+1 tokens (a window
// never spans two shards; a shard's last tokens short of a window are not read), and each epoch
// visits the windows of all shards in a permutation fixed by (seed, epoch). With several ranks,
// rank r takes every world-th window. Same seed + cursor -> same batches. The permutation takes
// 4 bytes a window (8 past 2^32 windows).
class DataLoader {
 public:
  DataLoader(const TokenDataset* data, int B, int T, uint64_t seed, int rank = 0, int world = 1);
  Status Init();  // fails if the corpus is shorter than one window per rank
  // Each (B, T). An error (an id past the vocabulary) names the shard and position.
  Status NextBatch(int32_t* inputs, int32_t* targets);
  DataCursor cursor() const;
  void set_cursor(DataCursor c);
  uint64_t num_windows() const { return num_windows_; }
  const TokenDataset& data() const { return *data_; }
  // Where window `w` starts in the dataset.
  uint64_t WindowStart(uint64_t w) const;

 private:
  void Shuffle();
  uint64_t Permuted(uint64_t i) const { return perm32_.empty() ? perm64_[i] : perm32_[i]; }
  const TokenDataset* data_;
  int B_, T_;
  uint64_t seed_;
  int rank_, world_;
  uint64_t num_windows_ = 0;
  std::vector<uint64_t> shard_windows_;  // windows before each shard's first, and the total
  std::vector<uint32_t> perm32_;
  std::vector<uint64_t> perm64_;
  uint64_t perm_epoch_ = 0;
  bool shuffled_ = false;  // perm_ holds perm_epoch_'s permutation
  DataCursor cursor_;
};

}  // namespace fp8rt
