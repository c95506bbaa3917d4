// Input confinement (common/input_paths.h).
#include "common/input_paths.h"

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

Result<std::string> ConfineInput(const std::string& key, const std::string& path, InputKind kind,
                                 const InputRules& rules) {
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
  if (!fs::path(path).is_absolute()) {
    return Status::InvalidArgument(StrCat(key, " = '", path, "' is not an absolute path"));
  }
  // Lexically first: a path outside every root is refused before anything there is looked at
  // (no stat, no open: its existence is nobody's business).
  const std::string lexical = Normal(path);
  std::vector<std::string> roots, real_roots;
  for (const std::string& r : rules.roots) {
    if (!fs::path(r).is_absolute()) continue;
    roots.push_back(Normal(r));
    real_roots.push_back(Real(r));
  }
  auto under_a_root = [&](const std::string& p, const std::vector<std::string>& rs) {
    return std::any_of(rs.begin(), rs.end(), [&](const std::string& r) { return PathUnder(p, r); });
  };
  if (!under_a_root(lexical, roots) && !under_a_root(lexical, real_roots)) {
    return Status::InvalidArgument(
        StrCat(key, " = '", path, "' is outside ", rules.roots_name, ": ", List(roots),
               path.find("..") != std::string::npos ? " ('..' is resolved before the check)" : ""));
  }
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
  FP8RT_RETURN_IF_ERROR(CheckFile(key, path, real.string(), kind == InputKind::kHfDirectory));
  if (kind == InputKind::kHfDirectory) {
    // The files fp8train reads from it, by the same rules (a link inside may not lead out).
    for (const char* name : {"model.safetensors", "config.json"}) {
      const std::string inner = (real / name).string();
      struct stat st {};
      if (::lstat(inner.c_str(), &st) != 0 && std::string(name) == "config.json") continue;
      FP8RT_RETURN_IF_ERROR(
          ConfineInput(StrCat(key, "/", name), inner, InputKind::kFile, rules).status());
    }
  }
  return real.string();
}

Status ConfineInputs(RunConfig* config, const InputRules& rules) {
  for (const InputPath& in : config->Inputs()) {
    if (in.path->empty()) continue;
    FP8RT_ASSIGN_OR_RETURN(*in.path, ConfineInput(in.key, *in.path, in.kind, rules));
  }
  return Status::Ok();
}

}  // namespace fp8rt
