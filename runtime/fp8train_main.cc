// fp8train: trains a GPT model on one GPU or the CPU. See configs/README.md.
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>

#include "comm/bootstrap.h"
#include "comm/world.h"
#include "common/input_paths.h"
#include "common/version.h"
#include "runtime/generate.h"
#include "runtime/huggingface.h"
#include "runtime/memory_plan.h"
#include "runtime/trainer.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  using namespace fp8rt;
  const auto started = std::chrono::steady_clock::now();
  CLI::App app{"fp8train: FP8 GPT training shard (one process per GPU, or the CPU)"};
  app.set_version_flag("--version", VersionLine("fp8train"));
  std::string config_path, checkpoint_dir, precision, device = "auto", metrics, inspect;
  std::string attention = "auto";
  int64_t steps = -1, inspect_step = -1;
  bool resume = false, reset_history = false, profile_ops = false, memory_report = false;
  app.add_option("--config", config_path, "run configuration (YAML)");
  app.add_option("--steps", steps,
                 "stop after this global step (the LR schedule still follows "
                 "train.total_steps)");
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "write checkpoints here (every train.checkpoint_every steps and at exit)");
  app.add_flag("--resume", resume, "continue from the latest checkpoint in --checkpoint-dir");
  int attempt = -1;
  app.add_option("--attempt", attempt,
                 "which start of a job this is (set by fp8d): checkpoints are refused once a "
                 "later attempt has started (the directory's ATTEMPT fence)")
      ->check(CLI::Range(0, 1'000'000'000));
  InputRules inputs;
  app.add_option("--data-root", inputs.roots,
                 "confine the config's inputs (data.train, data.val, train.init_from) to these "
                 "directories after symlinks (repeatable; set by fp8d)");
  app.add_option("--private-dir", inputs.private_paths,
                 "with --data-root: never read inputs under these (fp8d's state; repeatable)");
  app.add_flag("--reset-fp8-history", reset_history,
               "on resume, start FP8 amax histories and scales afresh (recalibrate)");
  app.add_option("--precision", precision, "override the config: fp8, bf16 or fp32")
      ->check(CLI::IsMember({"fp8", "bf16", "fp32"}));
  app.add_option("--device", device, "cpu, cuda:K, or auto (cuda:0 if present, else cpu)");
  app.add_option("--metrics", metrics, "JSON lines per step to FILE, or - for stdout");
  app.add_option("--attention", attention,
                 "CUDA attention kernels: auto (cuDNN where it loads, else fp8rt flash), cudnn, "
                 "cudnn-nondeterministic (a faster backward whose bits vary from run to run: "
                 "resume is then not bit-exact), flash or gemm")
      ->check(CLI::IsMember({"auto", "cudnn", "cudnn-nondeterministic", "flash", "gemm"}));
  app.add_flag("--profile-ops", profile_ops,
               "time every op of each step (after the first two) and print a table at exit");
  app.add_flag("--memory-report", memory_report,
               "after the first step, print the model's memory by what it holds (master weights, "
               "gradients, optimizer, activations, FP8 copies, workspaces) and the device's use");
  int plan_ranks = 0;
  app.add_option("--plan", plan_ranks,
                 "RANKS: with --config, print what each of RANKS ranks will allocate (per "
                 "--memory-report category) without running or a GPU, and exit; --device cpu "
                 "plans a CPU run")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--inspect-scales", inspect,
                 "print the FP8 scale state checkpointed in DIR and exit");
  std::vector<std::string> export_hf;
  std::string export_dtype = "fp32";
  app.add_option("--export-hf", export_hf,
                 "CHECKPOINT_DIR OUT_DIR: write the checkpoint as Hugging Face GPT-2 "
                 "(OUT_DIR/model.safetensors + config.json, for GPT2LMHeadModel) and exit")
      ->expected(2);
  app.add_option("--export-dtype", export_dtype, "with --export-hf: fp32 (default) or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  std::string generate, prompt;
  SampleOptions sample;
  app.add_option("--generate", generate,
                 "CHECKPOINT_DIR: continue --prompt with the checkpoint's model (CPU, KV cache), "
                 "print the text and exit");
  app.add_option("--prompt", prompt,
                 "with --generate: the text to continue (default: the start of a document)");
  std::string tokenizer;
  app.add_option("--tokenizer", tokenizer,
                 "with --generate: a SentencePiece .model or fp8data.json to encode the prompt "
                 "and decode the text with (default: bytes)");
  app.add_option("--max-new-tokens", sample.max_new_tokens, "with --generate: default 200")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", sample.temperature,
                 "with --generate: softmax temperature, 0 = greedy (default 1.0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", sample.top_k,
                 "with --generate: sample among the k most likely "
                 "(default 0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", sample.seed, "with --generate: the sampling seed (default 1337)");
  app.add_option("--step", inspect_step,
                 "with --inspect-scales, --export-hf or --generate: the step (default: latest)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  if (!inspect.empty()) {
    Status s = InspectScales(inspect, inspect_step, std::cout);
    if (!s.ok()) {
      std::cerr << "fp8train: " << s.ToString() << "\n";
      return kExitUsage;
    }
    return kExitOk;
  }
  if (!generate.empty()) {
    Tokenizer tok = Tokenizer::Bytes();
    if (!tokenizer.empty()) {
      auto t = Tokenizer::Load(tokenizer);
      if (!t.ok()) {
        std::cerr << "fp8train: " << t.status().ToString() << "\n";
        return kExitUsage;
      }
      tok = std::move(t).value();
    }
    const Status s = GenerateFromCheckpoint(generate, inspect_step, prompt, sample, tok, std::cout);
    if (!s.ok()) {
      std::cerr << "fp8train: " << s.ToString() << "\n";
      return kExitUsage;
    }
    return kExitOk;
  }
  if (!export_hf.empty()) {
    const Status s = ExportHuggingFace(export_hf[0], inspect_step, export_hf[1],
                                       export_dtype == "bf16" ? "BF16" : "F32");
    if (!s.ok()) {
      std::cerr << "fp8train: " << s.ToString() << "\n";
      return kExitUsage;
    }
    std::cout << "fp8train: wrote " << export_hf[1] << "/model.safetensors and config.json ("
              << export_dtype << ")\n";
    return kExitOk;
  }
  if (config_path.empty()) {
    std::cerr << "fp8train: --config FILE is required\n" << app.help();
    return kExitUsage;
  }
  auto cfg = LoadRunConfig(config_path);
  if (!cfg.ok()) {
    std::cerr << "fp8train: " << cfg.status().ToString() << "\n";
    return kExitUsage;
  }
  if (plan_ranks > 0) {
    const Precision p = precision.empty() ? cfg->precision : *ParsePrecision(precision);
    auto plan = PlanMemory(*cfg, p, plan_ranks, device.rfind("cpu", 0) != 0);
    if (!plan.ok()) {
      std::cerr << "fp8train: " << plan.status().ToString() << "\n";
      return kExitUsage;
    }
    std::cout << FormatMemoryPlan(*plan, *cfg);
    return kExitOk;
  }
  if (!inputs.roots.empty()) {
    // Under fp8d: the inputs are checked again where they are opened (common/input_paths.h),
    // and opened by their real paths: data entries become the shards they name, each checked.
    if (const Status s = ConfineInputs(&*cfg, inputs, /*expand=*/true); !s.ok()) {
      std::cerr << "fp8train: " << s.ToString() << "\n";
      return kExitUsage;
    }
  }
  // Before the rendezvous: a SIGTERM/SIGUSR1 (a preemption, Slurm's warning) that comes while the
  // ranks connect stops the run after its first step with a checkpoint, instead of killing it.
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGUSR1, OnSignal);
  TrainOptions o;
  o.started = started;
  o.config = *cfg;
  o.inputs_confined = !inputs.roots.empty();
  o.stop_step = steps;
  o.checkpoint_dir = checkpoint_dir;
  o.attempt = attempt;
  o.resume = resume;
  o.reset_fp8_history = reset_history;
  o.profile_ops = profile_ops;
  o.memory_report = memory_report;
  o.attention = attention;
  if (!precision.empty()) o.precision = *ParsePrecision(precision);
  // Who this rank is (mpirun, srun, the FP8RT_* environment, or alone): comm/README.md.
  auto launch = comm::DetectLaunch();
  if (!launch.ok()) {
    std::cerr << "fp8train: " << launch.status().ToString() << "\n";
    return kExitUsage;
  }
  const std::string who = launch->world_size > 1 ? StrCat("fp8train: rank ", launch->rank, ": ")
                                                 : std::string("fp8train: ");
  if (device == "auto") {
    // One GPU per rank: the local rank picks it (CUDA_VISIBLE_DEVICES applies first), unless the
    // rank sees exactly one GPU (a launcher that gives each task its own, e.g. srun
    // --gpus-per-task 1): that one. The CPU only where this host has no GPU at all: a rank whose
    // GPU is missing among several is a launch error.
    const std::string gpu = StrCat("cuda:", launch->local_rank);
    auto mine = QueryDevice(gpu);
    const bool any = mine.ok() || QueryDevice("cuda:0").ok();
    const bool only_one = !mine.ok() && any && !QueryDevice("cuda:1").ok();
    device = mine.ok() ? gpu : only_one ? "cuda:0" : "cpu";
    if (!mine.ok() && any && !only_one) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      std::cerr << who << "local rank " << launch->local_rank << " has no GPU of its own ("
                << mine.status().message()
                << "; CUDA_VISIBLE_DEVICES=" << (visible != nullptr ? visible : "(unset)")
                << "): give each rank on a host its own local rank (FP8RT_LOCAL_RANK) and GPU, "
                   "or name one with --device\n";
      return kExitUsage;
    }
  }
  auto dev = QueryDevice(device);
  if (!dev.ok()) {
    std::cerr << who << dev.status().ToString() << "\n";
    return kExitUsage;
  }
  std::unique_ptr<comm::World> world;
  if (launch->world_size > 1) {
    Status used = UseDevice(*dev);
    if (!used.ok()) {
      std::cerr << who << used.ToString() << "\n";
      return kExitError;
    }
    comm::WorldOptions wo;
    wo.gpu = !dev->is_cpu;
    wo.timeout = std::chrono::seconds(cfg->parallel.collective_timeout_s);
    wo.cpu_backend = cfg->parallel.cpu_backend;
    auto w = comm::World::Init(*launch, wo);
    if (!w.ok()) {
      std::cerr << who << w.status().ToString() << "\n";
      return w.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitPeerFailure;
    }
    world = std::move(*w);
    o.world = world.get();
  }
  std::ofstream metrics_file;
  if (metrics == "-") {
    o.metrics = &std::cout;
  } else if (!metrics.empty()) {
    metrics_file.open(metrics, std::ios::app);
    if (!metrics_file) {
      std::cerr << "fp8train: cannot open --metrics file '" << metrics << "'\n";
      return kExitUsage;
    }
    o.metrics = &metrics_file;
  }
  o.progress = &std::cerr;
  o.stop_flag = &g_stop;
  if (launch->rank == 0) {
    std::cerr << "fp8train: " << o.config.name << " on " << dev->name << ", "
              << o.config.model.num_params() << " parameters\n";
  }

  auto r = RunTraining(o, *dev);
  if (world != nullptr && r.ok()) {
    // Ends the job in order: after this, ranks leaving is not a failure.
    Status fin = world->Finish();
    if (!fin.ok()) std::cerr << who << fin.ToString() << "\n";
  }
  if (!r.ok()) {
    std::cerr << who << r.status().ToString() << "\n";
    const auto code = r.status().code();
    if (code == StatusCode::kNonFinite) return kExitNonFinite;
    if (code == StatusCode::kCheckpointFailed) return kExitCheckpointFailed;
    return code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
                   code == StatusCode::kCorruption || code == StatusCode::kNotFound
               ? kExitUsage
               : kExitError;
  }
  if (profile_ops) {
    double total = 0;
    for (const OpTime& t : r->op_profile) total += t.ms_per_step;
    std::fprintf(stderr, "%-28s %12s %8s %10s\n", "op (per step)", "ms", "%", "calls");
    for (const OpTime& t : r->op_profile) {
      std::fprintf(stderr, "%-28s %12.3f %7.1f%% %10.0f\n", t.op.c_str(), t.ms_per_step,
                   total > 0 ? 100.0 * t.ms_per_step / total : 0.0, t.calls_per_step);
    }
    std::fprintf(stderr, "%-28s %12.3f\n", "total", total);
  }
  if (r->stopped_by_signal) {
    std::cerr << "fp8train: stopped by signal after step " << r->last_step
              << (checkpoint_dir.empty() ? "" : " (checkpoint written)") << "\n";
    return kExitPreempted;
  }
  return kExitOk;
}
