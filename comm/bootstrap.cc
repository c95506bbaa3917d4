// Launch detection: the environment of mpirun, srun or the FP8RT_* contract -> LaunchInfo.
#include "comm/bootstrap.h"

#include <charconv>
#include <map>

extern char** environ;

namespace fp8rt::comm {
namespace {

using Env = std::map<std::string, std::string>;

Env ReadEnv(const std::vector<std::string>& given) {
  Env env;
  auto add = [&](const std::string& kv) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  };
  if (!given.empty()) {
    for (const auto& kv : given) add(kv);
  } else {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) add(*e);
  }
  return env;
}

const std::string* Find(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// A non-negative integer variable; `fallback` when unset (or an error when fallback < 0).
Result<long> Int(const Env& env, const char* name, long fallback = -1, long lo = 0,
                 long hi = 1 << 24) {
  const std::string* v = Find(env, name);
  if (v == nullptr) {
    if (fallback >= 0) return fallback;
    return Status::InvalidArgument(StrCat(name, " is not set"));
  }
  long n = 0;
  const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || p != v->data() + v->size() || n < lo || n > hi) {
    return Status::InvalidArgument(
        StrCat(name, "='", *v, "' is not an integer in [", lo, ", ", hi, "]"));
  }
  return n;
}

Status CheckRank(const LaunchInfo& l, const char* rank_var, const char* size_var) {
  if (l.world_size < 1) {
    return Status::InvalidArgument(StrCat(size_var, "=", l.world_size, " must be >= 1"));
  }
  if (l.rank >= l.world_size) {
    return Status::InvalidArgument(StrCat(rank_var, "=", l.rank, " is outside the world of ",
                                          size_var, "=", l.world_size));
  }
  return Status::Ok();
}

Status MasterFromEnv(const Env& env, LaunchInfo* l, const char* why) {
  const std::string* addr = Find(env, "FP8RT_MASTER_ADDR");
  if (addr != nullptr) l->master_addr = *addr;
  if (Find(env, "FP8RT_MASTER_PORT") != nullptr) {
    FP8RT_ASSIGN_OR_RETURN(const long port, Int(env, "FP8RT_MASTER_PORT", -1, 1, 65535));
    l->master_port = static_cast<int>(port);
  }
  if (l->world_size > 1 && (l->master_addr.empty() || l->master_port == 0)) {
    return Status::InvalidArgument(StrCat(why, ": FP8RT_MASTER_ADDR and FP8RT_MASTER_PORT (where "
                                          "rank 0 serves the rendezvous) must be set for a "
                                          "world of ",
                                          l->world_size));
  }
  return Status::Ok();
}

}  // namespace

const char* LauncherName(Launcher l) {
  switch (l) {
    case Launcher::kSingle:
      return "single";
    case Launcher::kEnv:
      return "env";
    case Launcher::kMpirun:
      return "mpirun";
    case Launcher::kSrun:
      return "srun";
  }
  return "?";
}

int SlurmDefaultPort(long job_id, long step_id) {
  return 12000 + static_cast<int>((job_id * 16 + step_id) % 20000);
}

Result<std::vector<std::string>> ExpandSlurmHostList(const std::string& list) {
  std::vector<std::string> out;
  // Top-level comma split, not inside brackets.
  std::vector<std::string> tokens;
  int depth = 0;
  std::string cur;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) {
      return Status::InvalidArgument(StrCat("host list '", list, "' has unbalanced brackets"));
    }
    if (c == ',' && depth == 0) {
      tokens.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) return Status::InvalidArgument(StrCat("host list '", list, "' has an open '['"));
  tokens.push_back(cur);
  for (const std::string& t : tokens) {
    if (t.empty()) continue;
    const size_t open = t.find('[');
    if (open == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const size_t close = t.find(']', open);
    const std::string prefix = t.substr(0, open), inside = t.substr(open + 1, close - open - 1);
    FP8RT_ASSIGN_OR_RETURN(const std::vector<std::string> suffixes,
                           ExpandSlurmHostList(t.substr(close + 1)));
    size_t start = 0;
    while (start <= inside.size()) {
      const size_t comma = std::min(inside.find(',', start), inside.size());
      const std::string item = inside.substr(start, comma - start);
      start = comma + 1;
      const size_t dash = item.find('-');
      const std::string lo_s = item.substr(0, dash);
      const std::string hi_s = dash == std::string::npos ? lo_s : item.substr(dash + 1);
      long lo = 0, hi = 0;
      auto parse = [](const std::string& s, long* v) {
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
        return !s.empty() && ec == std::errc() && p == s.data() + s.size() && *v >= 0;
      };
      if (!parse(lo_s, &lo) || !parse(hi_s, &hi) || hi < lo || hi - lo > 100000) {
        return Status::InvalidArgument(
            StrCat("host list '", list, "': '", item, "' is not a number or a range a-b"));
      }
      for (long n = lo; n <= hi; ++n) {
        std::string num = std::to_string(n);
        if (num.size() < lo_s.size()) num.insert(0, lo_s.size() - num.size(), '0');  // node[01-03]
        for (const std::string& s : suffixes.empty() ? std::vector<std::string>{""} : suffixes) {
          out.push_back(prefix + num + s);
        }
      }
    }
  }
  return out;
}

Result<LaunchInfo> DetectLaunch(const std::vector<std::string>& given) {
  const Env env = ReadEnv(given);
  LaunchInfo l;
  if (Find(env, "FP8RT_RANK") != nullptr || Find(env, "FP8RT_WORLD_SIZE") != nullptr) {
    l.launcher = Launcher::kEnv;
    FP8RT_ASSIGN_OR_RETURN(const long rank, Int(env, "FP8RT_RANK"));
    FP8RT_ASSIGN_OR_RETURN(const long size, Int(env, "FP8RT_WORLD_SIZE", -1, 1));
    FP8RT_ASSIGN_OR_RETURN(const long local, Int(env, "FP8RT_LOCAL_RANK", rank));
    l.rank = static_cast<int>(rank), l.world_size = static_cast<int>(size);
    l.local_rank = static_cast<int>(local);
    FP8RT_RETURN_IF_ERROR(CheckRank(l, "FP8RT_RANK", "FP8RT_WORLD_SIZE"));
    FP8RT_RETURN_IF_ERROR(MasterFromEnv(env, &l, "FP8RT_RANK is set"));
    if (const std::string* job = Find(env, "FP8RT_JOB_ID")) l.job = *job;
    return l;
  }
  if (Find(env, "OMPI_COMM_WORLD_SIZE") != nullptr) {
    l.launcher = Launcher::kMpirun;
    FP8RT_ASSIGN_OR_RETURN(const long rank, Int(env, "OMPI_COMM_WORLD_RANK"));
    FP8RT_ASSIGN_OR_RETURN(const long size, Int(env, "OMPI_COMM_WORLD_SIZE", -1, 1));
    FP8RT_ASSIGN_OR_RETURN(const long local, Int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0));
    l.rank = static_cast<int>(rank), l.world_size = static_cast<int>(size);
    l.local_rank = static_cast<int>(local);
    FP8RT_RETURN_IF_ERROR(CheckRank(l, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
    return l;
  }
  if (Find(env, "SLURM_STEP_NUM_TASKS") != nullptr && Find(env, "SLURM_PROCID") != nullptr) {
    l.launcher = Launcher::kSrun;
    FP8RT_ASSIGN_OR_RETURN(const long rank, Int(env, "SLURM_PROCID"));
    FP8RT_ASSIGN_OR_RETURN(const long size, Int(env, "SLURM_STEP_NUM_TASKS", -1, 1));
    FP8RT_ASSIGN_OR_RETURN(const long local, Int(env, "SLURM_LOCALID", 0));
    l.rank = static_cast<int>(rank), l.world_size = static_cast<int>(size);
    l.local_rank = static_cast<int>(local);
    FP8RT_RETURN_IF_ERROR(CheckRank(l, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"));
    // Rank 0 runs on the first host of the step (Slurm's block distribution, the default).
    if (const std::string* addr = Find(env, "FP8RT_MASTER_ADDR")) {
      l.master_addr = *addr;
    } else {
      const std::string* nodes = Find(env, "SLURM_STEP_NODELIST");
      if (nodes == nullptr) nodes = Find(env, "SLURM_JOB_NODELIST");
      if (nodes == nullptr) {
        return Status::InvalidArgument(
            "srun: neither SLURM_STEP_NODELIST nor FP8RT_MASTER_ADDR says where rank 0 runs");
      }
      FP8RT_ASSIGN_OR_RETURN(const auto hosts, ExpandSlurmHostList(*nodes));
      if (hosts.empty()) return Status::InvalidArgument("srun: SLURM_STEP_NODELIST is empty");
      l.master_addr = hosts.front();
    }
    if (Find(env, "FP8RT_MASTER_PORT") != nullptr) {
      FP8RT_ASSIGN_OR_RETURN(const long port, Int(env, "FP8RT_MASTER_PORT", -1, 1, 65535));
      l.master_port = static_cast<int>(port);
    } else {
      FP8RT_ASSIGN_OR_RETURN(const long job, Int(env, "SLURM_JOB_ID", 0, 0, 1L << 40));
      FP8RT_ASSIGN_OR_RETURN(const long step, Int(env, "SLURM_STEP_ID", 0, 0, 1L << 31));
      l.master_port = SlurmDefaultPort(job, step);
    }
    l.job = StrCat("slurm-", Find(env, "SLURM_JOB_ID") ? *Find(env, "SLURM_JOB_ID") : "?", ".",
                   Find(env, "SLURM_STEP_ID") ? *Find(env, "SLURM_STEP_ID") : "?");
    return l;
  }
  return l;  // a world of one
}

}  // namespace fp8rt::comm
