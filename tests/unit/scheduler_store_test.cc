// One JobStore suite run over the in-memory twin and RocksDB (in a temp dir, with reopen), plus
// RocksDB's own crash test: kill -9 right after an acknowledged write loses nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "scheduler/store.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::sched {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

struct StoreKind {
  std::string name;
  // RocksDB in the fixture's temp dir when true. For the memory twin "reopen" keeps the same
  // object: it models a store whose contents outlive the handle, which RocksDB has to show.
  bool persistent;
};

Job MakeJob(int64_t id, const std::string& owner, JobState state) {
  Job j;
  j.id = id;
  j.owner = owner;
  j.spec.name = "job" + std::to_string(id);
  j.spec.config_path = "c.yaml";
  j.spec.config.data.train = {"/data/corpus.txt"};
  j.state = state;
  j.submitted_at = j.updated_at = 100 + id;
  return j;
}

class SchedJobStoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    if (!GetParam().persistent) {
      if (!store_) store_ = NewMemoryJobStore();
      return;
    }
    store_.reset();  // closes the DB before it is opened again
    auto s = OpenRocksDbJobStore(dir_.str() + "/jobs");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  TempDir dir_;
  std::unique_ptr<JobStore> store_;
};

TEST_P(SchedJobStoreTest, PutGetAndEventsInOrder) {
  Job j = MakeJob(1, "alice", JobState::kPending);
  ASSERT_TRUE(
      store_->Put(j, Event{101, 1, JobState::kPending, JobState::kPending, "submitted"}).ok());
  auto ev = Transition(&j, JobState::kScheduled, 110, "placed on 8 x H100: running fp8");
  ASSERT_TRUE(ev.ok());
  j.precision = Precision::kFp8;
  j.placement = {{"n1", {0, 1, 2, 3, 4, 5, 6, 7}}};
  ASSERT_TRUE(store_->Put(j, *ev).ok());
  ASSERT_TRUE(store_->Put(MakeJob(2, "bob", JobState::kPending), std::nullopt).ok());

  auto got = store_->Get(1);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, j);
  auto events = store_->Events(1);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].reason, "submitted");
  EXPECT_EQ((*events)[1], *ev);
  auto none = store_->Events(2);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(SchedJobStoreTest, MissingJobIsNotFound) {
  auto r = store_->Get(42);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("42"), std::string::npos);
}

TEST_P(SchedJobStoreTest, RefusesMismatchedEventAndBadId) {
  Job j = MakeJob(3, "alice", JobState::kPending);
  Event other{1, 4, JobState::kPending, JobState::kCancelled, "x"};
  EXPECT_EQ(store_->Put(j, other).code(), StatusCode::kInvalidArgument);
  Event wrong_state{1, 3, JobState::kPending, JobState::kRunning, "x"};
  EXPECT_EQ(store_->Put(j, wrong_state).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Get(3).status().code(), StatusCode::kNotFound);  // nothing half-written
  EXPECT_EQ(store_->Put(MakeJob(0, "alice", JobState::kPending), std::nullopt).code(),
            StatusCode::kInvalidArgument);
}

TEST_P(SchedJobStoreTest, ListFiltersByStateAndOwner) {
  ASSERT_TRUE(store_->Put(MakeJob(3, "alice", JobState::kRunning), std::nullopt).ok());
  ASSERT_TRUE(store_->Put(MakeJob(1, "alice", JobState::kPending), std::nullopt).ok());
  ASSERT_TRUE(store_->Put(MakeJob(2, "bob", JobState::kPending), std::nullopt).ok());
  ASSERT_TRUE(store_->Put(MakeJob(17, "bob", JobState::kRunning), std::nullopt).ok());
  auto ids = [&](const JobFilter& f) {
    std::vector<int64_t> out;
    auto r = store_->List(f);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    for (const auto& j : *r) out.push_back(j.id);
    return out;
  };
  EXPECT_EQ(ids({}), (std::vector<int64_t>{1, 2, 3, 17}));
  EXPECT_EQ(ids({JobState::kPending, std::nullopt}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ids({std::nullopt, "bob"}), (std::vector<int64_t>{2, 17}));
  EXPECT_EQ(ids({JobState::kRunning, "alice"}), (std::vector<int64_t>{3}));
  EXPECT_TRUE(ids({JobState::kFailed, std::nullopt}).empty());
}

TEST_P(SchedJobStoreTest, PutReplacesTheJob) {
  Job j = MakeJob(5, "alice", JobState::kPending);
  ASSERT_TRUE(store_->Put(j, std::nullopt).ok());
  auto ev = Transition(&j, JobState::kCancelled, 120, "cancelled by alice");
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(store_->Put(j, *ev).ok());
  auto got = store_->Get(5);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, JobState::kCancelled);
  EXPECT_EQ(store_->List({JobState::kPending, std::nullopt})->size(), 0u);
}

TEST_P(SchedJobStoreTest, IdsAndEverythingSurviveReopen) {
  auto a = store_->NextJobId();
  auto b = store_->NextJobId();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, 1);
  EXPECT_EQ(*b, 2);
  Job j = MakeJob(*b, "carol", JobState::kPending);
  ASSERT_TRUE(
      store_->Put(j, Event{1, j.id, JobState::kPending, JobState::kPending, "submitted"}).ok());
  j.progress.step = 40, j.progress.loss = 3.5, j.progress.val_loss = 3.75, j.progress.val_step = 30;
  auto ev = Transition(&j, JobState::kScheduled, 2, "placed");
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(store_->Put(j, *ev).ok());

  Reopen();
  auto c = store_->NextJobId();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, 3);
  auto got = store_->Get(j.id);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, j);
  EXPECT_DOUBLE_EQ(got->progress.val_loss, 3.75);
  EXPECT_EQ(got->progress.val_step, 30);
  // Events appended after reopen still come after the old ones.
  auto ev2 = Transition(&j, JobState::kRunning, 3, "started");
  ASSERT_TRUE(ev2.ok());
  ASSERT_TRUE(store_->Put(j, *ev2).ok());
  auto events = store_->Events(j.id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].reason, "submitted");
  EXPECT_EQ((*events)[1].reason, "placed");
  EXPECT_EQ((*events)[2].reason, "started");
}

TEST_P(SchedJobStoreTest, PutManyWritesEveryTransitionInOrder) {
  Job a = MakeJob(1, "alice", JobState::kRunning);
  Job b = MakeJob(2, "bob", JobState::kPending);
  std::vector<JobWrite> writes;
  auto e1 = Transition(&a, JobState::kPreempting, 10, "preempted for job 2");
  ASSERT_TRUE(e1.ok());
  writes.push_back({a, *e1});
  auto e2 = Transition(&a, JobState::kPreempted, 11, "grace elapsed");
  ASSERT_TRUE(e2.ok());
  writes.push_back({a, *e2});
  auto e3 = Transition(&b, JobState::kScheduled, 11, "placed on 8 x H100: running fp8");
  ASSERT_TRUE(e3.ok());
  writes.push_back({b, *e3});
  ASSERT_TRUE(store_->PutMany(writes).ok());
  Reopen();
  auto ga = store_->Get(1);
  ASSERT_TRUE(ga.ok());
  EXPECT_EQ(ga->state, JobState::kPreempted);
  auto ea = store_->Events(1);
  ASSERT_TRUE(ea.ok());
  ASSERT_EQ(ea->size(), 2u);
  EXPECT_EQ((*ea)[0], *e1);
  EXPECT_EQ((*ea)[1], *e2);
  EXPECT_EQ(store_->Get(2)->state, JobState::kScheduled);

  // One bad write refuses the whole batch: nothing of it is stored.
  Job c = MakeJob(3, "carol", JobState::kPending);
  auto e4 = Transition(&b, JobState::kRunning, 12, "started");
  ASSERT_TRUE(e4.ok());
  const Status bad = store_->PutMany({{c, std::nullopt}, {b, Event{12, 2, JobState::kScheduled,
                                                                   JobState::kFailed, "x"}}});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Get(3).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Get(2)->state, JobState::kScheduled);
  EXPECT_TRUE(store_->PutMany({}).ok());
}

TEST_P(SchedJobStoreTest, RankLogsAppendKeepTheirLastMebibyteAndListsStayJobsOnly) {
  ASSERT_TRUE(store_->Put(MakeJob(3, "alice", JobState::kRunning), std::nullopt).ok());
  ASSERT_TRUE(store_->AppendLog(3, 1, "one\n").ok());
  ASSERT_TRUE(store_->AppendLog(3, 0, "a\nb\n").ok());
  ASSERT_TRUE(store_->AppendLog(3, 1, "two\n").ok());
  ASSERT_TRUE(store_->AppendLog(30, 0, "other job\n").ok());
  Reopen();
  EXPECT_EQ(*store_->LogRanks(3), (std::vector<int>{0, 1}));
  EXPECT_EQ(*store_->Log(3, 1), "one\ntwo\n");
  EXPECT_EQ(*store_->Log(3, 7), "");
  EXPECT_EQ(store_->List()->size(), 1u) << "log records are not jobs";
  // Past 1 MiB the oldest lines go, cut at a line start.
  const std::string line(1000, 'x');
  for (int i = 0; i < 1100; ++i) ASSERT_TRUE(store_->AppendLog(3, 0, line + "\n").ok());
  const std::string log = *store_->Log(3, 0);
  EXPECT_LE(log.size(), kMaxLogBytes);
  EXPECT_GT(log.size(), kMaxLogBytes - 1001);
  EXPECT_EQ(log.front(), 'x');
  EXPECT_EQ(log.size() % 1001, 0u) << "whole lines only";
}

TEST_P(SchedJobStoreTest, NodesAreStoredWithoutOccupancy) {
  NodeInfo n;
  n.id = "node-b";
  n.gpus = {{"H100", 90, 80, true}, {"H100", 90, 80, false}};
  n.gpu_job = {7, kNoJob};
  n.last_heartbeat = 55;
  NodeInfo m = n;
  m.id = "node-a";
  m.state = NodeState::kLost;
  ASSERT_TRUE(store_->PutNode(n).ok());
  ASSERT_TRUE(store_->PutNode(m).ok());
  m.gpus.resize(1);
  ASSERT_TRUE(store_->PutNode(m).ok());  // replaces
  EXPECT_FALSE(store_->PutNode(NodeInfo{}).ok());
  Reopen();
  auto nodes = store_->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].id, "node-a");
  EXPECT_EQ((*nodes)[0].state, NodeState::kLost);
  EXPECT_EQ((*nodes)[0].gpus.size(), 1u);
  n.gpu_job = {kNoJob, kNoJob};
  EXPECT_EQ((*nodes)[1].id, n.id);
  EXPECT_EQ((*nodes)[1].gpus.size(), 2u);
  EXPECT_FALSE((*nodes)[1].gpus[1].healthy);
  EXPECT_EQ((*nodes)[1].gpus[0].compute_capability, 90);
  EXPECT_EQ((*nodes)[1].gpu_job, n.gpu_job);
  EXPECT_EQ((*nodes)[1].last_heartbeat, 55);
  // Jobs are not nodes.
  EXPECT_EQ(store_->List()->size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Stores, SchedJobStoreTest,
                         ::testing::Values(StoreKind{"Memory", false}, StoreKind{"RocksDb", true}),
                         [](const auto& info) { return info.param.name; });

TEST(SchedJobStoreRocksDb, AcknowledgedWritesSurviveKill9) {
  TempDir dir;
  const std::string path = dir.str() + "/jobs";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: write, then die without closing the DB or flushing anything.
    auto s = OpenRocksDbJobStore(path);
    if (!s.ok()) ::_exit(2);
    auto id = (*s)->NextJobId();
    Job j = MakeJob(id.ok() ? *id : 99, "dave", JobState::kPending);
    auto ev = Transition(&j, JobState::kScheduled, 7, "placed");
    if (!ev.ok() || !(*s)->Put(j, *ev).ok()) ::_exit(3);
    ::kill(::getpid(), SIGKILL);
    ::_exit(4);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
  EXPECT_EQ(WTERMSIG(wstatus), SIGKILL);

  auto s = OpenRocksDbJobStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto got = (*s)->Get(1);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->state, JobState::kScheduled);
  auto events = (*s)->Events(1);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].to, JobState::kScheduled);
  auto next = (*s)->NextJobId();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, 2);
}

TEST(SchedJobStoreRocksDb, OpenErrorsNameThePath) {
  TempDir dir;
  RocksDbJobStoreOptions o;
  o.create_if_missing = false;
  auto s = OpenRocksDbJobStore(dir.str() + "/absent", o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kIOError);
  EXPECT_NE(s.status().message().find("absent"), std::string::npos);
}

}  // namespace
}  // namespace fp8rt::sched
