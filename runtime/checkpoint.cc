// Atomic, checksummed checkpoint directories.
#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/checkpoint_fence.h"
#include "common/crc32c.h"

namespace fs = std::filesystem;

namespace fp8rt {
namespace {

constexpr int kFormatVersion = 1;

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(StrCat("missing file '", path, "'"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A checkpoint file read whole in large reads (it may be many GB: one byte at a time through a
// stream took minutes), its CRC-32C taken as it arrives; `on_progress` after each piece.
struct FileRead {
  std::vector<uint8_t> bytes;
  uint32_t crc = 0;
};
Result<FileRead> ReadBlob(const std::string& path, const std::function<void()>& on_progress) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::NotFound(StrCat("missing file '", path, "'"));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Corruption(StrCat("checkpoint file '", path, "' is not a regular file"));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  FileRead out;
  out.bytes.resize(static_cast<size_t>(st.st_size));
  constexpr size_t kPiece = size_t{64} << 20;
  size_t done = 0;
  while (done < out.bytes.size()) {
    const size_t want = std::min(kPiece, out.bytes.size() - done);
    const ssize_t n = ::pread(fd, out.bytes.data() + done, want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOError(
          StrCat("reading checkpoint file '", path, "' failed at byte ", done,
                 n == 0 ? ": it ended early" : StrCat(": ", std::strerror(err))));
    }
    out.crc = Crc32c(out.bytes.data() + done, static_cast<size_t>(n), out.crc);
    done += static_cast<size_t>(n);
    if (on_progress) on_progress();
  }
  ::close(fd);
  return out;
}

std::string Hex32(uint32_t v) {
  std::ostringstream os;
  os << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

}  // namespace

const CheckpointBlob* Checkpoint::Find(const std::string& name) const {
  for (const auto& b : blobs) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

std::string CheckpointStepDir(const std::string& dir, int64_t step) {
  std::ostringstream os;
  os << "step_" << std::setw(8) << std::setfill('0') << step;
  return (fs::path(dir) / os.str()).string();
}

std::string CheckpointWriter::StagingDir(int64_t step) const {
  // Each attempt stages apart: a stale attempt emptying its staging directory cannot touch the
  // current one's.
  return CheckpointStepDir(dir_, step) + ".staging" +
         (attempt_ >= 0 ? StrCat(".a", attempt_) : std::string());
}

Status CheckpointWriter::PrepareStaging(int64_t step) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Status::IOError(StrCat("cannot create checkpoint dir '", dir_, "': ", ec.message()));
  FP8RT_RETURN_IF_ERROR(HoldCheckpointFence(dir_, attempt_).status());
  const std::string staging = StagingDir(step);
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  if (ec) return Status::IOError(StrCat("cannot create '", staging, "': ", ec.message()));
  return Status::Ok();
}

Result<CheckpointFile> CheckpointWriter::StageFile(int64_t step, const std::string& name,
                                                   const void* bytes, size_t n) const {
  FP8RT_RETURN_IF_ERROR(WriteFileSynced((fs::path(StagingDir(step)) / name).string(), bytes, n));
  return CheckpointFile{name, n, Crc32c(bytes, n)};
}

Status CheckpointWriter::Commit(const Checkpoint& ckpt,
                                const std::vector<CheckpointFile>& staged) const {
  std::error_code ec;
  const std::string final_dir = CheckpointStepDir(dir_, ckpt.step);
  const std::string staging = StagingDir(ckpt.step);
  nlohmann::json manifest;
  manifest["format_version"] = kFormatVersion;
  manifest["step"] = ckpt.step;
  if (attempt_ >= 0) manifest["attempt"] = attempt_;
  manifest["fingerprint"] = ckpt.fingerprint;
  manifest["state"] = ckpt.state;
  manifest["files"] = nlohmann::json::object();
  for (const CheckpointFile& f : staged) {
    const std::string path = (fs::path(staging) / f.name).string();
    if (!fs::exists(path) || fs::file_size(path, ec) != f.bytes) {
      return Status::IOError(StrCat("staged checkpoint file '", path, "' is missing or is not ",
                                    f.bytes, " bytes"));
    }
    manifest["files"][f.name] = {{"bytes", f.bytes}, {"crc32c", Hex32(f.crc32c)}};
  }
  for (const auto& b : ckpt.blobs) {
    FP8RT_ASSIGN_OR_RETURN(CheckpointFile f,
                           StageFile(ckpt.step, b.name, b.bytes.data(), b.bytes.size()));
    manifest["files"][b.name] = {{"bytes", f.bytes}, {"crc32c", Hex32(f.crc32c)}};
  }
  const std::string mtext = manifest.dump(2);
  FP8RT_RETURN_IF_ERROR(
      WriteFileSynced((fs::path(staging) / "manifest.json").string(), mtext.data(), mtext.size()));
  FP8RT_RETURN_IF_ERROR(FsyncPath(staging, true));
  // From here to LATEST, under the fence: a stale attempt stops here, before it replaces anything.
  FP8RT_ASSIGN_OR_RETURN(const FenceHold fence, HoldCheckpointFence(dir_, attempt_));
  // A checkpoint of the same step from an earlier (interrupted) run is replaced only now, after
  // the new one is complete on disk.
  if (fs::exists(final_dir)) {
    const std::string old = final_dir + ".old";
    fs::remove_all(old, ec);
    fs::rename(final_dir, old, ec);
    if (ec) return Status::IOError(StrCat("cannot move aside '", final_dir, "': ", ec.message()));
    fs::rename(staging, final_dir, ec);
    fs::remove_all(old);
  } else {
    fs::rename(staging, final_dir, ec);
  }
  if (ec) return Status::IOError(StrCat("rename '", staging, "': ", ec.message()));
  FP8RT_RETURN_IF_ERROR(FsyncPath(dir_, true));
  const std::string latest = fs::path(final_dir).filename().string() + "\n";
  return WriteFileAtomic((fs::path(dir_) / "LATEST").string(), latest.data(), latest.size());
}

Status CheckpointWriter::Write(const Checkpoint& ckpt) const {
  FP8RT_RETURN_IF_ERROR(PrepareStaging(ckpt.step));
  return Commit(ckpt, {});
}

Result<int64_t> LatestCheckpointStep(const std::string& dir) {
  auto text = ReadWholeFile((fs::path(dir) / "LATEST").string());
  if (!text.ok()) return Status::NotFound(StrCat("no checkpoint in '", dir, "' (no LATEST file)"));
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.rfind("step_", 0) != 0) {
    return Status::Corruption(StrCat("'", dir, "/LATEST' holds '", name, "', not step_NNNNNNNN"));
  }
  try {
    return static_cast<int64_t>(std::stoll(name.substr(5)));
  } catch (...) {
    return Status::Corruption(StrCat("'", dir, "/LATEST' holds '", name, "', not step_NNNNNNNN"));
  }
}

Result<Checkpoint> ReadCheckpoint(const std::string& dir, int64_t step,
                                  const std::map<std::string, std::string>& expected,
                                  const std::function<void()>& on_progress,
                                  const WantedFile& wanted) {
  if (step < 0) {
    FP8RT_ASSIGN_OR_RETURN(step, LatestCheckpointStep(dir));
  }
  const std::string sdir = CheckpointStepDir(dir, step);
  auto mtext = ReadWholeFile((fs::path(sdir) / "manifest.json").string());
  if (!mtext.ok()) {
    return Status::NotFound(StrCat("checkpoint '", sdir, "' has no manifest.json (incomplete?)"));
  }
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(*mtext);
  } catch (const std::exception& e) {
    return Status::Corruption(StrCat("'", sdir, "/manifest.json' is not valid JSON: ", e.what()));
  }
  Checkpoint ck;
  try {
    if (m.at("format_version").get<int>() != kFormatVersion) {
      return Status::Corruption(StrCat("'", sdir, "': checkpoint format version ",
                                       m.at("format_version").get<int>(), ", this build reads ",
                                       kFormatVersion));
    }
    ck.step = m.at("step").get<int64_t>();
    ck.fingerprint = m.at("fingerprint").get<std::map<std::string, std::string>>();
    ck.state = m.at("state").get<std::map<std::string, std::string>>();
    for (const auto& [k, v] : expected) {
      auto it = ck.fingerprint.find(k);
      if (it != ck.fingerprint.end() && it->second != v) {
        return Status::FailedPrecondition(
            StrCat("checkpoint '", sdir, "' does not match this run: ", k, " is ", it->second,
                   " in the checkpoint but ", v, " here"));
      }
    }
    for (const auto& [name, info] : m.at("files").items()) {
      if (wanted && !wanted(ck.state, name)) {
        ck.skipped.insert(name);
        continue;
      }
      const std::string path = (fs::path(sdir) / name).string();
      auto read = ReadBlob(path, on_progress);
      if (!read.ok() && read.status().code() == StatusCode::kNotFound) {
        return Status::Corruption(StrCat("checkpoint file '", path, "' is missing"));
      }
      if (!read.ok()) return read.status();
      const size_t want = info.at("bytes").get<size_t>();
      if (read->bytes.size() != want) {
        return Status::Corruption(StrCat("checkpoint file '", path, "' is ", read->bytes.size(),
                                         " bytes, manifest says ", want, " (truncated?)"));
      }
      const std::string crc = Hex32(read->crc);
      if (crc != info.at("crc32c").get<std::string>()) {
        return Status::Corruption(StrCat("checkpoint file '", path, "' fails its checksum (crc32c ",
                                         crc, ", manifest ", info.at("crc32c").get<std::string>(),
                                         ")"));
      }
      ck.blobs.push_back({name, std::move(read->bytes)});
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(StrCat("'", sdir, "/manifest.json' is malformed: ", e.what()));
  }
  return ck;
}

namespace {

// The step of a committed checkpoint's directory name (step_ and 8 or more digits), else -1.
int64_t StepOfName(const std::string& name) {
  if (name.size() < 13 || name.size() > 24 || name.rfind("step_", 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The committed checkpoints in `dir` (real directories, not links), by step.
std::map<int64_t, fs::path> CommittedSteps(const std::string& dir) {
  std::map<int64_t, fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = StepOfName(it->path().filename().string());
    if (step >= 0 && it->is_directory(ec) && !it->is_symlink(ec)) out[step] = it->path();
  }
  return out;
}

}  // namespace

Result<std::vector<int64_t>> PruneCheckpoints(const std::string& dir, int keep, int64_t keep_every,
                                              int attempt) {
  std::vector<int64_t> removed;
  if (keep <= 0) return removed;
  FP8RT_ASSIGN_OR_RETURN(const FenceHold fence, HoldCheckpointFence(dir, attempt));
  FP8RT_ASSIGN_OR_RETURN(const int64_t latest, LatestCheckpointStep(dir));
  const std::map<int64_t, fs::path> steps = CommittedSteps(dir);
  int kept = 1;  // LATEST's
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const int64_t step = it->first;
    if (step >= latest) continue;  // LATEST's, and any newer: kept
    if (kept < keep) {
      ++kept;
      continue;
    }
    if (keep_every > 0 && step % keep_every == 0) continue;
    std::error_code ec;
    const fs::path aside = it->second.string() + ".removing";
    fs::remove_all(aside, ec);
    fs::rename(it->second, aside, ec);
    if (ec) {
      return Status::IOError(StrCat("cannot remove old checkpoint '", it->second.string(),
                                    "': ", ec.message()));
    }
    fs::remove_all(aside, ec);
    if (ec) {
      return Status::IOError(
          StrCat("cannot remove old checkpoint '", aside.string(), "': ", ec.message()));
    }
    removed.push_back(step);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

uint64_t CheckpointDiskBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& [step, path] : CommittedSteps(dir)) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec) && !it->is_symlink(ec)) bytes += it->file_size(ec);
    }
  }
  return bytes;
}

}  // namespace fp8rt
