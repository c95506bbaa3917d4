// Which files a job may make fp8d read. The daemon opens a job's inputs (data.train, data.val,
// train.init_from, config_path) with its own rights, on behalf of users it knows only by their
// tokens; so an input must lie, after every symbolic link is resolved, under a root the deployment
// declares (fp8d --data-root; config_path under the config directory or a --config-root), outside
// fp8d's own state (other jobs' checkpoints and logs, the job store, tokens), be a regular file
// (or, for init_from, a directory of them) and be readable by every user or belong to the user
// fp8d runs as. Checked when a job is submitted (the scheduler) and again where it is opened
// (fp8train, started by the node daemon with the node's roots). docs/API.md, "Who may read what".
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "common/train_config.h"

namespace fp8rt {

// How messages name the two kinds of roots: where a config_path may lie, where inputs may.
inline constexpr char kConfigRootsName[] = "the config roots (fp8d --config-dir and --config-root)";
inline constexpr char kDataRootsName[] =
    "the data roots (fp8d --data-root; by default the config roots)";

struct InputRules {
  // Absolute directories inputs may lie under. Default: none (then nothing is allowed)
  std::vector<std::string> roots;
  // Directories whose contents are never inputs, even under a root: fp8d's data directory and
  // checkpoint root, the tokens files. Default: none
  std::vector<std::string> private_paths;
  // What `roots` are called in messages. Default: kDataRootsName
  std::string roots_name = kDataRootsName;
};

// Checks the input `key` = `path` (absolute; a relative path is refused: resolve it first) and
// returns its real path, the one to open. Refusals are InvalidArgument naming the key, the path
// as given and the rule broken; they never say what a file holds, and a path outside the roots is
// refused before anything there is looked at. A kDataShards entry (`format` is data.format) is
// checked shard by shard (ConfineShards) and returned as its real directory, glob or file.
Result<std::string> ConfineInput(const std::string& key, const std::string& path, InputKind kind,
                                 const InputRules& rules, const std::string& format = "");

// The shards a data entry names, each confined (ConfineInput) and given by its real path (with
// format megatron: the .bin/.idx prefixes), in order (ExpandShards).
Result<std::vector<std::string>> ConfineShards(const std::string& key, const std::string& entry,
                                               const std::string& format, const InputRules& rules);

// ConfineInput for every input of `config` (RunConfig::Inputs), each replaced by its real path;
// with `expand`, every data entry by the real paths of its shards (what a reader then opens, so
// what was checked is what is read).
Status ConfineInputs(RunConfig* config, const InputRules& rules, bool expand = false);

// The shards a data entry (absolute) names, in order: the entry itself when it is not a directory
// and holds no glob character (*, ? or [); a directory's shards by name (format tokens: *.bin;
// megatron: the prefixes of its *.idx files; text: every regular file; names starting with "."
// skipped); a glob's matches by name (megatron: the .idx files among them, as prefixes). No
// shard at all is an error naming the entry. Only looks; ConfineShards checks.
// A glob has its wildcards in its last component only, not starting with "."; an entry names
// at most kMaxShardsPerEntry shards. Links among a directory's or a glob's files are listed as
// they are (confinement resolves them).
inline constexpr size_t kMaxShardsPerEntry = 100'000;
Result<std::vector<std::string>> ExpandShards(const std::string& key, const std::string& entry,
                                              const std::string& format);
bool HasGlob(const std::string& path);

// Whether `path` is `dir` or lies under it, component by component ("/data2" is not under
// "/data"); both lexically normal and absolute.
bool PathUnder(const std::string& path, const std::string& dir);

}  // namespace fp8rt
