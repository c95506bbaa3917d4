// Placement policy: gang search over free GPUs, the FP8/BF16 decision and the head-of-queue
// reservation that keeps large gangs from starving.
#include "scheduler/placement.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace fp8rt::sched {
namespace {

// [node][gpu] != 0: held back for the reserved job, not usable by others this round.
using Mask = std::vector<std::vector<char>>;

enum class Occupancy {
  kFreeOnly,  // only GPUs no job holds: "can it start now"
  kIgnore,    // every GPU: "could it ever fit on the nodes we have"
};

bool NodeUp(const NodeInfo& n, int64_t now, const PlacementOptions& o) {
  if (n.state != NodeState::kReady) return false;
  return o.heartbeat_timeout_s == 0 || now - n.last_heartbeat <= o.heartbeat_timeout_s;
}

bool GpuFits(const GpuInfo& g, const JobSpec& s, CcRange cc) {
  if (!g.healthy) return false;
  // CPU slots run every precision (emulated); a spec's own capability floor still excludes them.
  if (g.name == kCpuSlotName ? s.min_compute_capability > 0
                             : g.compute_capability < std::max(cc.min, s.min_compute_capability) ||
                                   g.compute_capability > cc.max) {
    return false;
  }
  if (g.memory_gib < s.min_memory_gib) return false;
  return s.gpu_types.empty() ||
         std::find(s.gpu_types.begin(), s.gpu_types.end(), g.name) != s.gpu_types.end();
}

struct Candidate {
  size_t node;
  std::vector<int> usable;  // free GPUs first, then (kIgnore only) busy ones
  size_t free_count;
};

// One gang of spec.nodes distinct nodes with spec.gpus_per_node fitting GPUs each, all of one GPU
// type unless the spec allows mixing. kFreeOnly packs best-fit (fullest nodes first) to keep whole
// nodes free for big gangs; kIgnore prefers the emptiest nodes, which free up soonest.
std::optional<std::vector<NodeAssignment>> FindGang(const ClusterSnapshot& c, const JobSpec& s,
                                                    CcRange cc, Occupancy occ, const Mask* blocked,
                                                    const PlacementOptions& o) {
  // Tried in name order; "" stands for "any type" when mixing is allowed. A type the spec allows
  // but no node has simply finds no candidates, so the spec's list can stand in for the scan.
  std::set<std::string> types;
  if (s.allow_mixed_gpu_types) {
    types.insert("");
  } else if (!s.gpu_types.empty()) {
    types.insert(s.gpu_types.begin(), s.gpu_types.end());
  } else {
    for (const auto& n : c.nodes) {
      const std::string* last = nullptr;  // nodes are mostly one type: skip repeats cheaply
      for (const auto& g : n.gpus) {
        if (last == nullptr || g.name != *last) types.insert(g.name);
        last = &g.name;
      }
    }
  }
  const size_t need = static_cast<size_t>(s.gpus_per_node);
  for (const std::string& type : types) {
    std::vector<Candidate> cands;
    for (size_t i = 0; i < c.nodes.size(); ++i) {
      const NodeInfo& n = c.nodes[i];
      if (!NodeUp(n, c.now, o)) continue;
      if (occ == Occupancy::kFreeOnly) {  // cheap reject: too few free GPUs of any kind
        size_t free = 0;
        for (size_t g = 0; g < n.gpus.size() && free < need; ++g) free += n.free(g);
        if (free < need) continue;
      }
      std::vector<int> free_idx, busy_idx;
      for (size_t g = 0; g < n.gpus.size(); ++g) {
        if (!GpuFits(n.gpus[g], s, cc)) continue;
        if (!type.empty() && n.gpus[g].name != type) continue;
        if (blocked != nullptr && (*blocked)[i][g]) continue;
        (n.free(g) ? free_idx : busy_idx).push_back(static_cast<int>(g));
      }
      Candidate cand{i, free_idx, free_idx.size()};
      if (occ == Occupancy::kIgnore) {
        cand.usable.insert(cand.usable.end(), busy_idx.begin(), busy_idx.end());
      }
      if (cand.usable.size() >= need) cands.push_back(cand);
    }
    if (cands.size() < static_cast<size_t>(s.nodes)) continue;
    std::sort(cands.begin(), cands.end(), [&](const Candidate& a, const Candidate& b) {
      const std::string& ida = c.nodes[a.node].id;
      const std::string& idb = c.nodes[b.node].id;
      if (occ == Occupancy::kFreeOnly) {
        return std::tie(a.free_count, ida) < std::tie(b.free_count, idb);
      }
      return std::tie(b.free_count, ida) < std::tie(a.free_count, idb);
    });
    std::vector<NodeAssignment> out;
    for (int k = 0; k < s.nodes; ++k) {
      const Candidate& cand = cands[k];
      NodeAssignment a{c.nodes[cand.node].id,
                       {cand.usable.begin(), cand.usable.begin() + s.gpus_per_node}};
      std::sort(a.gpus.begin(), a.gpus.end());
      out.push_back(std::move(a));
    }
    return out;
  }
  return std::nullopt;
}

std::string GangText(const JobSpec& s) {
  std::string t = StrCat(s.nodes, " node(s) x ", s.gpus_per_node, " GPU(s)");
  if (!s.gpu_types.empty()) {
    t += " of type ";
    for (size_t i = 0; i < s.gpu_types.size(); ++i) t += StrCat(i ? " or " : "", s.gpu_types[i]);
  }
  return t;
}

// The lowest compute capability among a gang's GPUs, and that GPU's name (0 for CPU slots, which
// run every precision).
std::pair<int, std::string> LowestGpu(const ClusterSnapshot& c,
                                      const std::vector<NodeAssignment>& gang) {
  std::pair<int, std::string> low{std::numeric_limits<int>::max(), ""};
  for (const auto& a : gang) {
    for (const auto& n : c.nodes) {
      if (n.id != a.node_id) continue;
      for (int g : a.gpus) {
        const GpuInfo& gpu = n.gpus[g];
        const int cc = gpu.name == kCpuSlotName ? 0 : gpu.compute_capability;
        if (cc < low.first) low = {cc, gpu.name};
      }
    }
  }
  return low;
}

// A gang found for the job, in the precision common/precision.h decides on its GPUs.
JobDecision Placed(const ClusterSnapshot& c, const PendingJob& job, std::vector<NodeAssignment> a,
                   bool fallback_allowed, const std::string& note = "") {
  const auto [cc, gpu] = LowestGpu(c, a);
  auto p = DecidePrecision(job.spec.requested_precision(), job.spec.config.fp8.mode, cc, gpu,
                           fallback_allowed);
  JobDecision d{job.id, DecisionKind::kPlace, std::move(a), Precision::kFp8, ""};
  if (!p.ok()) {  // (FindGang searched the request's own range: not reached)
    return {job.id, DecisionKind::kWait, {}, Precision::kFp8, p.status().message()};
  }
  d.precision = p->precision;
  d.precision_source = p->source;
  d.reason = StrCat("placed on ", DescribeGpus(c, d.assignment), ": ", p->reason, note);
  return d;
}

JobDecision Waiting(int64_t id, std::string why) {
  return {id, DecisionKind::kWait, {}, Precision::kFp8, std::move(why)};
}

bool FallbackAllowedNow(const ClusterSnapshot& c, const PendingJob& job) {
  const JobSpec& s = job.spec;
  if (s.fallback == Fallback::kBf16) return true;
  return s.fallback == Fallback::kWait && c.now - job.submitted_at >= s.fallback_timeout_s;
}

JobDecision Decide(const ClusterSnapshot& c, const PendingJob& job, const PlacementOptions& o,
                   const Mask* blocked) {
  const JobSpec& s = job.spec;
  const Precision asked = s.requested_precision().precision;
  const ScalingMode scaling = s.config.fp8.mode;
  if (asked != Precision::kFp8) {
    if (auto a = FindGang(c, s, ComputeCapabilities(asked), Occupancy::kFreeOnly, blocked, o)) {
      return Placed(c, job, *a, false);
    }
    return Waiting(job.id, StrCat("waiting for ", GangText(s), " of free GPUs matching the job"));
  }
  const bool block = scaling == ScalingMode::kBlock;
  const CcRange fp8 = ComputeCapabilities(Precision::kFp8, scaling);
  if (auto a = FindGang(c, s, fp8, Occupancy::kFreeOnly, blocked, o)) {
    return Placed(c, job, *a, false, block ? " with block scaling" : "");
  }
  const std::string fp8_needs = PrecisionNeeds(Precision::kFp8, scaling);
  const char* fp8_gpus = block ? "Hopper GPUs (fp8.scaling: block)" : "FP8-capable GPUs";
  const int64_t waited = c.now - job.submitted_at;
  if (FallbackAllowedNow(c, job)) {
    if (auto a = FindGang(c, s, ComputeCapabilities(Precision::kBf16), Occupancy::kFreeOnly,
                          blocked, o)) {
      return Placed(c, job, *a, true,
                    s.fallback == Fallback::kWait ? StrCat(" after waiting ", waited, "s") : "");
    }
    return Waiting(job.id, StrCat("waiting for ", GangText(s),
                                  " of free GPUs matching the job (fp8, or bf16 per fallback)"));
  }
  if (s.fallback == Fallback::kWait) {
    return Waiting(job.id, StrCat("waiting for ", GangText(s), " of free ", fp8_gpus, "; ",
                                  "falls back to bf16 after ", s.fallback_timeout_s, "s (waited ",
                                  waited, "s)"));
  }
  // Fallback fail: "could ever" is judged against the nodes that are up now, occupancy ignored.
  // A job that fits them only has to wait for running jobs to end; one that does not would wait
  // for hardware that may never come, so it fails now with the reason rather than pend forever.
  if (!FindGang(c, s, fp8, Occupancy::kIgnore, nullptr, o)) {
    return {job.id,
            DecisionKind::kFail,
            {},
            Precision::kFp8,
            StrCat("no FP8-capable placement exists: ", fp8_needs, " and the cluster has no ",
                   GangText(s), " of such GPUs matching the job; fallback policy is fail")};
  }
  return Waiting(job.id, StrCat("waiting for ", GangText(s), " of free ", fp8_gpus,
                                " (fallback policy is fail)"));
}

// The gang the blocked job would take with occupancy ignored, in the best precision it may use now.
std::optional<std::vector<NodeAssignment>> Reserve(const ClusterSnapshot& c, const PendingJob& job,
                                                   const PlacementOptions& o) {
  const JobSpec& s = job.spec;
  const Precision asked = s.requested_precision().precision;
  std::vector<CcRange> ccs = {ComputeCapabilities(asked, s.config.fp8.mode)};
  if (asked == Precision::kFp8 && FallbackAllowedNow(c, job)) {
    ccs.push_back(ComputeCapabilities(Precision::kBf16));
  }
  for (const CcRange& cc : ccs) {
    if (auto a = FindGang(c, s, cc, Occupancy::kIgnore, nullptr, o)) return a;
  }
  return std::nullopt;
}

ClusterSnapshot Normalized(const ClusterSnapshot& c) {
  ClusterSnapshot out = c;
  for (auto& n : out.nodes) n.gpu_job.resize(n.gpus.size(), kNoJob);
  return out;
}

}  // namespace

const char* DecisionKindName(DecisionKind k) {
  switch (k) {
    case DecisionKind::kPlace:
      return "place";
    case DecisionKind::kWait:
      return "wait";
    case DecisionKind::kFail:
      return "fail";
  }
  return "?";
}

void SortQueue(std::vector<PendingJob>* queue) {
  std::stable_sort(queue->begin(), queue->end(), [](const PendingJob& a, const PendingJob& b) {
    return std::make_tuple(-static_cast<int64_t>(a.spec.priority), a.submitted_at, a.id) <
           std::make_tuple(-static_cast<int64_t>(b.spec.priority), b.submitted_at, b.id);
  });
}

std::string DescribeGpus(const ClusterSnapshot& c, const std::vector<NodeAssignment>& a) {
  std::map<std::string, int> counts;
  for (const auto& na : a) {
    const NodeInfo* node = nullptr;
    for (const auto& n : c.nodes) {
      if (n.id == na.node_id) node = &n;
    }
    for (int g : na.gpus) {
      const bool known = node != nullptr && g >= 0 && static_cast<size_t>(g) < node->gpus.size();
      ++counts[known ? node->gpus[g].name : "?"];
    }
  }
  std::string out;
  for (const auto& [name, n] : counts) out += StrCat(out.empty() ? "" : " + ", n, " x ", name);
  return out;
}

Status CheckFeasible(const JobSpec& spec, const std::vector<NodeInfo>& nodes) {
  if (nodes.empty()) return Status::Ok();  // nothing registered yet: nothing to judge against
  // Every node as if up, idle and healthy: what the cluster could ever offer.
  ClusterSnapshot all{nodes, 0};
  for (NodeInfo& n : all.nodes) {
    n.state = NodeState::kReady;
    n.last_heartbeat = 0;
    for (GpuInfo& g : n.gpus) g.healthy = true;
    n.gpu_job.assign(n.gpus.size(), kNoJob);
  }
  const Precision asked = spec.requested_precision().precision;
  // The widest range the job may run in: its own, or bf16 when it may fall back.
  const CcRange range = asked == Precision::kFp8 && spec.fallback != Fallback::kFail
                            ? ComputeCapabilities(Precision::kBf16)
                            : ComputeCapabilities(asked, spec.config.fp8.mode);
  auto fits = [&](const JobSpec& s, CcRange cc) {
    return FindGang(all, s, cc, Occupancy::kIgnore, nullptr, {}).has_value();
  };
  if (fits(spec, range)) return Status::Ok();
  // Which constraint makes it impossible: add them back one at a time.
  std::map<std::string, int> types;
  size_t most = 0;
  std::string most_at;
  for (const NodeInfo& n : all.nodes) {
    for (const GpuInfo& g : n.gpus) ++types[g.name];
    if (n.gpus.size() > most) most = n.gpus.size(), most_at = n.id;
  }
  std::string have;
  for (const auto& [name, count] : types)
    have += StrCat(have.empty() ? "" : ", ", count, " x ", name);
  const std::string cluster =
      StrCat(" (the ", nodes.size(), " registered node(s) have ", have, ")");
  if (spec.nodes > static_cast<int>(nodes.size())) {
    return Status::InvalidArgument(StrCat("nodes = ", spec.nodes, ": only ", nodes.size(),
                                          " node(s) are registered", cluster));
  }
  JobSpec s = spec;
  s.gpu_types.clear();
  s.min_memory_gib = 0;
  s.min_compute_capability = 0;
  if (!fits(s, CcRange{})) {
    return Status::InvalidArgument(
        StrCat("nodes = ", spec.nodes, " x gpus_per_node = ", spec.gpus_per_node, ": no ",
               spec.nodes, " registered node(s) have ", spec.gpus_per_node,
               spec.allow_mixed_gpu_types ? "" : " GPUs (or CPU slots) of one type",
               " each; the most on a node is ", most, " (", most_at, ")", cluster));
  }
  s.gpu_types = spec.gpu_types;
  if (!fits(s, CcRange{})) {
    std::string wanted;
    for (const auto& t : spec.gpu_types) wanted += StrCat(wanted.empty() ? "" : ", ", t);
    return Status::InvalidArgument(StrCat("gpu_types = [", wanted, "]: no gang of ", spec.nodes,
                                          " x ", spec.gpus_per_node, " such GPUs exists", cluster));
  }
  s.min_memory_gib = spec.min_memory_gib;
  if (!fits(s, CcRange{})) {
    return Status::InvalidArgument(StrCat("min_memory_gib = ", spec.min_memory_gib, ": no gang of ",
                                          spec.nodes, " x ", spec.gpus_per_node,
                                          " GPUs with that much memory exists", cluster));
  }
  s.min_compute_capability = spec.min_compute_capability;
  if (!fits(s, CcRange{})) {
    return Status::InvalidArgument(StrCat(
        "min_compute_capability = ", FormatComputeCapability(spec.min_compute_capability),
        ": no gang of ", spec.nodes, " x ", spec.gpus_per_node, " such GPUs exists", cluster));
  }
  const std::string rule = asked == Precision::kFp8 && spec.fallback != Fallback::kFail
                               ? StrCat(PrecisionNeeds(Precision::kBf16), " (fp8 falls back to it)")
                               : PrecisionNeeds(asked, spec.config.fp8.mode);
  return Status::InvalidArgument(
      StrCat("precision ", PrecisionName(asked),
             asked == Precision::kFp8 ? StrCat(" with fallback ", FallbackName(spec.fallback)) : "",
             ": ", rule, " and no gang of ", spec.nodes, " x ", spec.gpus_per_node,
             " such GPUs exists", cluster));
}

JobDecision DecideOne(const ClusterSnapshot& cluster, const PendingJob& job,
                      const PlacementOptions& options) {
  return Decide(Normalized(cluster), job, options, nullptr);
}

PlacementDecision Place(const ClusterSnapshot& cluster, std::vector<PendingJob> queue,
                        const PlacementOptions& options) {
  SortQueue(&queue);
  ClusterSnapshot work = Normalized(cluster);
  std::map<std::string, size_t> node_index;
  Mask blocked(work.nodes.size());
  for (size_t i = 0; i < work.nodes.size(); ++i) {
    node_index[work.nodes[i].id] = i;
    blocked[i].assign(work.nodes[i].gpus.size(), 0);
  }
  PlacementDecision out;
  for (const PendingJob& job : queue) {
    JobDecision d = Decide(work, job, options, &blocked);
    if (d.kind == DecisionKind::kPlace) {
      for (const auto& a : d.assignment) {
        for (int g : a.gpus) work.nodes[node_index[a.node_id]].gpu_job[g] = job.id;
      }
    } else if (d.kind == DecisionKind::kWait && !out.reserved_job_id) {
      if (auto r = Reserve(work, job, options)) {
        for (const auto& a : *r) {
          for (int g : a.gpus) blocked[node_index[a.node_id]][g] = 1;
        }
        out.reserved_job_id = job.id;
        out.reservation = *r;
        d.reason += StrCat("; holds a reservation on ", DescribeGpus(work, *r));
      }
    }
    out.jobs.push_back(std::move(d));
  }
  return out;
}

}  // namespace fp8rt::sched
