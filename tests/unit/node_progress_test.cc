// The node daemon's view of training health: the metrics file read as fp8train appends to it
// (a real run's file, and half-written, junk and NaN lines), and the hang detector's judgement
// against the job's own pace.
#include "node/progress.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/text.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::node {
namespace {

using namespace std::chrono_literals;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(MetricsTail, ReadsCompleteLinesAsTheyArriveAndSkipsTheRest) {
  test::TempDir d;
  const std::string path = d.str() + "/metrics.jsonl";
  MetricsTail tail(path);
  Progress p;
  EXPECT_FALSE(tail.Poll(&p)) << "no file yet is no progress";
  {
    std::ofstream out(path);
    out << R"({"step":1,"loss":5.5,"tokens_per_s":1000.5,"mfu":null})" << "\n"
        << R"({"step":1,"fp8_telemetry":[]})" << "\n"
        << "not json\n"
        << R"({"step":2,"loss":5.25,"tokens_per_s":2000,"mf)";  // half written
  }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.loss, 5.5);
  EXPECT_EQ(p.tokens_per_s, 1000.5);
  EXPECT_EQ(p.mfu, -1);
  EXPECT_EQ(p.lines, 1);
  { std::ofstream(path, std::ios::app) << R"(u":0.4})" << "\n"; }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.step, 2);
  EXPECT_EQ(p.mfu, 0.4);
  EXPECT_FALSE(tail.Poll(&p)) << "nothing new";
  EXPECT_FALSE(p.loss_not_finite);
  // Checkpoint saves are timed: the longest is kept (no new step, so Poll says false).
  EXPECT_EQ(p.checkpoint_s, -1);
  { std::ofstream(path, std::ios::app) << R"({"step":2,"checkpoint_s":0.75})" << "\n" << R"({"step":2,"checkpoint_s":0.5})" << "\n"; }
  EXPECT_FALSE(tail.Poll(&p));
  EXPECT_EQ(p.checkpoint_s, 0.75);
  EXPECT_EQ(p.step, 2);
  { std::ofstream(path, std::ios::app) << R"({"step":3,"loss":null,"tokens_per_s":1})" << "\n"; }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_TRUE(p.loss_not_finite) << "a NaN or infinite loss is JSON null";
  { std::ofstream(path, std::ios::trunc) << R"({"step":1,"loss":9})" << "\n"; }
  EXPECT_TRUE(tail.Poll(&p)) << "a rewritten file is read from its start";
  EXPECT_EQ(p.step, 1);
}

// fp8train's held-out evaluations ({"step","val_loss","val_tokens","eval_s"}, every eval_every
// steps and after the last) are kept apart from the step lines: they move neither step nor lines.
TEST(MetricsTail, KeepsTheLatestValidationLossApartFromTheSteps) {
  test::TempDir d;
  const std::string path = d.str() + "/metrics.jsonl";
  MetricsTail tail(path);
  Progress p;
  {
    std::ofstream out(path);
    out << R"({"step":10,"loss":5.5,"tokens_per_s":1000})" << "\n"
        << R"({"step":20,"loss":5.25,"tokens_per_s":1000})" << "\n";
  }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.val_loss, -1) << "no evaluation yet";
  EXPECT_EQ(p.val_step, -1);
  // Evaluated at step 25 while the metrics log every 10 steps.
  {
    std::ofstream(path, std::ios::app)
        << R"({"step":25,"val_loss":5.375,"val_tokens":4096,"eval_s":0.5})" << "\n";
  }
  EXPECT_FALSE(tail.Poll(&p)) << "a val_loss line is not a new step";
  EXPECT_EQ(p.step, 20);
  EXPECT_EQ(p.lines, 2);
  EXPECT_EQ(p.loss, 5.25) << "the training loss is not the held-out one";
  EXPECT_EQ(p.val_loss, 5.375);
  EXPECT_EQ(p.val_step, 25);
  {
    std::ofstream(path, std::ios::app)
        << R"({"step":30,"loss":5,"tokens_per_s":1000})" << "\n"
        << R"({"step":30,"val_loss":5.125,"val_tokens":4096,"eval_s":0.5})" << "\n"
        << R"({"step":30,"checkpoint_s":0.25})" << "\n";
  }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.step, 30);
  EXPECT_EQ(p.lines, 3);
  EXPECT_EQ(p.loss, 5);
  EXPECT_EQ(p.val_loss, 5.125) << "the latest evaluation";
  EXPECT_EQ(p.val_step, 30);
  EXPECT_EQ(p.checkpoint_s, 0.25);
  EXPECT_FALSE(p.loss_not_finite);
}

// A checkpoint that failed and was gone on from (train.on_checkpoint_error: continue) is kept, in
// the trainer's words, until a later one commits.
TEST(MetricsTail, KeepsAFailedCheckpointUntilALaterOneCommits) {
  test::TempDir d;
  const std::string path = d.str() + "/metrics.jsonl";
  MetricsTail tail(path);
  Progress p;
  {
    std::ofstream(path) << R"({"step":8,"loss":5,"tokens_per_s":1000})" << "\n"
                        << R"({"step":4,"checkpoint_error":"writing 'x' failed: No space left on device"})"
                        << "\n";
  }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.step, 8) << "the error line is not a step";
  EXPECT_EQ(p.checkpoint_error,
            "the checkpoint of step 4 failed: writing 'x' failed: No space left on device");
  EXPECT_EQ(p.checkpoint_disk_bytes, -1);
  {
    std::ofstream(path, std::ios::app)
        << R"({"step":8,"checkpoint_s":2.5,"checkpoint_disk_bytes":47368000000})" << "\n";
  }
  tail.Poll(&p);
  EXPECT_EQ(p.checkpoint_error, "") << "a committed checkpoint clears it";
  EXPECT_EQ(p.checkpoint_s, 2.5);
  EXPECT_EQ(p.checkpoint_disk_bytes, 47368000000);
  // What is not a byte count is not taken for one.
  {
    std::ofstream(path, std::ios::app)
        << R"({"step":9,"checkpoint_s":1,"checkpoint_disk_bytes":-5})" << "\n"
        << R"({"step":10,"checkpoint_s":1,"checkpoint_disk_bytes":"many"})" << "\n"
        << R"({"step":11,"checkpoint_s":1,"checkpoint_disk_bytes":1e300})" << "\n";
  }
  tail.Poll(&p);
  EXPECT_EQ(p.checkpoint_disk_bytes, 47368000000);
}

// A detector with `k` and `floor`; kT0 is a time far from the clock's zero.
HangDetector Detector(double k, std::chrono::milliseconds floor) {
  HangOptions o;
  o.k = k, o.floor = floor;
  return HangDetector(o);
}
const HangDetector::Clock::time_point kT0 = HangDetector::Clock::time_point{} + 1000s;

TEST(HangDetector, JudgesTheSilenceAgainstTheJobsOwnPace) {
  HangDetector h = Detector(10, 2000ms);
  const auto t0 = kT0;
  EXPECT_FALSE(h.Hung(t0 + 3600s)) << "nothing is judged before the first step";
  h.Observe(1, t0);
  EXPECT_EQ(h.Limit(), 2000ms) << "the floor until there is a pace";
  EXPECT_FALSE(h.Hung(t0 + 1900ms));
  EXPECT_TRUE(h.Hung(t0 + 2100ms));
  // One step per second: k x 1 s = 10 s beats the floor.
  for (int s = 2; s <= 6; ++s) h.Observe(s, t0 + std::chrono::seconds(s - 1));
  EXPECT_EQ(h.Limit(), 10000ms);
  const auto last = t0 + 5s;
  EXPECT_FALSE(h.Hung(last + 9s));
  const auto why = h.Hung(last + 11s);
  ASSERT_TRUE(why.has_value());
  EXPECT_TRUE(Has(*why, "no progress since step 6 for 11 s")) << *why;
  EXPECT_TRUE(Has(*why, "the limit is 10 s")) << *why;
  // A step counter that goes back (a restart) or repeats changes nothing.
  h.Observe(3, last + 1s);
  EXPECT_TRUE(h.Hung(last + 11s));
}

TEST(HangDetector, TheStepAfterACheckpointMayTakeTheSaveTimeBesides) {
  HangDetector h = Detector(4, 1000ms);
  const auto t0 = kT0;
  for (int s = 1; s <= 5; ++s) h.Observe(s, t0 + std::chrono::seconds(s), s == 5);
  h.set_save_time(30s);
  EXPECT_EQ(h.Limit(), 4000ms);
  EXPECT_FALSE(h.Hung(t0 + 5s + 30s)) << "4 s + the 30 s save time";
  const auto why = h.Hung(t0 + 5s + 35s);
  ASSERT_TRUE(why.has_value());
  EXPECT_TRUE(Has(*why, "save time")) << *why;
  // The slow step after the save does not count as the pace.
  h.Observe(6, t0 + 5s + 20s);
  EXPECT_EQ(h.Limit(), 4000ms);
}

TEST(HangDetector, MetricsLoggedEveryNStepsAllowNStepTimesBetweenLines) {
  HangDetector h = Detector(4, 1000ms);
  const auto t0 = kT0;
  // log_every 20 at 0.5 s a step: a line every 10 s.
  for (int s = 20; s <= 100; s += 20) h.Observe(s, t0 + std::chrono::seconds(s / 2));
  EXPECT_DOUBLE_EQ(h.MedianStepSeconds(), 0.5);
  EXPECT_EQ(h.Limit(), 40000ms) << "k x 0.5 s x 20 steps between lines";
  EXPECT_FALSE(h.Hung(t0 + 50s + 39s));
  EXPECT_TRUE(h.Hung(t0 + 50s + 41s));
}

// Between steps the trainer is busy (starting, evaluating, checkpointing) and says so as it makes
// progress: the silence since its last report is judged against the floor, however long the
// phase; the interval that held it is not a step time.
TEST(HangDetector, ABusyTrainerIsJudgedByItsLastReportOfProgress) {
  HangDetector h = Detector(10, 2000ms);
  const auto t0 = kT0;
  EXPECT_FALSE(h.Hung(t0 + 3600s)) << "nothing from the trainer yet: not judged";
  // Start-up: reports of progress every second for a minute, then silence.
  for (int i = 0; i <= 60; ++i) h.Busy("starting", t0 + std::chrono::seconds(i));
  EXPECT_FALSE(h.Hung(t0 + 61s));
  const auto why = h.Hung(t0 + 60s + 2100ms);
  ASSERT_TRUE(why.has_value());
  EXPECT_TRUE(Has(*why, "no progress since step 0 while starting for 2.1 s")) << *why;
  // Steps at 0.1 s; then a 30 s evaluation that reports as it goes.
  const auto s0 = t0 + 70s;
  for (int s = 1; s <= 20; ++s) h.Observe(s, s0 + std::chrono::milliseconds(100 * s));
  EXPECT_EQ(h.Limit(), 2000ms);
  const auto e0 = s0 + 2s;
  for (int i = 0; i <= 30; ++i) h.Busy("evaluating", e0 + std::chrono::seconds(i));
  EXPECT_FALSE(h.Hung(e0 + 31s)) << "30 s busy, the last report 1 s ago";
  h.Observe(21, e0 + 31s);
  EXPECT_DOUBLE_EQ(h.MedianStepSeconds(), 0.1) << "the evaluation is not a step time";
  EXPECT_FALSE(h.Hung(e0 + 31s + 1900ms));
  EXPECT_TRUE(h.Hung(e0 + 31s + 2100ms)) << "back to steps: the floor since step 21";
  // A checkpoint it waits for that stops making progress (a disk that hangs, a stopped peer).
  h.Busy("checkpointing", e0 + 32s);
  const auto stuck = h.Hung(e0 + 34500ms);
  ASSERT_TRUE(stuck.has_value());
  EXPECT_TRUE(Has(*stuck, "no progress since step 21 while checkpointing")) << *stuck;
}

// Busy lines are read apart from step lines: the phase, until a step line ends it; what is not
// printable in one is not passed on.
TEST(MetricsTail, ReadsBusyLinesApartFromSteps) {
  test::TempDir d;
  const std::string path = d.str() + "/metrics.jsonl";
  MetricsTail tail(path);
  Progress p;
  { std::ofstream(path) << R"({"busy":"starting","step":0})" << "\n"; }
  EXPECT_FALSE(tail.Poll(&p)) << "not a step";
  EXPECT_EQ(p.busy, "starting");
  EXPECT_EQ(p.busy_lines, 1);
  EXPECT_EQ(p.step, -1);
  {
    std::ofstream(path, std::ios::app) << R"({"step":1,"loss":5,"tokens_per_s":10})" << "\n"
                                       << R"({"busy":"evaluating\u001b[2J","step":1})" << "\n";
  }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.busy_lines, 2);
  EXPECT_FALSE(HasControlChars(p.busy)) << p.busy;
  EXPECT_EQ(p.busy.rfind("evaluating", 0), 0u) << p.busy;
  { std::ofstream(path, std::ios::app) << R"({"step":2,"loss":4.9,"tokens_per_s":10})" << "\n"; }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.busy, "") << "a step line ends the phase";
  { std::ofstream(path, std::ios::app) << R"({"busy":")" << std::string(500, 'x') << R"("})" << "\n"; }
  tail.Poll(&p);
  EXPECT_LE(p.busy.size(), 64u);
}

TEST(MetricsTail, ReadsTheStartupLineOfTheFirstStep) {
  test::TempDir d;
  const std::string path = d.str() + "/metrics.jsonl";
  MetricsTail tail(path);
  Progress p;
  {
    std::ofstream(path) << R"({"step":121,"loss":3,"tokens_per_s":10})"
                        << "\n"
                        << R"({"startup":{"init_s":2.5,"load_s":0.75,"first_step_s":0.5},)"
                        << R"("step":121,"at":1790000000.25})"
                        << "\n";
  }
  EXPECT_TRUE(tail.Poll(&p));
  EXPECT_EQ(p.step, 121);
  EXPECT_EQ(p.lines, 1) << "the startup line is not a step";
  EXPECT_EQ(p.startup.step, 121);
  EXPECT_DOUBLE_EQ(p.startup.init_s, 2.5);
  EXPECT_DOUBLE_EQ(p.startup.load_s, 0.75);
  EXPECT_DOUBLE_EQ(p.startup.first_step_s, 0.5);
  EXPECT_DOUBLE_EQ(p.startup.at, 1790000000.25);
  // Lines without what the scheduler needs are not a startup.
  {
    std::ofstream(path, std::ios::app)
        << R"({"startup":{"load_s":-1,"first_step_s":0.5},"step":130,"at":1790000001})"
        << "\n"
        << R"({"startup":{"load_s":1,"first_step_s":0.5},"step":131})"
        << "\n";
  }
  tail.Poll(&p);
  EXPECT_EQ(p.startup.step, 121);
}

TEST(HangDetector, KnowsWhenTheTrainerLastShowedProgress) {
  HangDetector h;
  const auto t0 = HangDetector::Clock::time_point{} + 100s;
  EXPECT_FALSE(h.LastProgress().has_value());
  h.Busy("starting", t0);
  EXPECT_EQ(h.LastProgress(), t0);
  h.Observe(1, t0 + 5s);
  EXPECT_EQ(h.LastProgress(), t0 + 5s);
  h.Busy("evaluating", t0 + 9s);
  EXPECT_EQ(h.LastProgress(), t0 + 9s);
}

// The stop grace follows the job's measured save time: --stop-grace until a save was measured
// and while it covers 1.5 x the save + 5 s; that, beyond it.
TEST(StopGrace, FollowsTheMeasuredSaveTimeAboveTheFloor) {
  EXPECT_EQ(StopGrace(60s, -1), 60s) << "no save measured yet";
  EXPECT_EQ(StopGrace(60s, 8.0), 60s) << "1.5 x 8 + 5 = 17 s: the floor covers it";
  EXPECT_EQ(StopGrace(60s, 81.0), 126500ms) << "1.5 x 81 + 5";
  EXPECT_EQ(StopGrace(20s, 10.0), 20s);
  EXPECT_EQ(StopGrace(0s, 2.0), 8s);
}

}  // namespace
}  // namespace fp8rt::node
