// Preparing a corpus for fp8train (the fp8data tool): training a SentencePiece tokenizer on raw
// text, tokenizing text files and JSONL into llm.c token shards with a validation split, and
// checking shards. docs/DATA.md.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt {

// Inputs: text files (each a document), or JSONL files (`{"text": "..."}` on each line, each a
// document; other keys ignored), told apart by their extension (.jsonl, .json: JSONL) unless
// `input_format` says (text, jsonl).
struct CorpusInputs {
  std::vector<std::string> files;
  std::string input_format = "auto";  // auto, text or jsonl. Default: auto
};

struct TokenizerTrainOptions {
  CorpusInputs inputs;
  std::string out;           // the .model file to write (and .vocab beside it)
  int vocab_size = 32000;    // Default: 32000
  std::string type = "bpe";  // bpe or unigram. Default: bpe
  // Lines sampled from the inputs to train on (SentencePiece's input_sentence_size). Default: 2M
  int64_t sample_lines = 2'000'000;
  int threads = 0;  // 0: every CPU. Default: 0
};
// Trains the model: byte fallback (no text is unknown), digits split, spaces kept as written
// (identity normalization), so that decoding gives back the text. `log` gets a line of what it
// did.
Status TrainTokenizer(const TokenizerTrainOptions& o, std::ostream& log);

struct TokenizeOptions {
  CorpusInputs inputs;
  std::string tokenizer;  // a SentencePiece .model, or "bytes"
  std::string out;        // the output directory
  // Every this many blocks (block_bytes of input each) goes to the validation split, the rest to
  // training (as scripts/make-corpus.sh splits the byte-level corpus); 0: no validation split.
  // Default: 50 (2%: blocks 25, 75, 125, ...)
  int val_every = 50;
  int64_t shard_tokens = 100'000'000;  // tokens per shard (llm.c's fineweb: 100M). Default: 100M
  int64_t block_bytes = 256 << 10;     // input per block (a unit of work). Default: 256 KiB
  int threads = 0;                     // encoders; 0: every CPU. Default: 0
  bool force = false;                  // redo even when up to date. Default: false
};
struct TokenizeReport {
  bool up_to_date = false;  // nothing was done: the output was made from the same inputs
  int64_t input_bytes = 0, train_tokens = 0, val_tokens = 0;
  int train_shards = 0, val_shards = 0;
  int vocab_size = 0, id_bytes = 2;
  double seconds = 0;
};
// Writes `out`/train/shard_NNNNNN.bin, `out`/val/shard_NNNNNN.bin (uint16 ids when the
// vocabulary fits, uint32 otherwise), `out`/tokenizer.model (a copy) and, last, `out`/
// fp8data.json: the tokenizer (model file, vocabulary size, end-of-document id), the id width,
// each shard with its token count, and the recipe (each input's path, size and modification
// time, the model's checksum, the options). A run whose recipe matches the metadata there is up
// to date and does nothing; otherwise the old shards are replaced. Each document ends with the
// model's end-of-document id (when it has one). `progress` is called as blocks are done (bytes
// done, bytes total, tokens so far).
using TokenizeProgress = std::function<void(int64_t done, int64_t total, int64_t tokens)>;
Result<TokenizeReport> Tokenize(const TokenizeOptions& o, const TokenizeProgress& progress);

// Checks every id of the shards that `paths` name (files, directories, globs; or an fp8data
// output directory, whose metadata gives the vocabulary and token counts) against `vocab_size`
// (0: the metadata's). `log` gets one line per dataset.
Status VerifyShards(const std::vector<std::string>& paths, int vocab_size, std::ostream& log);

}  // namespace fp8rt
