// Input confinement (common/input_paths.h).
#include "common/input_paths.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/read_file.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

// An absolute directory, lexically normal, without a trailing slash.
std::string Normal(const std::string& p) {
  fs::path n = fs::path(p).lexically_normal();
  std::string s = n.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The real path of an existing directory, or its normal form when it cannot be resolved.
std::string Real(const std::string& dir) {
  std::error_code ec;
  const fs::path r = fs::canonical(dir, ec);
  return ec ? Normal(dir) : r.string();
}

std::string List(const std::vector<std::string>& dirs) {
  std::string out;
  for (const std::string& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out.empty() ? "none declared" : out;
}

std::string Octal(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// The checks on a resolved path: type and readability.
Status CheckFile(const std::string& key, const std::string& shown, const std::string& real,
                 bool directory) {
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) {
    return Status::InvalidArgument(
        StrCat(key, " = '", shown, "' cannot be read: ", std::strerror(errno)));
  }
  const bool ok_type = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
  if (!ok_type) {
    return Status::InvalidArgument(StrCat(key, " = '", shown, "' is ", FileTypeName(st.st_mode),
                                          "; ", directory ? "a directory" : "a regular file",
                                          " is required"));
  }
  const bool world = (st.st_mode & S_IROTH) != 0 && (!directory || (st.st_mode & S_IXOTH) != 0);
  if (!world && st.st_uid != ::geteuid()) {
    return Status::InvalidArgument(StrCat(
        key, " = '", shown, "' is mode ", Octal(st.st_mode),
        ", not readable by every user: fp8d reads inputs with its own rights for any user, so an "
        "input must be readable by all (chmod o+r",
        directory ? "x" : "", ") or belong to the user fp8d runs as"));
  }
  return Status::Ok();
}

}  // namespace

bool PathUnder(const std::string& path, const std::string& dir) {
  const fs::path p(path), d(dir);
  auto [di, pi] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  // A trailing "" component (from "dir/") matches anything.
  return di == d.end() || (std::next(di) == d.end() && di->empty());
}

namespace {

enum class Want { kFile, kDirectory, kEither };

// Whether `path`, lexically normal, lies under a root as given or as resolved.
Status UnderARootLexically(const std::string& key, const std::string& path,
                           const InputRules& rules) {
  const std::string lexical = Normal(path);
  std::vector<std::string> roots;
  bool under = false;
  for (const std::string& r : rules.roots) {
    if (!fs::path(r).is_absolute()) continue;
    roots.push_back(Normal(r));
    under = under || PathUnder(lexical, Normal(r)) || PathUnder(lexical, Real(r));
  }
  if (under) return Status::Ok();
  return Status::InvalidArgument(
      StrCat(key, " = '", path, "' is outside ", rules.roots_name, ": ", List(roots),
             path.find("..") != std::string::npos ? " ('..' is resolved before the check)" : ""));
}

// The rules for one path (a file or a directory, as `want` says): absolute, lexically under a
// root before anything is looked at, under a real root through its links, outside fp8d's state,
// of the right type and readable. Returns its real path.
Result<std::string> ConfinePath(const std::string& key, const std::string& path, Want want,
                                const InputRules& rules) {
  if (!fs::path(path).is_absolute()) {
    return Status::InvalidArgument(StrCat(key, " = '", path, "' is not an absolute path"));
  }
  // Lexically first: a path outside every root is refused before anything there is looked at
  // (no stat, no open: its existence is nobody's business).
  FP8RT_RETURN_IF_ERROR(UnderARootLexically(key, path, rules));
  std::vector<std::string> roots, real_roots;
  for (const std::string& r : rules.roots) {
    if (!fs::path(r).is_absolute()) continue;
    roots.push_back(Normal(r));
    real_roots.push_back(Real(r));
  }
  auto under_a_root = [&](const std::string& p, const std::vector<std::string>& rs) {
    return std::any_of(rs.begin(), rs.end(), [&](const std::string& r) { return PathUnder(p, r); });
  };
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) {
    return Status::InvalidArgument(StrCat(key, " = '", path, "' does not exist"));
  }
  if (!under_a_root(real.string(), real_roots)) {
    return Status::InvalidArgument(StrCat(key, " = '", path, "' leaves ", rules.roots_name,
                                          " through a symbolic link; name a file under ",
                                          List(roots), " itself"));
  }
  for (const std::string& priv : rules.private_paths) {
    if (PathUnder(real.string(), Real(priv))) {
      return Status::InvalidArgument(
          StrCat(key, " = '", path, "' lies in fp8d's own state (", Normal(priv),
                 "): other jobs' checkpoints and logs, the job store and tokens are never inputs"));
    }
  }
  bool directory = want == Want::kDirectory;
  if (want == Want::kEither) directory = fs::is_directory(real, ec);
  FP8RT_RETURN_IF_ERROR(CheckFile(key, path, real.string(), directory));
  return real.string();
}

// `s` with the glob characters escaped, so that glob(3) matches it literally.
std::string EscapeGlob(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Wildcards in the last component only, which may not start with "." (so that a glob reads the
// one directory before it and never matches "." or ".."): "shards/train_*.bin".
Status CheckGlobShape(const std::string& key, const std::string& entry) {
  const size_t slash = entry.rfind('/');
  const std::string last = slash == std::string::npos ? entry : entry.substr(slash + 1);
  bool escaped = false, early = false;
  for (size_t i = 0; slash != std::string::npos && i < slash; ++i) {
    const char c = entry[i];
    if (!escaped && (c == '*' || c == '?' || c == '[')) early = true;
    escaped = !escaped && c == '\\';
  }
  if (early || last.empty() || last[0] == '.') {
    return Status::InvalidArgument(
        StrCat(key, " = '", entry,
               "': a glob may have wildcards (*, ? or [) in its last component only, not starting "
               "with '.' (name a directory, then the pattern of its files: shards/train_*.bin)"));
  }
  return Status::Ok();
}

// A data entry confined: its real form (file, directory, glob under a real directory, or
// prefix) and its shards', each checked.
struct ConfinedEntry {
  std::string entry;
  std::vector<std::string> shards;
};

Result<ConfinedEntry> ConfineEntry(const std::string& key, const std::string& entry,
                                   const std::string& format, const InputRules& rules) {
  const bool megatron = format == "megatron";
  auto confine_shard = [&](const std::string& shard) {
    return ConfineInput(key, shard, megatron ? InputKind::kMegatronPrefix : InputKind::kFile,
                        rules);
  };
  ConfinedEntry out;
  std::vector<std::string> shards;
  if (HasGlob(entry)) {
    if (!fs::path(entry).is_absolute()) {
      return Status::InvalidArgument(StrCat(key, " = '", entry, "' is not an absolute path"));
    }
    FP8RT_RETURN_IF_ERROR(CheckGlobShape(key, entry));
    // The directory above the first component with a glob character is confined as a directory;
    // the matches, each as a shard.
    fs::path dir, rest;
    bool in_pattern = false;
    for (const fs::path& part : fs::path(entry)) {
      in_pattern = in_pattern || HasGlob(part.string());
      (in_pattern ? rest : dir) /= part;
    }
    // (The pattern itself first, lexically: one outside every root is refused unexpanded.)
    FP8RT_RETURN_IF_ERROR(UnderARootLexically(key, entry, rules));
    FP8RT_ASSIGN_OR_RETURN(const std::string real_dir,
                           ConfinePath(key, dir.string(), Want::kDirectory, rules));
    out.entry = EscapeGlob(real_dir) + "/" + rest.string();
    FP8RT_ASSIGN_OR_RETURN(shards, ExpandShards(key, out.entry, format));
  } else {
    if (!fs::path(entry).is_absolute()) {
      return Status::InvalidArgument(StrCat(key, " = '", entry, "' is not an absolute path"));
    }
    FP8RT_RETURN_IF_ERROR(UnderARootLexically(key, entry, rules));
    std::error_code ec;
    if (megatron && !fs::is_directory(fs::path(entry), ec)) {
      FP8RT_ASSIGN_OR_RETURN(out.entry,
                             ConfineInput(key, entry, InputKind::kMegatronPrefix, rules));
      out.shards = {out.entry};
      return out;
    }
    FP8RT_ASSIGN_OR_RETURN(out.entry, ConfinePath(key, entry, Want::kEither, rules));
    if (HasGlob(out.entry)) {
      // (It would read as a glob where it is opened again.)
      return Status::InvalidArgument(
          StrCat(key, " = '", entry, "' leads to a path with *, ? or [ in it; rename it"));
    }
    FP8RT_ASSIGN_OR_RETURN(shards, ExpandShards(key, out.entry, format));
  }
  for (const std::string& shard : shards) {
    FP8RT_ASSIGN_OR_RETURN(std::string real, confine_shard(shard));
    out.shards.push_back(std::move(real));
  }
  return out;
}

}  // namespace

bool HasGlob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

Result<std::vector<std::string>> ExpandShards(const std::string& key, const std::string& entry,
                                              const std::string& format) {
  const bool megatron = format == "megatron";
  std::vector<std::string> out;
  std::string what;
  if (HasGlob(entry)) {
    FP8RT_RETURN_IF_ERROR(CheckGlobShape(key, entry));
    glob_t g{};
    const int rc = ::glob(entry.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc != 0 && rc != GLOB_NOMATCH) {
      globfree(&g);
      return Status::InvalidArgument(
          StrCat(key, " = '", entry,
                 "': the glob cannot be expanded (a directory on its way "
                 "cannot be read, or memory ran out)"));
    }
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
      const std::string m = g.gl_pathv[i];
      // (A link is taken as it is, not followed here: confinement resolves it.)
      struct stat st {};
      if (::lstat(m.c_str(), &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) continue;
      if (megatron) {
        if (m.ends_with(".idx")) out.push_back(m.substr(0, m.size() - 4));
      } else {
        out.push_back(m);
      }
    }
    globfree(&g);
    what = megatron ? "a glob matching no .idx file" : "a glob matching no regular file";
  } else {
    std::error_code ec;
    if (!fs::is_directory(entry, ec)) return std::vector<std::string>{entry};
    for (fs::directory_iterator it(entry, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code ec2;
      const fs::file_status st = it->symlink_status(ec2);
      if (name.empty() || name[0] == '.' || !(fs::is_regular_file(st) || fs::is_symlink(st))) {
        continue;
      }
      const std::string full = (fs::path(entry) / name).string();
      if (megatron) {
        if (name.ends_with(".idx")) out.push_back(full.substr(0, full.size() - 4));
      } else if (format != "tokens" || name.ends_with(".bin")) {
        out.push_back(full);
      }
    }
    if (ec) {
      return Status::InvalidArgument(
          StrCat(key, " = '", entry, "': the directory cannot be listed: ", ec.message()));
    }
    what = megatron             ? "a directory with no .idx file"
           : format == "tokens" ? "a directory with no *.bin file"
                                : "a directory with no regular file";
  }
  if (out.empty()) {
    return Status::InvalidArgument(StrCat(key, " = '", entry, "' names no shards (", what, ")"));
  }
  if (out.size() > kMaxShardsPerEntry) {
    return Status::InvalidArgument(StrCat(key, " = '", entry, "' names ", out.size(),
                                          " shards; at most ", kMaxShardsPerEntry, " per entry"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> ConfineInput(const std::string& key, const std::string& path, InputKind kind,
                                 const InputRules& rules, const std::string& format) {
  if (kind == InputKind::kDataShards) {
    FP8RT_ASSIGN_OR_RETURN(ConfinedEntry e, ConfineEntry(key, path, format, rules));
    return e.entry;
  }
  if (kind == InputKind::kMegatronPrefix) {
    // Both files of the pair, each as a file; they must lie side by side (what a reader derives
    // from the prefix is what was checked).
    FP8RT_ASSIGN_OR_RETURN(
        const std::string bin,
        ConfineInput(StrCat(key, " (.bin)"), path + ".bin", InputKind::kFile, rules));
    FP8RT_ASSIGN_OR_RETURN(
        const std::string idx,
        ConfineInput(StrCat(key, " (.idx)"), path + ".idx", InputKind::kFile, rules));
    const std::string prefix = bin.size() > 4 ? bin.substr(0, bin.size() - 4) : std::string();
    if (bin.size() < 5 || bin.compare(bin.size() - 4, 4, ".bin") != 0 || idx != prefix + ".idx") {
      return Status::InvalidArgument(
          StrCat(key, " = '", path,
                 "': its .bin and .idx must be files side by side under one "
                 "name (through links they lead to '",
                 bin, "' and '", idx, "')"));
    }
    return prefix;
  }
  FP8RT_ASSIGN_OR_RETURN(
      const std::string real,
      ConfinePath(key, path, kind == InputKind::kHfDirectory ? Want::kDirectory : Want::kFile,
                  rules));
  if (kind == InputKind::kTokenizer && real.ends_with(".json")) {
    // fp8data's metadata: the model it names lies beside it, by the same rules.
    const std::string model = (fs::path(real).parent_path() / "tokenizer.model").string();
    struct stat st {};
    if (::lstat(model.c_str(), &st) == 0) {
      FP8RT_RETURN_IF_ERROR(
          ConfineInput(StrCat(key, " (tokenizer.model)"), model, InputKind::kFile, rules).status());
    }
  }
  if (kind == InputKind::kHfDirectory) {
    // The files fp8train reads from it, by the same rules (a link inside may not lead out).
    for (const char* name : {"model.safetensors", "config.json"}) {
      const std::string inner = (fs::path(real) / name).string();
      struct stat st {};
      if (::lstat(inner.c_str(), &st) != 0 && std::string(name) == "config.json") continue;
      FP8RT_RETURN_IF_ERROR(
          ConfineInput(StrCat(key, "/", name), inner, InputKind::kFile, rules).status());
    }
  }
  return real;
}

Result<std::vector<std::string>> ConfineShards(const std::string& key, const std::string& entry,
                                               const std::string& format, const InputRules& rules) {
  FP8RT_ASSIGN_OR_RETURN(ConfinedEntry e, ConfineEntry(key, entry, format, rules));
  return std::move(e.shards);
}

Status ConfineInputs(RunConfig* config, const InputRules& rules, bool expand) {
  for (const InputPath& in : config->Inputs()) {
    if (in.path->empty() || (expand && in.kind == InputKind::kDataShards)) continue;
    FP8RT_ASSIGN_OR_RETURN(*in.path, ConfineInput(in.key, *in.path, in.kind, rules, in.format));
  }
  if (!expand) return Status::Ok();
  for (auto [key, list] :
       {std::pair{"data.train", &config->data.train}, std::pair{"data.val", &config->data.val}}) {
    std::vector<std::string> shards;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string k = list->size() == 1 ? std::string(key) : StrCat(key, "[", i, "]");
      FP8RT_ASSIGN_OR_RETURN(auto some, ConfineShards(k, (*list)[i], config->data.format, rules));
      shards.insert(shards.end(), some.begin(), some.end());
    }
    *list = std::move(shards);
  }
  return Status::Ok();
}

}  // namespace fp8rt
