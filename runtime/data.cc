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
  if (header[0] != 20240520) {
    return Status::Corruption(StrCat("token shard '", path,
                                     "' is not an llm.c token shard (its header does not start "
                                     "with the magic 20240520)"));
  }
  if (header[1] != 1) {
    return Status::Corruption(
        StrCat("token shard '", path, "': its version is not 1, the one supported"));
  }
  const int64_t n = header[2];
  if (n <= 1 || static_cast<uint64_t>(n) * 2 > bytes.size() - sizeof(header)) {
    return Status::Corruption(
        StrCat("token shard '", path, "': header says ", n, " tokens but the file holds fewer"));
  }
  std::vector<uint16_t> raw(static_cast<size_t>(n));
  std::memcpy(raw.data(), bytes.data() + sizeof(header), static_cast<size_t>(n) * 2);
  TokenDataset d;
  d.tokens_.assign(raw.begin(), raw.end());
  return d;
}

Result<TokenDataset> TokenDataset::Load(const std::string& path, const std::string& format) {
  if (format == "text") return LoadText(path);
  if (format == "tokens") return LoadShard(path);
  return Status::InvalidArgument(StrCat("data.format '", format, "' is not one of: text, tokens"));
}

Status TokenDataset::WriteShard(const std::string& path, const std::vector<int32_t>& tokens) {
  int32_t header[256] = {};
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::vector<uint16_t> raw(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535) {
      return Status::InvalidArgument(StrCat("token ", tokens[i], " at ", i, " does not fit uint16"));
    }
    raw[i] = static_cast<uint16_t>(tokens[i]);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(raw.data()), static_cast<std::streamsize>(raw.size() * 2));
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
