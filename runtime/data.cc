// Corpus loading and deterministic window sampling.
#include "runtime/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/input_paths.h"
#include "common/read_file.h"
#include "common/rng.h"

namespace fp8rt {

// A Megatron index is read whole (12 bytes a sequence, 8 a document).
constexpr size_t kMaxIndexBytes = size_t{1} << 40;

// A file mapped read-only, unmapped with the last dataset that points into it.
struct Mapping {
  void* addr = nullptr;
  size_t bytes = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, bytes);
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(addr); }
};

// A regular file (a FIFO or a device is refused, never waited on), mapped whole.
Result<std::shared_ptr<const Mapping>> MapFile(const std::string& path, const std::string& what) {
  FP8RT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, what));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::IOError(StrCat(what, " '", path, "': cannot stat it"));
  }
  auto m = std::make_shared<Mapping>();
  m->bytes = static_cast<size_t>(st.st_size);
  if (m->bytes > 0) {
    void* addr = ::mmap(nullptr, m->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::IOError(StrCat(what, " '", path, "' cannot be mapped: ", std::strerror(err)));
    }
    // Windows are read in a random order: no read-ahead around each (it would map, and count
    // in the rank's RSS, far more of the file than the windows read).
    ::madvise(addr, m->bytes, MADV_RANDOM);
    m->addr = addr;
  }
  ::close(fd);
  return std::shared_ptr<const Mapping>(std::move(m));
}

// The id at `p` of `width` bytes.
inline int64_t IdAt(const uint8_t* p, int width, bool is_signed) {
  switch (width) {
    case 1:
      return is_signed ? static_cast<int8_t>(*p) : *p;
    case 2: {
      uint16_t u;
      std::memcpy(&u, p, 2);
      return is_signed ? static_cast<int16_t>(u) : u;
    }
    case 4: {
      uint32_t u;
      std::memcpy(&u, p, 4);
      return is_signed ? static_cast<int64_t>(static_cast<int32_t>(u)) : static_cast<int64_t>(u);
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

Status TokenDataset::Widen(const Shard& s, uint64_t at, uint64_t n, int32_t vocab, int32_t* out) {
  const uint8_t* p = s.base + at * static_cast<uint64_t>(s.width);
  auto bad = [&](uint64_t i, int64_t v) {
    const std::string where =
        s.path.empty() ? StrCat("token ", at + i) : StrCat("'", s.path, "' at token ", at + i);
    if (v < 0 || v > INT32_MAX) {
      return Status::Corruption(
          StrCat("the id ", where, " is outside 0..2^31 - 1, no vocabulary's"));
    }
    return Status::Corruption(StrCat("the id ", where, " is ", v, ", not below model.vocab_size ",
                                     vocab, " (a shard of another tokenizer?)"));
  };
  // The common widths in loops the compiler vectorizes; the check is one compare of the
  // largest id.
  if (s.width == 2 && !s.is_signed) {
    uint16_t most = 0;
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t u;
      std::memcpy(&u, p + 2 * i, 2);
      out[i] = u;
      most = std::max(most, u);
    }
    if (most < vocab) return Status::Ok();
  } else if (s.width == 4) {
    std::memcpy(out, p, n * 4);
    uint32_t most = 0;
    for (uint64_t i = 0; i < n; ++i) most = std::max(most, static_cast<uint32_t>(out[i]));
    if (most < static_cast<uint32_t>(vocab)) return Status::Ok();  // (negatives are huge)
  } else {
    for (uint64_t i = 0; i < n; ++i) {
      const int64_t v = IdAt(p + i * static_cast<uint64_t>(s.width), s.width, s.is_signed);
      if (v < 0 || v >= vocab) return bad(i, v);
      out[i] = static_cast<int32_t>(v);
    }
    return Status::Ok();
  }
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t v = IdAt(p + i * static_cast<uint64_t>(s.width), s.width, s.is_signed);
    if (v < 0 || v >= vocab) return bad(i, v);
  }
  return Status::Ok();
}

size_t TokenDataset::ShardOf(uint64_t at) const {
  // The last shard whose first token is at or before `at` (shards may hold no token only when
  // nothing follows them: Load refuses empty ones).
  auto it = std::upper_bound(shards_.begin(), shards_.end(), at,
                             [](uint64_t a, const Shard& s) { return a < s.first; });
  return static_cast<size_t>(it - shards_.begin()) - 1;
}

Status TokenDataset::Copy(uint64_t at, uint64_t n, int32_t* out) const {
  size_t i = n > 0 ? ShardOf(at) : 0;
  while (n > 0) {
    const Shard& s = shards_[i++];
    const uint64_t local = at - s.first, take = std::min(n, s.n - local);
    FP8RT_RETURN_IF_ERROR(Widen(s, local, take, vocab_, out));
    at += take, n -= take, out += take;
  }
  return Status::Ok();
}

Result<int32_t> TokenDataset::CheckIds(int32_t vocab) const {
  std::vector<int32_t> buf(1 << 20);
  int32_t most = -1;
  for (const Shard& s : shards_) {
    for (uint64_t at = 0; at < s.n; at += buf.size()) {
      const uint64_t n = std::min<uint64_t>(buf.size(), s.n - at);
      FP8RT_RETURN_IF_ERROR(Widen(s, at, n, vocab, buf.data()));
      most = std::max(most, *std::max_element(buf.begin(), buf.begin() + static_cast<long>(n)));
    }
  }
  return most;
}

std::vector<int32_t> TokenDataset::tokens() const {
  std::vector<int32_t> v(n_);
  const Status s = Copy(0, n_, v.data());
  if (!s.ok()) v.clear();
  return v;
}

uint64_t TokenDataset::id_bytes() const {
  uint64_t bytes = 0;
  for (const Shard& s : shards_) bytes += s.n * static_cast<uint64_t>(s.width);
  return bytes;
}

TokenDataset::ShardInfo TokenDataset::shard(size_t i) const {
  return {shards_[i].path, shards_[i].first, shards_[i].n};
}

std::string TokenDataset::ShardList() const {
  nlohmann::json list = nlohmann::json::array();
  for (const Shard& s : shards_) {
    list.push_back({std::filesystem::path(s.path).filename().string(), s.n});
  }
  return list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string TokenDataset::CompareShardList(const std::string& recorded) const {
  const nlohmann::json now = nlohmann::json::parse(ShardList());
  const nlohmann::json then = nlohmann::json::parse(recorded, nullptr, false);
  if (!then.is_array()) return "the checkpoint's record of its shards cannot be read";
  auto describe = [](const nlohmann::json& e) {
    return e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number_unsigned()
               ? StrCat("'", e[0].get<std::string>(), "' (", e[1].dump(), " tokens)")
               : std::string("an unreadable entry");
  };
  const size_t common = std::min(now.size(), then.size());
  for (size_t i = 0; i < common; ++i) {
    if (now[i] != then[i]) {
      return StrCat("shard ", i, " is ", describe(now[i]), "; the checkpoint's was ",
                    describe(then[i]));
    }
  }
  if (now.size() > then.size()) {
    return StrCat("this run has ", now.size(), " shards, the checkpoint's ", then.size(),
                  " (the first added: ", describe(now[common]), ")");
  }
  if (now.size() < then.size()) {
    return StrCat("this run has ", now.size(), " shards, the checkpoint's ", then.size(),
                  " (the first missing: ", describe(then[common]), ")");
  }
  return "";
}

TokenDataset TokenDataset::FromTokens(std::vector<int32_t> tokens) {
  auto owned = std::make_shared<std::vector<int32_t>>(std::move(tokens));
  TokenDataset d;
  Shard s;
  s.base = reinterpret_cast<const uint8_t*>(owned->data());
  s.width = 4, s.is_signed = true;
  s.n = owned->size();
  d.n_ = s.n;
  d.owned_bytes_ = owned->size() * 4;
  s.keep = std::move(owned);
  d.shards_.push_back(std::move(s));
  return d;
}

TokenDataset TokenDataset::Concat(std::vector<TokenDataset> parts) {
  TokenDataset d;
  for (TokenDataset& p : parts) {
    for (Shard& s : p.shards_) {
      s.first = d.n_;
      d.n_ += s.n;
      d.shards_.push_back(std::move(s));
    }
    d.owned_bytes_ += p.owned_bytes_;
  }
  return d;
}

TokenDataset TokenDataset::Single(std::string path, std::shared_ptr<const void> keep,
                                  const uint8_t* base, int width, bool is_signed, uint64_t n) {
  TokenDataset d;
  Shard s;
  s.path = std::move(path);
  s.keep = std::move(keep);
  s.base = base;
  s.width = width, s.is_signed = is_signed;
  s.n = n;
  d.n_ = n;
  d.shards_.push_back(std::move(s));
  return d;
}

Result<TokenDataset> TokenDataset::LoadText(const std::string& path) {
  FP8RT_ASSIGN_OR_RETURN(auto map, MapFile(path, "text corpus"));
  if (map->bytes < 2) return Status::InvalidArgument(StrCat("text corpus '", path, "' is empty"));
  const uint8_t* base = map->data();
  const uint64_t n = map->bytes;
  return Single(path, std::move(map), base, 1, false, n);
}

Result<TokenDataset> TokenDataset::LoadShard(const std::string& path) {
  FP8RT_ASSIGN_OR_RETURN(auto map, MapFile(path, "token shard"));
  int32_t header[256];
  if (map->bytes < sizeof(header)) {
    return Status::Corruption(
        StrCat("token shard '", path, "': shorter than its 1024-byte header"));
  }
  std::memcpy(header, map->data(), sizeof(header));
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
  if (n < 0 || static_cast<uint64_t>(n) * width > map->bytes - sizeof(header)) {
    return Status::Corruption(StrCat("token shard '", path, "': header says ", n,
                                     " tokens but the file holds ",
                                     n < 0 ? "no such count" : "fewer"));
  }
  const uint8_t* base = map->data() + sizeof(header);
  return Single(path, std::move(map), base, static_cast<int>(width), false,
                static_cast<uint64_t>(n));
}

Result<TokenDataset> TokenDataset::LoadMegatron(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  FP8RT_ASSIGN_OR_RETURN(const std::string idx, ReadRegularFile(idx_path, "Megatron index",
                                                                {.max_bytes = kMaxIndexBytes}));
  FP8RT_ASSIGN_OR_RETURN(auto map, MapFile(bin_path, "Megatron data file"));
  const uint64_t bin_bytes = map->bytes;
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
  // Sequence i: its length (ids) and its byte offset in the .bin.
  auto sequence = [&](uint64_t i) {
    int32_t n;
    int64_t offset;
    std::memcpy(&n, sizes + 4 * i, 4);
    std::memcpy(&offset, pointers + 8 * i, 8);
    return std::pair<int32_t, int64_t>{n, offset};
  };
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
  // Every sequence inside the .bin; contiguous: one after another there (as Megatron's builder
  // writes them), so the ids are read where they lie (otherwise they are copied out in order).
  uint64_t total = 0;
  bool contiguous = true;
  int64_t first = 0, next = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    const auto [n, offset] = sequence(i);
    if (n < 0 || offset < 0 || static_cast<uint64_t>(offset) > bin_bytes ||
        static_cast<uint64_t>(n) * width > bin_bytes - static_cast<uint64_t>(offset)) {
      return Status::Corruption(StrCat("Megatron dataset '", prefix, "': sequence ", i,
                                       " lies past the end of '", bin_path, "' (truncated?)"));
    }
    total += static_cast<uint64_t>(n);
    if (i == 0) first = offset;
    contiguous = contiguous && (i == 0 || offset == next);
    next = offset + static_cast<int64_t>(n) * static_cast<int64_t>(width);
  }
  if (total < 2) return Status::InvalidArgument(StrCat("Megatron dataset '", prefix, "' is empty"));
  const std::string what = StrCat("Megatron dataset '", prefix, "'");
  if (contiguous) {
    const uint8_t* base = map->data() + first;
    return Single(prefix, std::move(map), base, static_cast<int>(width), is_signed, total);
  }
  // Copied out in order: sequences may lie anywhere in the .bin, but not over one another
  // (more ids than the .bin holds would be a copy larger than the file: refused, not allocated).
  if (total > bin_bytes / width) {
    return Status::Corruption(StrCat(what, ": its sequences hold ", total, " ids, more than '",
                                     bin_path, "' holds (they overlap)"));
  }
  auto owned = std::make_shared<std::vector<int32_t>>();
  owned->reserve(total);
  for (uint64_t i = 0; i < sequences; ++i) {
    const auto [n, offset] = sequence(i);
    const uint8_t* p = map->data() + offset;
    for (int32_t k = 0; k < n; ++k, p += width) {
      const int64_t v = IdAt(p, static_cast<int>(width), is_signed);
      if (v < 0 || v > INT32_MAX) {
        return Status::Corruption(
            StrCat(what, ": sequence ", i, " holds an id outside 0..2^31 - 1 (token ", k, ")"));
      }
      owned->push_back(static_cast<int32_t>(v));
    }
  }
  TokenDataset d = FromTokens(std::move(*owned));
  d.shards_[0].path = prefix;
  return d;
}

Result<TokenDataset> TokenDataset::Load(const std::string& path, const std::string& format) {
  if (format == "text") return LoadText(path);
  if (format == "tokens") return LoadShard(path);
  if (format == "megatron") return LoadMegatron(path);
  return Status::InvalidArgument(
      StrCat("data.format '", format, "' is not one of: text, tokens, megatron"));
}

Result<TokenDataset> TokenDataset::Load(const std::vector<std::string>& entries,
                                        const std::string& format, const std::string& key) {
  std::vector<std::string> shards;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string k = entries.size() == 1 ? key : StrCat(key, "[", i, "]");
    FP8RT_ASSIGN_OR_RETURN(const std::vector<std::string> some,
                           ExpandShards(k, entries[i], format));
    shards.insert(shards.end(), some.begin(), some.end());
  }
  return LoadShards(shards, format, key);
}

Result<TokenDataset> TokenDataset::LoadShards(const std::vector<std::string>& shards,
                                              const std::string& format, const std::string& key) {
  std::vector<TokenDataset> parts;
  for (const std::string& path : shards) {
    FP8RT_ASSIGN_OR_RETURN(TokenDataset d, Load(path, format));
    if (d.size() == 0) {
      return Status::InvalidArgument(StrCat(key, ": shard '", path, "' holds no token"));
    }
    parts.push_back(std::move(d));
  }
  if (parts.empty()) return Status::InvalidArgument(StrCat(key, " names no shard"));
  return Concat(std::move(parts));
}

std::array<int32_t, 256> ShardHeader(int width, int64_t count) {
  std::array<int32_t, 256> h{};
  h[0] = width == 4 ? kShardMagicUint32 : kShardMagicUint16;
  h[1] = width == 4 ? kShardVersionUint32 : kShardVersionUint16;
  h[2] = static_cast<int32_t>(count);
  return h;
}

void AppendShardIds(const int32_t* ids, size_t n, int width, std::string* out) {
  const size_t at = out->size();
  out->resize(at + n * static_cast<size_t>(width));
  char* p = out->data() + at;
  for (size_t i = 0; i < n; ++i) {
    if (width == 4) {
      const auto v = static_cast<uint32_t>(ids[i]);
      std::memcpy(p + 4 * i, &v, 4);
    } else {
      const auto v = static_cast<uint16_t>(ids[i]);
      std::memcpy(p + 2 * i, &v, 2);
    }
  }
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
  const auto header = ShardHeader(wide ? 4 : 2, static_cast<int64_t>(tokens.size()));
  std::string raw;
  AppendShardIds(tokens.data(), tokens.size(), wide ? 4 : 2, &raw);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), sizeof(header));
  out.write(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (!out) return Status::IOError(StrCat("cannot write token shard '", path, "'"));
  return Status::Ok();
}

Result<TokenDataset> OpenDataset(const RunConfig& c, bool validation, bool exact) {
  const char* key = validation ? "data.val" : "data.train";
  const std::vector<std::string>& entries = validation ? c.data.val : c.data.train;
  FP8RT_ASSIGN_OR_RETURN(TokenDataset d, exact
                                             ? TokenDataset::LoadShards(entries, c.data.format, key)
                                             : TokenDataset::Load(entries, c.data.format, key));
  d.set_vocab_size(c.model.vocab_size);
  if (d.id_bytes() <= kEagerCheckBytes) {
    const Result<int32_t> most = d.CheckIds(c.model.vocab_size);
    if (!most.ok()) return Status(most.status().code(), StrCat(key, ": ", most.status().message()));
  }
  return d;
}

DataLoader::DataLoader(const TokenDataset* data, int B, int T, uint64_t seed, int rank, int world)
    : data_(data), B_(B), T_(T), seed_(seed), rank_(rank), world_(world) {}

Status DataLoader::Init() {
  shard_windows_.assign(1, 0);
  for (size_t i = 0; i < data_->num_shards(); ++i) {
    const uint64_t n = data_->shard(i).tokens;
    shard_windows_.push_back(shard_windows_.back() +
                             (n > 1 ? (n - 1) / static_cast<uint64_t>(T_) : 0));
  }
  num_windows_ = shard_windows_.back();
  if (num_windows_ < static_cast<uint64_t>(world_)) {
    return Status::InvalidArgument(
        StrCat("corpus of ", data_->size(), " tokens in ", data_->num_shards(),
               " shard(s) is too short for seq_len ", T_, " and ", world_, " rank(s)"));
  }
  return Status::Ok();
}

uint64_t DataLoader::WindowStart(uint64_t w) const {
  // The shard whose windows hold w: the last with shard_windows_[i] <= w.
  const auto it = std::upper_bound(shard_windows_.begin(), shard_windows_.end(), w);
  const size_t i = static_cast<size_t>(it - shard_windows_.begin()) - 1;
  return data_->shard(i).first + (w - shard_windows_[i]) * static_cast<uint64_t>(T_);
}

void DataLoader::Shuffle() {
  // The same shuffle whatever the width of the entries.
  const bool narrow = num_windows_ <= UINT32_MAX;
  perm32_.clear(), perm64_.clear();
  if (narrow) {
    perm32_.resize(num_windows_);
    for (uint64_t i = 0; i < num_windows_; ++i) perm32_[i] = static_cast<uint32_t>(i);
  } else {
    perm64_.resize(num_windows_);
    for (uint64_t i = 0; i < num_windows_; ++i) perm64_[i] = i;
  }
  SplitMix64 rng(seed_ ^ (0x9E3779B97F4A7C15ull * (cursor_.epoch + 1)));
  for (uint64_t i = num_windows_ - 1; i > 0; --i) {
    const uint64_t j = rng.Below(i + 1);
    if (narrow) {
      std::swap(perm32_[i], perm32_[j]);
    } else {
      std::swap(perm64_[i], perm64_[j]);
    }
  }
  perm_epoch_ = cursor_.epoch;
  shuffled_ = true;
}

DataCursor DataLoader::cursor() const {
  DataCursor c = cursor_;
  c.shards = data_->ShardList();
  return c;
}

void DataLoader::set_cursor(DataCursor c) {
  cursor_ = c;
  cursor_.shards.clear();
}

Status DataLoader::NextBatch(int32_t* inputs, int32_t* targets) {
  const uint64_t per_rank = num_windows_ / static_cast<uint64_t>(world_);
  for (int b = 0; b < B_; ++b) {
    if (cursor_.index >= per_rank) {
      ++cursor_.epoch;
      cursor_.index = 0;
    }
    if (!shuffled_ || perm_epoch_ != cursor_.epoch) Shuffle();
    const uint64_t at = WindowStart(Permuted(cursor_.index * world_ + rank_));
    ++cursor_.index;
    FP8RT_RETURN_IF_ERROR(
        data_->Copy(at, static_cast<uint64_t>(T_), inputs + static_cast<size_t>(b) * T_));
    FP8RT_RETURN_IF_ERROR(
        data_->Copy(at + 1, static_cast<uint64_t>(T_), targets + static_cast<size_t>(b) * T_));
  }
  return Status::Ok();
}

}  // namespace fp8rt
