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

Result<TokenDataset> TokenDataset::LoadMegatron(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  FP8RT_ASSIGN_OR_RETURN(const std::string idx, ReadRegularFile(idx_path, "Megatron index",
                                                                {.max_bytes = kMaxCorpusBytes}));
  FP8RT_ASSIGN_OR_RETURN(const std::string bin, ReadRegularFile(bin_path, "Megatron data file",
                                                                {.max_bytes = kMaxCorpusBytes}));
  auto bad = [&](const std::string& what) {
    return Status::Corruption(StrCat("Megatron index '", idx_path, "': ", what));
  };
  static constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
  constexpr size_t kHeader = 9 + 8 + 1 + 8 + 8;
  if (idx.size() < kHeader || std::memcmp(idx.data(), kMagic, 9) != 0) {
    return bad("not a Megatron-LM indexed dataset index (it does not start with MMIDIDX)");
  }
  uint64_t version = 0, sequences = 0, documents = 0;
  std::memcpy(&version, idx.data() + 9, 8);
  const auto code = static_cast<uint8_t>(idx[17]);
  std::memcpy(&sequences, idx.data() + 18, 8);
  std::memcpy(&documents, idx.data() + 26, 8);
  if (version != 1) return bad("its version is not 1, the one this reader reads");
  size_t width = 0;
  bool is_signed = false;
  switch (code) {
    case 1:
      width = 1;
      break;
    case 2:
      width = 1, is_signed = true;
      break;
    case 3:
      width = 2, is_signed = true;
      break;
    case 4:
      width = 4, is_signed = true;
      break;
    case 5:
      width = 8, is_signed = true;
      break;
    case 8:
      width = 2;
      break;
    case 6:
    case 7:
      return bad("its dtype is a floating-point type (code 6 or 7), not token ids");
    default:
      return bad("its dtype code is not one of Megatron's (1-8)");
  }
  if (sequences > (idx.size() - kHeader) / 12 ||
      documents > (idx.size() - kHeader - 12 * sequences) / 8) {
    return bad("it is shorter than its sequence and document counts say (truncated?)");
  }
  const char* sizes = idx.data() + kHeader;
  const char* pointers = sizes + 4 * sequences;
  const char* doc_index = pointers + 8 * sequences;
  // The document index: 0, ..., sequences, never going back.
  int64_t previous = 0;
  for (uint64_t d = 0; d < documents; ++d) {
    int64_t at;
    std::memcpy(&at, doc_index + 8 * d, 8);
    if (at < previous || static_cast<uint64_t>(at) > sequences || (d == 0 && at != 0)) {
      return bad(
          StrCat("its document index is not 0, ..., ", sequences, " in order (entry ", d, ")"));
    }
    previous = at;
  }
  uint64_t total = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    int32_t n;
    int64_t offset;
    std::memcpy(&n, sizes + 4 * i, 4);
    std::memcpy(&offset, pointers + 8 * i, 8);
    if (n < 0 || offset < 0 || static_cast<uint64_t>(offset) > bin.size() ||
        static_cast<uint64_t>(n) * width > bin.size() - static_cast<uint64_t>(offset)) {
      return Status::Corruption(StrCat("Megatron dataset '", prefix, "': sequence ", i,
                                       " lies past the end of '", bin_path, "' (truncated?)"));
    }
    total += static_cast<uint64_t>(n);
  }
  if (total < 2) return Status::InvalidArgument(StrCat("Megatron dataset '", prefix, "' is empty"));
  TokenDataset d;
  d.tokens_.reserve(total);
  for (uint64_t i = 0; i < sequences; ++i) {
    int32_t n;
    int64_t offset;
    std::memcpy(&n, sizes + 4 * i, 4);
    std::memcpy(&offset, pointers + 8 * i, 8);
    const char* p = bin.data() + offset;
    for (int32_t k = 0; k < n; ++k, p += width) {
      int64_t v = 0;
      if (width == 1) {
        v = is_signed ? static_cast<int8_t>(*p) : static_cast<uint8_t>(*p);
      } else if (width == 2) {
        uint16_t u;
        std::memcpy(&u, p, 2);
        v = is_signed ? static_cast<int16_t>(u) : u;
      } else if (width == 4) {
        int32_t s;
        std::memcpy(&s, p, 4);
        v = s;
      } else {
        std::memcpy(&v, p, 8);
      }
      if (v < 0 || v > INT32_MAX) {
        return Status::Corruption(StrCat("Megatron dataset '", prefix, "': sequence ", i,
                                         " holds an id outside 0..2^31 - 1 (token ", k, ")"));
      }
      d.tokens_.push_back(static_cast<int32_t>(v));
    }
  }
  return d;
}

Result<TokenDataset> TokenDataset::Load(const std::string& path, const std::string& format) {
  if (format == "text") return LoadText(path);
  if (format == "tokens") return LoadShard(path);
  if (format == "megatron") return LoadMegatron(path);
  return Status::InvalidArgument(
      StrCat("data.format '", format, "' is not one of: text, tokens, megatron"));
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
