// Corpus loading and deterministic window sampling.
#include "runtime/data.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/read_file.h"
#include "common/rng.h"

namespace fp8rt {

// Corpora are read whole (a regular file: a FIFO or a device is refused, never waited on).
constexpr size_t kMaxCorpusBytes = size_t{1} << 40;

Result<TokenDataset> TokenDataset::LoadText(const std::string& path) {
  FP8RT_ASSIGN_OR_RETURN(const std::string bytes,
                         ReadRegularFile(path, "text corpus", {.max_bytes = kMaxCorpusBytes}));
  if (bytes.size() < 2) return Status::InvalidArgument(StrCat("text corpus '", path, "' is empty"));
  TokenDataset d;
  d.tokens_.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) d.tokens_[i] = static_cast<uint8_t>(bytes[i]);
  return d;
}

Result<TokenDataset> TokenDataset::LoadShard(const std::string& path) {
  FP8RT_ASSIGN_OR_RETURN(const std::string bytes,
                         ReadRegularFile(path, "token shard", {.max_bytes = kMaxCorpusBytes}));
  int32_t header[256];
  if (bytes.size() < sizeof(header)) {
    return Status::Corruption(StrCat("token shard '", path, "': shorter than its 1024-byte header"));
  }
  std::memcpy(header, bytes.data(), sizeof(header));
  // (The messages say what the file is not, never what it holds: the bytes are not echoed.)
  size_t width = 0;
  if (header[0] == kShardMagicUint16) {
    if (header[1] != kShardVersionUint16) {
      return Status::Corruption(StrCat("token shard '", path, "': its magic is llm.c's GPT-2 one (",
                                       kShardMagicUint16, ") but its version is not ",
                                       kShardVersionUint16, ", the one that goes with it"));
    }
    width = 2;
  } else if (header[0] == kShardMagicUint32) {
    if (header[1] != kShardVersionUint32) {
      return Status::Corruption(
          StrCat("token shard '", path, "': its magic is llm.c's Llama-3 one (", kShardMagicUint32,
                 ") but its version is not ", kShardVersionUint32, ", the one that goes with it"));
    }
    width = 4;
  } else {
    return Status::Corruption(StrCat("token shard '", path,
                                     "' is not an llm.c token shard (its header does not start "
                                     "with the magic ",
                                     kShardMagicUint16, " (uint16 ids) or ", kShardMagicUint32,
                                     " (uint32 ids))"));
  }
  const int64_t n = header[2];
  if (n <= 1 || static_cast<uint64_t>(n) * width > bytes.size() - sizeof(header)) {
    return Status::Corruption(
        StrCat("token shard '", path, "': header says ", n, " tokens but the file holds fewer"));
  }
  TokenDataset d;
  d.tokens_.resize(static_cast<size_t>(n));
  const char* ids = bytes.data() + sizeof(header);
  if (width == 2) {
    for (size_t i = 0; i < d.tokens_.size(); ++i) {
      uint16_t v;
      std::memcpy(&v, ids + 2 * i, 2);
      d.tokens_[i] = v;
    }
  } else {
    for (size_t i = 0; i < d.tokens_.size(); ++i) {
      uint32_t v;
      std::memcpy(&v, ids + 4 * i, 4);
      if (v > static_cast<uint32_t>(INT32_MAX)) {
        return Status::Corruption(StrCat("token shard '", path, "': the id at token ", i,
                                         " is above 2^31 - 1, no vocabulary's"));
      }
      d.tokens_[i] = static_cast<int32_t>(v);
    }
  }
  return d;
}

Result<TokenDataset> TokenDataset::Load(const std::string& path, const std::string& format) {
  if (format == "text") return LoadText(path);
  if (format == "tokens") return LoadShard(path);
  return Status::InvalidArgument(StrCat("data.format '", format, "' is not one of: text, tokens"));
}

Status TokenDataset::WriteShard(const std::string& path, const std::vector<int32_t>& tokens,
                                ShardIds ids) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return Status::InvalidArgument(
        StrCat(tokens.size(), " tokens do not fit one shard (at most ", INT32_MAX, ")"));
  }
  bool wide = ids == ShardIds::kUint32;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      return Status::InvalidArgument(StrCat("token ", tokens[i], " at ", i, " is negative"));
    }
    if (tokens[i] > 65535) {
      if (ids == ShardIds::kUint16) {
        return Status::InvalidArgument(
            StrCat("token ", tokens[i], " at ", i, " does not fit uint16"));
      }
      wide = true;
    }
  }
  int32_t header[256] = {};
  header[0] = wide ? kShardMagicUint32 : kShardMagicUint16;
  header[1] = wide ? kShardVersionUint32 : kShardVersionUint16;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string raw(tokens.size() * (wide ? 4 : 2), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (wide) {
      const auto v = static_cast<uint32_t>(tokens[i]);
      std::memcpy(raw.data() + 4 * i, &v, 4);
    } else {
      const auto v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(raw.data() + 2 * i, &v, 2);
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (!out) return Status::IOError(StrCat("cannot write token shard '", path, "'"));
  return Status::Ok();
}

int32_t TokenDataset::max_token() const {
  return tokens_.empty() ? -1 : *std::max_element(tokens_.begin(), tokens_.end());
}

DataLoader::DataLoader(const TokenDataset* data, int B, int T, uint64_t seed, int rank, int world)
    : data_(data), B_(B), T_(T), seed_(seed), rank_(rank), world_(world) {}

Status DataLoader::Init() {
  const uint64_t n = data_->tokens().size();
  num_windows_ = n > 1 ? (n - 1) / static_cast<uint64_t>(T_) : 0;
  if (num_windows_ < static_cast<uint64_t>(world_)) {
    return Status::InvalidArgument(StrCat("corpus of ", n, " tokens is too short for seq_len ", T_,
                                          " and ", world_, " rank(s)"));
  }
  return Status::Ok();
}

void DataLoader::Shuffle() {
  perm_.resize(num_windows_);
  for (uint64_t i = 0; i < num_windows_; ++i) perm_[i] = i;
  SplitMix64 rng(seed_ ^ (0x9E3779B97F4A7C15ull * (cursor_.epoch + 1)));
  for (uint64_t i = num_windows_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.Below(i + 1)]);
  perm_epoch_ = cursor_.epoch;
}

void DataLoader::set_cursor(DataCursor c) { cursor_ = c; }

void DataLoader::NextBatch(int32_t* inputs, int32_t* targets) {
  const uint64_t per_rank = num_windows_ / static_cast<uint64_t>(world_);
  for (int b = 0; b < B_; ++b) {
    if (cursor_.index >= per_rank) {
      ++cursor_.epoch;
      cursor_.index = 0;
    }
    if (perm_epoch_ != cursor_.epoch) Shuffle();
    const uint64_t w = perm_[cursor_.index * world_ + rank_];
    ++cursor_.index;
    const int32_t* src = data_->tokens().data() + w * static_cast<uint64_t>(T_);
    std::copy(src, src + T_, inputs + static_cast<size_t>(b) * T_);
    std::copy(src + 1, src + T_ + 1, targets + static_cast<size_t>(b) * T_);
  }
}

}  // namespace fp8rt
