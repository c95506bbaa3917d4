// fp8data: prepares a corpus for fp8train (runtime/prepare.h). Verbs: train-tokenizer,
// tokenize, verify. docs/DATA.md.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "common/exit_codes.h"
#include "common/text.h"
#include "common/version.h"
#include "runtime/prepare.h"

namespace {

// One line on stderr, redrawn in place on a terminal (elsewhere: a line every 10 s): bytes done
// of the total, tokens, tokens/s and the time left.
class ProgressBar {
 public:
  ProgressBar() : tty_(::isatty(2) != 0), start_(Clock::now()), last_(start_) {}
  void operator()(int64_t done, int64_t total, int64_t tokens) {
    const auto now = Clock::now();
    const bool finished = done >= total;
    if (!finished &&
        now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(10))) {
      return;
    }
    last_ = now;
    const double sec = std::chrono::duration<double>(now - start_).count();
    const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1;
    const double eta = frac > 0 ? sec * (1 - frac) / frac : 0;
    constexpr int kWidth = 30;
    std::string bar(static_cast<size_t>(frac * kWidth), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "%s[%s] %5.1f%%  %.1f/%.1f MB  %lld tokens  %.0f tokens/s  ETA %.0f s%s",
                 tty_ ? "\r" : "", bar.c_str(), 100 * frac, done / 1e6, total / 1e6,
                 static_cast<long long>(tokens), sec > 0 ? tokens / sec : 0.0, eta,
                 tty_ ? "   " : "\n");
    if (tty_ && finished) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  Clock::time_point start_, last_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace fp8rt;
  CLI::App app{
      "fp8data: prepares a corpus for fp8train: trains a SentencePiece tokenizer, tokenizes text "
      "files and JSONL into token shards with a validation split, checks shards"};
  app.name("fp8data");
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionLine("fp8data"));

  TokenizerTrainOptions train;
  auto* tt = app.add_subcommand("train-tokenizer",
                                "train a SentencePiece BPE or unigram model on text or JSONL");
  tt->add_option("--input", train.inputs.files, "text files or JSONL ({\"text\": ...} per line)")
      ->required();
  tt->add_option("--input-format", train.inputs.input_format, "auto (by extension), text, jsonl")
      ->capture_default_str();
  tt->add_option("--out", train.out, "the .model file to write")->required();
  tt->add_option("--vocab-size", train.vocab_size, "pieces in the model")->capture_default_str();
  tt->add_option("--type", train.type, "bpe or unigram")->capture_default_str();
  tt->add_option("--sample-lines", train.sample_lines, "input lines sampled to train on")
      ->capture_default_str();
  tt->add_option("--threads", train.threads, "0: every CPU")->capture_default_str();
  tt->footer(
      "Example:\n  fp8data train-tokenizer --input data/corpus-large.txt --vocab-size 32000 "
      "--out tok/corpus32k.model");

  TokenizeOptions tok;
  auto* tz =
      app.add_subcommand("tokenize",
                         "write token shards (uint16 ids when the vocabulary fits, else uint32), a "
                         "validation split and fp8data.json");
  tz->add_option("--input", tok.inputs.files, "text files or JSONL ({\"text\": ...} per line)")
      ->required();
  tz->add_option("--input-format", tok.inputs.input_format, "auto (by extension), text, jsonl")
      ->capture_default_str();
  tz->add_option("--tokenizer", tok.tokenizer, "a SentencePiece .model, or 'bytes'")->required();
  tz->add_option("--out", tok.out, "the output directory")->required();
  tz->add_option("--val-every", tok.val_every,
                 "every this many blocks go to the validation split; 0: none")
      ->capture_default_str();
  tz->add_option("--shard-tokens", tok.shard_tokens, "tokens per shard")->capture_default_str();
  tz->add_option("--block-bytes", tok.block_bytes, "input per unit of work")->capture_default_str();
  tz->add_option("--threads", tok.threads, "encoders; 0: every CPU")->capture_default_str();
  tz->add_flag("--force", tok.force, "redo even when the output is up to date");
  tz->footer(
      "Example:\n  fp8data tokenize --input data/corpus-large.txt --tokenizer "
      "tok/corpus32k.model --out data/corpus32k");

  std::vector<std::string> verify_paths;
  int verify_vocab = 0;
  auto* vf = app.add_subcommand("verify", "check every id of shards (or an fp8data directory)");
  vf->add_option("paths", verify_paths, "shards, directories, globs, or fp8data output directories")
      ->required();
  vf->add_option("--vocab-size", verify_vocab, "ids must be below it (default: the metadata's)");

  // Bare: the help. An unknown verb: named, with the nearest one.
  const std::vector<std::string> verbs = {"train-tokenizer", "tokenize", "verify"};
  if (argc < 2) {
    std::cerr << app.help();
    return kExitUsage;
  }
  if (argv[1][0] != '-' && std::find(verbs.begin(), verbs.end(), argv[1]) == verbs.end()) {
    const std::string near = Closest(argv[1], verbs);
    std::cerr << "fp8data: unknown command '" << Printable(argv[1]) << "'"
              << (near.empty() ? std::string() : "; did you mean '" + near + "'?")
              << " (commands: train-tokenizer, tokenize, verify; fp8data --help)\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  Status s;
  if (tt->parsed()) {
    s = TrainTokenizer(train, std::cout);
  } else if (tz->parsed()) {
    ProgressBar bar;
    auto r = Tokenize(
        tok, [&bar](int64_t done, int64_t total, int64_t tokens) { bar(done, total, tokens); });
    s = r.status();
    if (r.ok()) {
      if (tok.val_every > 0 && r->val_tokens == 0) {
        std::cerr << "fp8data: warning: no validation split: the input holds fewer than "
                  << tok.val_every / 2 + 1 << " blocks of " << tok.block_bytes
                  << " bytes; lower --block-bytes or --val-every\n";
      }
      if (r->up_to_date) {
        std::cout << "fp8data: " << tok.out << " is up to date (the same inputs, tokenizer and "
                  << "options; --force to redo)\n";
      } else {
        std::printf(
            "fp8data: %lld bytes -> %lld training tokens in %d shard(s), %lld "
            "validation tokens in %d shard(s), %s ids, in %.1f s\n",
            static_cast<long long>(r->input_bytes), static_cast<long long>(r->train_tokens),
            r->train_shards, static_cast<long long>(r->val_tokens), r->val_shards,
            r->id_bytes == 2 ? "uint16" : "uint32", r->seconds);
      }
      std::printf(
          "config:\n  model: {vocab_size: %d}\n  data:\n    format: tokens\n"
          "    train: %s/train\n%s    tokenizer: %s/fp8data.json\n",
          r->vocab_size, tok.out.c_str(),
          r->val_tokens > 0 ? ("    val: " + tok.out + "/val\n").c_str() : "", tok.out.c_str());
    }
  } else if (vf->parsed()) {
    s = VerifyShards(verify_paths, verify_vocab, std::cout);
  }
  if (!s.ok()) {
    std::cerr << "fp8data: " << s.ToString() << "\n";
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
  }
  return kExitOk;
}
