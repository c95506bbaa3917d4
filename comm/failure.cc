// The watchdog and the one way a rank fails: message, abort hooks, exit.
#include "comm/failure.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include "common/status.h"

namespace fp8rt::comm {

FailureMonitor::FailureMonitor(Options options) : options_(std::move(options)) {
  watchdog_ = std::thread([this] { Watch(); });
}

FailureMonitor::~FailureMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

FailureMonitor::Scope::Scope(FailureMonitor* m, std::string what) : m_(m) {
  if (m_ == nullptr) return;
  std::lock_guard<std::mutex> lock(m_->mu_);
  prev_ = std::move(m_->current_);
  m_->current_ = std::move(what);
  if (m_->depth_++ == 0) m_->since_ = std::chrono::steady_clock::now();
}

FailureMonitor::Scope::~Scope() {
  if (m_ == nullptr) return;
  std::lock_guard<std::mutex> lock(m_->mu_);
  m_->current_ = std::move(prev_);
  --m_->depth_;
}

void FailureMonitor::NoteEnqueued(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  last_enqueued_ = what;
}

void FailureMonitor::AddAbortHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hooks_.push_back(std::move(hook));
}

std::string FailureMonitor::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string d = depth_ > 0 ? StrCat("while in ", current_) : "between collectives";
  if (!last_enqueued_.empty()) d += StrCat(" (last collective enqueued: ", last_enqueued_, ")");
  return d;
}

void FailureMonitor::Fail(const std::string& reason) {
  if (failing_.exchange(true)) {
    // Another thread is already failing the process; it exits.
    for (;;) pause();
  }
  const std::string msg = StrCat(program_invocation_short_name, ": rank ", options_.rank, ": ", reason, "; ", Describe(),
                                 "; exiting with code ", options_.exit_code, "\n");
  // write(2), not stdio: this may run on any thread, with the main thread inside a library.
  ssize_t ignored = ::write(2, msg.data(), msg.size());
  (void)ignored;
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hooks = hooks_;
  }
  // Abort hooks may block (NCCL's abort waits for its kernels): bounded by abort_grace.
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread aborter([hooks, done] {
    for (const auto& h : hooks) h();
    done->store(true);
  });
  aborter.detach();
  const auto deadline = std::chrono::steady_clock::now() + options_.abort_grace;
  while (!done->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::_exit(options_.exit_code);
}

void FailureMonitor::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_ || depth_ == 0) continue;
    const auto waited = std::chrono::steady_clock::now() - since_;
    if (waited < options_.timeout) continue;
    const std::string what = current_;
    lock.unlock();
    Fail(StrCat(what, " did not complete within the collective timeout of ",
                std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count(),
                " s (a peer may be hung or dead)"));
  }
}

}  // namespace fp8rt::comm
