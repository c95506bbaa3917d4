// fp8data's work (runtime/prepare.h): tokenizer training, tokenizing into shards, verifying.
#include "runtime/prepare.h"

#include <fcntl.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/atomic_file.h"
#include "common/crc32c.h"
#include "common/read_file.h"
#include "runtime/data.h"
#include "runtime/tokenizer.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

bool IsJsonl(const std::string& path, const std::string& format) {
  if (format == "jsonl") return true;
  if (format == "text") return false;
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json";
}

Status CheckInputs(const CorpusInputs& in) {
  if (in.files.empty()) return Status::InvalidArgument("no input files (--input)");
  if (in.input_format != "auto" && in.input_format != "text" && in.input_format != "jsonl") {
    return Status::InvalidArgument(
        StrCat("--input-format '", in.input_format, "' is not one of: auto, text, jsonl"));
  }
  for (const std::string& f : in.files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) {
      return Status::InvalidArgument(StrCat("input '", f, "': ", std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(
          StrCat("input '", f, "' is ", FileTypeName(st.st_mode), "; a regular file is required"));
    }
  }
  return Status::Ok();
}

// A unit of work: some documents of one input (the last one cut at a line end when the block
// is full), and whether the last one ends there.
struct Block {
  std::vector<std::string> docs;
  bool last_ends = true;
  int64_t bytes = 0;
};

// Reads the inputs in blocks of about `block_bytes`, one file after another.
class BlockReader {
 public:
  BlockReader(const CorpusInputs& in, int64_t block_bytes) : in_(in), block_bytes_(block_bytes) {}
  // False at the end of the last input.
  Result<bool> Next(Block* b) {
    *b = Block{};
    while (true) {
      if (!file_.is_open()) {
        if (next_ >= in_.files.size()) return false;
        path_ = in_.files[next_++];
        jsonl_ = IsJsonl(path_, in_.input_format);
        line_ = 0;
        file_.open(path_, std::ios::binary);
        if (!file_) return Status::IOError(StrCat("input '", path_, "' cannot be opened"));
      }
      if (jsonl_) {
        std::string line;
        while (b->bytes < block_bytes_ && std::getline(file_, line)) {
          ++line_;
          b->bytes += static_cast<int64_t>(line.size()) + 1;
          if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
          const auto j = nlohmann::json::parse(line, nullptr, false);
          if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
            return Status::InvalidArgument(StrCat("input '", path_, "' line ", line_,
                                                  ": not a JSON object with a string \"text\""));
          }
          b->docs.push_back(j["text"].get<std::string>());
        }
      } else {
        std::string chunk(static_cast<size_t>(block_bytes_), '\0');
        file_.read(chunk.data(), block_bytes_);
        chunk.resize(static_cast<size_t>(file_.gcount()));
        // Up to the next line end, so that a block never cuts a word.
        if (file_ && !chunk.empty() && chunk.back() != '\n') {
          std::string rest;
          std::getline(file_, rest);
          chunk += rest;
          if (!file_.eof()) chunk += '\n';
        }
        b->bytes += static_cast<int64_t>(chunk.size());
        if (!chunk.empty()) b->docs.push_back(std::move(chunk));
        b->last_ends = file_.peek() == std::char_traits<char>::eof();
      }
      if (file_.bad()) return Status::IOError(StrCat("input '", path_, "' cannot be read"));
      const bool at_end = file_.peek() == std::char_traits<char>::eof();
      if (at_end) file_.close();
      if (!b->docs.empty() || b->bytes >= block_bytes_) return true;
    }
  }

 private:
  const CorpusInputs& in_;
  const int64_t block_bytes_;
  size_t next_ = 0;
  std::ifstream file_;
  std::string path_;
  bool jsonl_ = false;
  int64_t line_ = 0;
};

// The lines of the inputs, for SentencePiece's trainer (JSONL: each text's lines).
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const CorpusInputs& in) : reader_(in, 1 << 20) { Next(); }
  bool done() const override { return done_; }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return status_; }
  void Next() override {
    while (true) {
      while (at_ < lines_.size()) {
        value_ = std::move(lines_[at_++]);
        if (!value_.empty()) return;
      }
      Block b;
      auto more = reader_.Next(&b);
      if (!more.ok()) {
        status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInvalidArgument,
                                              more.status().message());
        done_ = true;
        return;
      }
      if (!*more) {
        done_ = true;
        return;
      }
      lines_.clear(), at_ = 0;
      for (const std::string& d : b.docs) {
        size_t start = 0;
        while (start <= d.size()) {
          const size_t end = std::min(d.find('\n', start), d.size());
          lines_.push_back(d.substr(start, end - start));
          start = end + 1;
        }
      }
    }
  }

 private:
  BlockReader reader_;
  std::vector<std::string> lines_;
  size_t at_ = 0;
  std::string value_;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

// llm.c shards of one width written one after another: shard_000000.bin, ..., each of at most
// `per_shard` tokens; each is written as .part and renamed once whole and synced.
class ShardSink {
 public:
  ShardSink(std::string dir, int width, int64_t per_shard)
      : dir_(std::move(dir)), width_(width), per_shard_(per_shard) {}
  ~ShardSink() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(const std::vector<int32_t>& ids) {
    size_t at = 0;
    while (at < ids.size()) {
      if (fd_ < 0) FP8RT_RETURN_IF_ERROR(Open());
      const size_t take = std::min(ids.size() - at, static_cast<size_t>(per_shard_ - count_));
      std::string bytes;
      AppendShardIds(ids.data() + at, take, width_, &bytes);
      FP8RT_RETURN_IF_ERROR(WriteAll(bytes.data(), bytes.size()));
      count_ += static_cast<int64_t>(take), at += take;
      if (count_ == per_shard_) FP8RT_RETURN_IF_ERROR(Close());
    }
    return Status::Ok();
  }
  Status Close() {
    if (fd_ < 0) return Status::Ok();
    const auto header = ShardHeader(width_, count_);
    if (::pwrite(fd_, header.data(), sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
        ::fsync(fd_) != 0) {
      return Status::IOError(StrCat("cannot write '", part_, "': ", std::strerror(errno)));
    }
    ::close(fd_);
    fd_ = -1;
    const std::string name = fs::path(part_).stem().string();
    std::error_code ec;
    fs::rename(part_, (fs::path(dir_) / name).string(), ec);
    if (ec) return Status::IOError(StrCat("cannot rename '", part_, "': ", ec.message()));
    shards_.push_back({name, count_});
    total_ += count_;
    return Status::Ok();
  }
  const std::vector<std::pair<std::string, int64_t>>& shards() const { return shards_; }
  int64_t total() const { return total_ + (fd_ >= 0 ? count_ : 0); }

 private:
  Status Open() {
    char name[32];
    std::snprintf(name, sizeof name, "shard_%06zu.bin", shards_.size());
    part_ = (fs::path(dir_) / name).string() + ".part";
    fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return Status::IOError(StrCat("cannot create '", part_, "': ", std::strerror(errno)));
    count_ = 0;
    const std::string header(1024, '\0');
    return WriteAll(header.data(), header.size());
  }
  Status WriteAll(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        return Status::IOError(StrCat("cannot write '", part_, "': ", std::strerror(errno)));
      p += w, n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  std::string dir_, part_;
  int width_;
  int64_t per_shard_, count_ = 0, total_ = 0;
  int fd_ = -1;
  std::vector<std::pair<std::string, int64_t>> shards_;
};

// Removes the shards (and parts) of an earlier run from `dir`, creating it if missing.
Status ClearShards(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError(StrCat("cannot create '", dir, "': ", ec.message()));
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("shard_", 0) != 0) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
    if (rm)
      return Status::IOError(StrCat("cannot remove '", it->path().string(), "': ", rm.message()));
  }
  if (ec) return Status::IOError(StrCat("cannot list '", dir, "': ", ec.message()));
  return Status::Ok();
}

nlohmann::json ShardsJson(const ShardSink& s, const std::string& dir) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, n] : s.shards()) list.push_back({{"file", name}, {"tokens", n}});
  return {{"dir", dir}, {"tokens", s.total()}, {"shards", list}};
}

}  // namespace

Status TrainTokenizer(const TokenizerTrainOptions& o, std::ostream& log) {
  FP8RT_RETURN_IF_ERROR(CheckInputs(o.inputs));
  if (o.type != "bpe" && o.type != "unigram") {
    return Status::InvalidArgument(StrCat("--type '", o.type, "' is not one of: bpe, unigram"));
  }
  if (o.vocab_size < 300 || o.vocab_size > (1 << 24)) {
    return Status::InvalidArgument(StrCat("--vocab-size ", o.vocab_size,
                                          " is out of range [300, 16777216] (byte fallback "
                                          "takes 256 ids)"));
  }
  if (o.out.empty() || fs::path(o.out).extension() != ".model") {
    return Status::InvalidArgument(StrCat("--out '", o.out, "' must name a .model file"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"character_coverage", "0.9995"},
      {"input_sentence_size", std::to_string(o.sample_lines)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},
      {"model_prefix", ""},
  };
  LineIterator lines(o.inputs);
  std::string model;
  const auto s = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!s.ok()) {
    return Status::InvalidArgument(StrCat("SentencePiece could not train a ", o.type, " model of ",
                                          o.vocab_size, " pieces: ", s.ToString()));
  }
  FP8RT_ASSIGN_OR_RETURN(const Tokenizer tok, Tokenizer::FromModel(model, o.out));
  std::error_code ec;
  if (fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path(), ec);
  FP8RT_RETURN_IF_ERROR(WriteFileAtomic(o.out, model));
  log << "fp8data: trained a " << o.type << " tokenizer of " << tok.vocab_size() << " pieces in "
      << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
      << " s: " << o.out << "\n";
  return Status::Ok();
}

Result<TokenizeReport> Tokenize(const TokenizeOptions& o, const TokenizeProgress& progress) {
  FP8RT_RETURN_IF_ERROR(CheckInputs(o.inputs));
  if (o.out.empty()) return Status::InvalidArgument("--out DIR is required");
  if (o.val_every < 0 || o.val_every == 1) {
    return Status::InvalidArgument(
        "--val-every must be 0 (no validation split) or at least 2 (1 would leave no training "
        "data)");
  }
  if (o.shard_tokens < 1 || o.shard_tokens > INT32_MAX) {
    return Status::InvalidArgument(
        StrCat("--shard-tokens ", o.shard_tokens, " is out of range [1, ", INT32_MAX, "]"));
  }
  if (o.block_bytes < 1024) return Status::InvalidArgument("--block-bytes must be >= 1024");
  const auto t0 = std::chrono::steady_clock::now();
  Tokenizer tok = Tokenizer::Bytes();
  if (o.tokenizer != "bytes") {
    FP8RT_ASSIGN_OR_RETURN(tok, Tokenizer::Load(o.tokenizer));
  }
  const std::string model = tok.serialized();
  TokenizeReport report;
  report.vocab_size = tok.vocab_size();
  report.id_bytes = report.vocab_size <= 65536 ? 2 : 4;
  // The recipe: what the output is made of. The same recipe, the same output.
  nlohmann::json inputs = nlohmann::json::array();
  for (const std::string& f : o.inputs.files) {
    struct stat st {};
    ::stat(f.c_str(), &st);
    const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    inputs.push_back({{"path", fs::absolute(f).lexically_normal().string()},
                      {"bytes", static_cast<int64_t>(st.st_size)},
                      {"mtime_ns", mtime}});
    report.input_bytes += static_cast<int64_t>(st.st_size);
  }
  const nlohmann::json recipe = {{"inputs", inputs},
                                 {"input_format", o.inputs.input_format},
                                 {"tokenizer_crc32c", Crc32c(model.data(), model.size())},
                                 {"val_every", o.val_every},
                                 {"shard_tokens", o.shard_tokens},
                                 {"block_bytes", o.block_bytes}};
  const std::string meta_path = (fs::path(o.out) / kDatasetMetaName).string();
  if (!o.force) {
    // (A metadata file of another shape is simply not up to date.)
    try {
      auto old = ReadRegularFile(meta_path, "dataset metadata", {.max_bytes = size_t{64} << 20});
      const auto meta = old.ok() ? nlohmann::json::parse(*old, nullptr, false) : nlohmann::json();
      bool whole = meta.is_object() && meta.value("recipe", nlohmann::json()) == recipe &&
                   meta.contains("train") && meta.contains("val");
      std::error_code ec;
      whole = whole && (tok.is_bytes() ||
                        fs::file_size(fs::path(o.out) / "tokenizer.model", ec) == model.size());
      whole = whole && !ec;
      for (const char* split : {"train", "val"}) {
        if (!whole) break;
        const auto& shards = meta.at(split).at("shards");
        // Exactly the listed shards in the directory (fp8train reads every *.bin there).
        size_t present = 0;
        for (const auto& e : fs::directory_iterator(fs::path(o.out) / split, ec)) {
          present += e.path().extension() == ".bin" ? 1 : 0;
        }
        whole = whole && !ec && present == shards.size();
        for (const auto& sh : shards) {
          const auto size =
              fs::file_size(fs::path(o.out) / split / sh.at("file").get<std::string>(), ec);
          whole = whole && !ec &&
                  size == 1024 + sh.at("tokens").get<uint64_t>() *
                                     static_cast<uint64_t>(report.id_bytes);
        }
      }
      if (whole) {
        report.up_to_date = true;
        report.train_tokens = meta.at("train").at("tokens").get<int64_t>();
        report.val_tokens = meta.at("val").at("tokens").get<int64_t>();
        report.train_shards = static_cast<int>(meta.at("train").at("shards").size());
        report.val_shards = static_cast<int>(meta.at("val").at("shards").size());
        return report;
      }
    } catch (const std::exception&) {
      // not up to date
    }
  }
  // Out of date: the metadata goes first (a run cut short leaves no metadata that vouches for
  // half-written shards), then the shards are written again.
  std::error_code ec;
  fs::remove(meta_path, ec);
  const std::string train_dir = (fs::path(o.out) / "train").string();
  const std::string val_dir = (fs::path(o.out) / "val").string();
  FP8RT_RETURN_IF_ERROR(ClearShards(train_dir));
  FP8RT_RETURN_IF_ERROR(ClearShards(val_dir));
  ShardSink train(train_dir, report.id_bytes, o.shard_tokens);
  ShardSink val(val_dir, report.id_bytes, o.shard_tokens);
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BlockReader reader(o.inputs, o.block_bytes);
  int64_t index = 0, done_bytes = 0;
  bool more = true;
  while (more) {
    // A batch of blocks read in order, encoded in parallel, written in order.
    std::vector<Block> blocks;
    while (more && blocks.size() < static_cast<size_t>(2 * threads)) {
      Block b;
      FP8RT_ASSIGN_OR_RETURN(more, reader.Next(&b));
      if (more) blocks.push_back(std::move(b));
    }
    std::vector<std::vector<int32_t>> ids(blocks.size());
    std::vector<Status> errors(blocks.size());
    std::vector<std::thread> pool;
    for (int t = 0; t < threads && t < static_cast<int>(blocks.size()); ++t) {
      pool.emplace_back([&, t] {
        for (size_t i = static_cast<size_t>(t); i < blocks.size();
             i += static_cast<size_t>(threads)) {
          for (size_t d = 0; d < blocks[i].docs.size(); ++d) {
            auto e = tok.Encode(blocks[i].docs[d]);
            if (!e.ok()) {
              errors[i] = e.status();
              break;
            }
            ids[i].insert(ids[i].end(), e->begin(), e->end());
            const bool ends = d + 1 < blocks[i].docs.size() || blocks[i].last_ends;
            if (ends && tok.eos_id() >= 0) ids[i].push_back(tok.eos_id());
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    for (size_t i = 0; i < blocks.size(); ++i, ++index) {
      FP8RT_RETURN_IF_ERROR(errors[i]);
      const bool to_val = o.val_every > 0 && index % o.val_every == o.val_every / 2;
      FP8RT_RETURN_IF_ERROR((to_val ? val : train).Append(ids[i]));
      done_bytes += blocks[i].bytes;
      if (progress) progress(done_bytes, report.input_bytes, train.total() + val.total());
    }
  }
  FP8RT_RETURN_IF_ERROR(train.Close());
  FP8RT_RETURN_IF_ERROR(val.Close());
  if (train.total() == 0) {
    return Status::InvalidArgument("the inputs hold no text: no training token was written");
  }
  const std::string model_name = tok.is_bytes() ? "bytes" : "tokenizer.model";
  if (!tok.is_bytes()) {
    FP8RT_RETURN_IF_ERROR(WriteFileAtomic((fs::path(o.out) / model_name).string(), model));
  }
  const nlohmann::json meta = {
      {"fp8data", 1},
      {"tokenizer",
       {{"model", model_name},
        {"source", tok.is_bytes() ? std::string("bytes") : fs::absolute(o.tokenizer).string()},
        {"vocab_size", tok.vocab_size()},
        {"eos_id", tok.eos_id()}}},
      {"ids", report.id_bytes == 2 ? "uint16" : "uint32"},
      {"train", ShardsJson(train, "train")},
      {"val", ShardsJson(val, "val")},
      {"recipe", recipe}};
  FP8RT_RETURN_IF_ERROR(WriteFileAtomic(meta_path, meta.dump(1) + "\n"));
  report.train_tokens = train.total();
  report.val_tokens = val.total();
  report.train_shards = static_cast<int>(train.shards().size());
  report.val_shards = static_cast<int>(val.shards().size());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

Status VerifyShards(const std::vector<std::string>& paths, int vocab_size, std::ostream& log) {
  if (paths.empty())
    return Status::InvalidArgument("nothing to verify: name shards or a directory");
  for (const std::string& p : paths) {
    const std::string meta_path = (fs::path(p) / kDatasetMetaName).string();
    std::error_code ec;
    if (fs::is_regular_file(meta_path, ec)) {
      FP8RT_ASSIGN_OR_RETURN(
          const std::string text,
          ReadRegularFile(meta_path, "dataset metadata", {.max_bytes = size_t{64} << 20}));
      const auto meta = nlohmann::json::parse(text, nullptr, false);
      const auto* tok =
          meta.is_object() && meta.contains("tokenizer") ? &meta["tokenizer"] : nullptr;
      const bool readable = tok != nullptr && tok->is_object() && tok->contains("vocab_size") &&
                            (*tok)["vocab_size"].is_number_integer() &&
                            (*tok)["vocab_size"].get<int64_t>() > 0 &&
                            (*tok)["vocab_size"].get<int64_t>() <= INT32_MAX;
      for (const char* split : {"train", "val"}) {
        const bool ok = meta.is_object() && meta.contains(split) && meta[split].is_object() &&
                        meta[split].contains("tokens") &&
                        meta[split]["tokens"].is_number_unsigned();
        if (!ok) return Status::Corruption(StrCat("'", meta_path, "' is not fp8data metadata"));
      }
      if (!readable && vocab_size <= 0) {
        return Status::Corruption(StrCat("'", meta_path, "' names no vocabulary size"));
      }
      const int vocab =
          vocab_size > 0 ? vocab_size : static_cast<int>((*tok)["vocab_size"].get<int64_t>());
      for (const char* split : {"train", "val"}) {
        const int64_t want = static_cast<int64_t>(meta[split]["tokens"].get<uint64_t>());
        if (want == 0) continue;
        const std::string dir = (fs::path(p) / split).string();
        FP8RT_ASSIGN_OR_RETURN(TokenDataset d, TokenDataset::Load({dir}, "tokens", dir));
        FP8RT_ASSIGN_OR_RETURN(const int32_t most, d.CheckIds(vocab));
        if (static_cast<int64_t>(d.size()) != want) {
          return Status::Corruption(
              StrCat("'", dir, "' holds ", d.size(), " tokens, its metadata says ", want));
        }
        log << dir << ": " << d.num_shards() << " shard(s), " << d.size() << " tokens, largest id "
            << most << " (vocabulary " << vocab << "): ok\n";
      }
      continue;
    }
    FP8RT_ASSIGN_OR_RETURN(TokenDataset d, TokenDataset::Load({p}, "tokens", p));
    FP8RT_ASSIGN_OR_RETURN(const int32_t most, d.CheckIds(vocab_size > 0 ? vocab_size : INT32_MAX));
    log << p << ": " << d.num_shards() << " shard(s), " << d.size() << " tokens, largest id "
        << most;
    if (vocab_size > 0) log << " (vocabulary " << vocab_size << ")";
    log << ": ok\n";
  }
  return Status::Ok();
}

}  // namespace fp8rt
