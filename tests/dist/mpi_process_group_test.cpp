// MpiProcessGroup at any world size: every expected value is derived from the rank and the world
// size (each rank's data is seeded by its rank, so any rank can recompute any other's), so the same
// tests run alone under ctest and as N ranks under mpirun. Tests that need two ranks skip at one.
#include <gtest/gtest.h>
#include "dist/mpi_comm.h"  // <mpi.h> without its C++ bindings

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "dist/bootstrap.h"
#include "dist/collective_check.h"
#include "dist/errors.h"
#include "dist/mpi_process_group.h"
#include "dist/running_deadline.h"

namespace moco::dist {
namespace {

using namespace std::chrono_literals;

// Short enough that a rank stuck by a failing test does not hold the others for 5 minutes.
constexpr std::chrono::milliseconds kTestTimeout = 30s;

std::unique_ptr<MpiProcessGroup> make_group(bool check = true, std::chrono::milliseconds timeout = kTestTimeout) {
  init_world(nullptr, nullptr);
  MpiOptions options;
  options.check_collectives = check;
  options.timeout = timeout;
  return std::make_unique<MpiProcessGroup>(options);
}

// What rank `rank` contributes; small non-negative integers so that sums fit every dtype.
torch::Tensor rank_data(int rank, torch::IntArrayRef shape, torch::ScalarType dtype, int salt = 0) {
  torch::manual_seed(static_cast<uint64_t>(1000 * salt + rank));
  if (torch::isFloatingType(dtype)) return torch::randn(shape, torch::TensorOptions().dtype(dtype));
  return torch::randint(0, 30, shape, torch::TensorOptions().dtype(torch::kInt64)).to(dtype);
}

torch::Tensor sum_over_ranks(int world, torch::IntArrayRef shape, torch::ScalarType dtype, int salt) {
  torch::Tensor sum = torch::zeros(shape, torch::TensorOptions().dtype(torch::kFloat64));
  for (int r = 0; r < world; ++r) sum += rank_data(r, shape, dtype, salt).to(torch::kFloat64);
  return sum;
}

// Runs `call`, expecting a DistError; returns its message ("" if none was thrown).
template <typename F>
std::string dist_error_of(F&& call) {
  try {
    call();
  } catch (const DistError& e) {
    return e.what();
  }
  return "";
}

// As dist_error_of, with the seconds the call took to throw.
template <typename F>
std::pair<std::string, double> timed_dist_error_of(F&& call) {
  const auto start = std::chrono::steady_clock::now();
  std::string error = dist_error_of(std::forward<F>(call));
  return {error, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class MpiFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    pg_ = make_group();
    rank_ = pg_->rank();
    world_ = pg_->world_size();
  }
  std::unique_ptr<MpiProcessGroup> pg_;
  int rank_ = 0;
  int world_ = 1;
};
class MpiGroup : public MpiFixture {};
class MpiAllReduce : public MpiFixture {};
class MpiAllGather : public MpiFixture {};
class MpiBroadcast : public MpiFixture {};
class MpiAllToAll : public MpiFixture {};
class MpiMismatch : public MpiFixture {};
class MpiTimeout : public MpiFixture {};

TEST_F(MpiGroup, RankAndSizeAreTheWorlds) {
  const WorldInfo world = init_world(nullptr, nullptr);
  EXPECT_EQ(rank_, world.rank);
  EXPECT_EQ(world_, world.world_size);
  pg_->barrier();
  pg_->barrier();
}

TEST_F(MpiGroup, BarrierWithoutChecksCompletes) {
  auto unchecked = make_group(/*check=*/false);
  unchecked->barrier();
  torch::Tensor t = torch::ones({3});
  unchecked->all_reduce(t, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(t, torch::full({3}, static_cast<float>(world_))));
}

TEST_F(MpiAllReduce, SumOfRankDataForEveryDtype) {
  int salt = 0;
  for (auto dtype :
       {torch::kFloat32, torch::kFloat64, torch::kInt64, torch::kInt32, torch::kInt16, torch::kInt8, torch::kUInt8}) {
    SCOPED_TRACE(dtype_name(dtype));
    ++salt;
    torch::Tensor t = rank_data(rank_, {7, 3}, dtype, salt);
    pg_->all_reduce(t, ReduceOp::kSum);
    ASSERT_EQ(t.scalar_type(), dtype);
    const torch::Tensor expected = sum_over_ranks(world_, {7, 3}, dtype, salt);
    EXPECT_TRUE(torch::allclose(t.to(torch::kFloat64), expected, 1e-5, 1e-5)) << t << expected;
  }
}

TEST_F(MpiAllReduce, AverageOfFloats) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    torch::Tensor t = rank_data(rank_, {33}, dtype, 7);
    pg_->all_reduce(t, ReduceOp::kAvg);
    const torch::Tensor expected = sum_over_ranks(world_, {33}, dtype, 7) / world_;
    EXPECT_TRUE(torch::allclose(t.to(torch::kFloat64), expected, 1e-5, 1e-6));
  }
}

TEST_F(MpiAllReduce, IntegerAverageThrowsOnEveryRankAndTheGroupStaysUsable) {
  torch::Tensor t = torch::ones({4}, torch::kInt64);
  const std::string error = dist_error_of([&] { pg_->all_reduce(t, ReduceOp::kAvg); });
  EXPECT_TRUE(contains(error, "rank " + std::to_string(rank_) + ": all_reduce #1: kAvg of int64 would truncate"))
      << error;
  pg_->all_reduce(t, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(t, torch::full({4}, world_, torch::kInt64)));
}

TEST_F(MpiAllReduce, NonContiguousTensorIsReducedInPlace) {
  torch::Tensor base = rank_data(rank_, {4, 6}, torch::kFloat32, 3);
  torch::Tensor view = base.t();
  ASSERT_FALSE(view.is_contiguous());
  pg_->all_reduce(view, ReduceOp::kSum);
  const torch::Tensor expected = sum_over_ranks(world_, {4, 6}, torch::kFloat32, 3);
  EXPECT_TRUE(torch::allclose(base.to(torch::kFloat64), expected, 1e-5, 1e-5));
}

TEST_F(MpiAllReduce, AsyncOverlapsLocalWork) {
  torch::Tensor big = rank_data(rank_, {1 << 18}, torch::kFloat32, 4);
  auto work = pg_->all_reduce_async(big, ReduceOp::kAvg);
  // Local work while the reduction is in flight, on memory it does not touch.
  torch::Tensor a = torch::ones({64, 64});
  torch::Tensor product = torch::mm(a, a);
  EXPECT_TRUE(torch::equal(product, torch::full({64, 64}, 64.0f)));
  work->wait();
  work->wait();  // a second wait is a no-op
  const torch::Tensor expected = sum_over_ranks(world_, {1 << 18}, torch::kFloat32, 4) / world_;
  EXPECT_TRUE(torch::allclose(big.to(torch::kFloat64), expected, 1e-4, 1e-5));
}

TEST_F(MpiAllReduce, SeveralInFlightFinishInAnyWaitOrder) {
  std::vector<torch::Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 3; ++i) tensors.push_back(torch::full({1000 * (i + 1)}, static_cast<double>(rank_ + i)));
  for (auto& t : tensors) works.push_back(pg_->all_reduce_async(t, ReduceOp::kSum));
  for (int i = 2; i >= 0; --i) works[static_cast<size_t>(i)]->wait();
  const double rank_sum = world_ * (world_ - 1) / 2.0;
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::equal(tensors[static_cast<size_t>(i)],
                             torch::full({1000 * (i + 1)}, rank_sum + world_ * i, torch::kFloat64)));
  // A Work dropped unwaited must not break the next collective.
  torch::Tensor dropped = torch::ones({5});
  pg_->all_reduce_async(dropped, ReduceOp::kSum);
  pg_->barrier();
}

TEST_F(MpiAllGather, StacksEveryRanksTensorInRankOrder) {
  for (auto dtype : {torch::kFloat32, torch::kInt64, torch::kUInt8}) {
    const torch::Tensor mine = rank_data(rank_, {3, 5}, dtype, 5);
    const torch::Tensor gathered = pg_->all_gather(mine);
    ASSERT_EQ(gathered.sizes(), torch::IntArrayRef({3 * world_, 5}));
    for (int r = 0; r < world_; ++r)
      EXPECT_TRUE(torch::equal(gathered.narrow(0, 3 * r, 3), rank_data(r, {3, 5}, dtype, 5))) << "rank " << r;
  }
}

TEST_F(MpiBroadcast, FromTheLastRankEvenIntoANonContiguousTensor) {
  const int root = world_ - 1;  // not 0 whenever there are two ranks
  torch::Tensor t = rank_data(rank_, {5, 4}, torch::kFloat64, 6);
  pg_->broadcast(t, root);
  EXPECT_TRUE(torch::equal(t, rank_data(root, {5, 4}, torch::kFloat64, 6)));

  torch::Tensor base = rank_data(rank_, {4, 5}, torch::kInt32, 8);
  torch::Tensor view = base.t();
  pg_->broadcast(view, root);
  EXPECT_TRUE(torch::equal(base, rank_data(root, {4, 5}, torch::kInt32, 8)));
}

// Row k of what rank `from` sends to rank `to`: values that say where they came from.
torch::Tensor rows_between(int from, int to, int64_t count) {
  torch::Tensor rows = torch::empty({count, 2, 3}, torch::kFloat64);
  for (int64_t k = 0; k < count; ++k) rows[k].fill_(100.0 * from + 10.0 * to + static_cast<double>(k));
  rows.select(1, 1).add_(0.5);
  return rows;
}

TEST_F(MpiAllToAll, UnevenCountsIncludingZeroArriveInRankOrder) {
  // Rank r sends (r + 2j) % 3 rows to rank j: uneven, asymmetric, sometimes none.
  auto count = [](int from, int to) { return static_cast<int64_t>((from + 2 * to) % 3); };
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<torch::Tensor> outgoing, incoming;
  for (int j = 0; j < world_; ++j) {
    send_counts.push_back(count(rank_, j));
    recv_counts.push_back(count(j, rank_));
    outgoing.push_back(rows_between(rank_, j, count(rank_, j)));
    incoming.push_back(rows_between(j, rank_, count(j, rank_)));
  }
  const torch::Tensor received = pg_->all_to_all(torch::cat(outgoing), send_counts, recv_counts);
  EXPECT_TRUE(torch::equal(received, torch::cat(incoming))) << received;
}

TEST_F(MpiAllToAll, InconsistentCountsThrowOnEveryRankNamingThePair) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<int64_t> ones(static_cast<size_t>(world_), 1);
  std::vector<int64_t> expect = ones;
  if (rank_ == 0) expect[1] = 2;  // rank 1 sends one row, rank 0 waits for two
  const torch::Tensor input = torch::zeros({world_, 4});
  const std::string error = dist_error_of([&] { pg_->all_to_all(input, ones, expect); });
  EXPECT_TRUE(contains(error, "rank " + std::to_string(rank_) +
                                  ": all_to_all #1: send and receive counts disagree: "
                                  "rank 1 sends 1 rows to rank 0, which expects 2"))
      << error;
  // No data was exchanged: the same group still works.
  const torch::Tensor received = pg_->all_to_all(torch::full({world_, 4}, static_cast<float>(rank_)), ones, ones);
  EXPECT_TRUE(torch::equal(received, torch::arange(world_, torch::kFloat32).unsqueeze(1).expand({world_, 4})));
}

TEST_F(MpiMismatch, ShapeMismatchThrowsOnEveryRankNamingTheRanks) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  const torch::Tensor mine = torch::zeros({rank_ == 1 ? 5 : 4, 128});
  const std::string error = dist_error_of([&] { pg_->all_gather(mine); });
  std::vector<int> agreeing = {0};
  for (int r = 2; r < world_; ++r) agreeing.push_back(r);
  const std::string others = rank_list(agreeing) + (agreeing.size() == 1 ? " has" : " have");
  EXPECT_EQ(error, "rank " + std::to_string(rank_) + ": all_gather #1: " + others +
                       " float32 [4, 128], rank 1 has float32 [5, 128]; no data was exchanged, the group remains "
                       "usable");
  const torch::Tensor gathered = pg_->all_gather(torch::full({2}, static_cast<float>(rank_)));
  EXPECT_TRUE(torch::equal(gathered, torch::arange(world_, torch::kFloat32).repeat_interleave(2)));
}

TEST_F(MpiMismatch, DtypeMismatchThrowsOnEveryRank) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  torch::Tensor t = torch::ones({3}, rank_ == 1 ? torch::kFloat64 : torch::kFloat32);
  const std::string error = dist_error_of([&] { pg_->all_reduce(t, ReduceOp::kSum); });
  EXPECT_TRUE(contains(error, "all_reduce #1: ")) << error;
  EXPECT_TRUE(contains(error, "rank 1 has float64 [3] (sum)")) << error;
  EXPECT_TRUE(torch::equal(t, torch::ones({3}, t.scalar_type()))) << "the tensor must be untouched";
}

TEST_F(MpiMismatch, DifferentCollectivesThrowOnEveryRank) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  torch::Tensor t = torch::ones({2});
  const std::string error = dist_error_of([&] {
    if (rank_ == 0)
      pg_->broadcast(t, 1);
    else
      pg_->all_reduce(t, ReduceOp::kSum);
  });
  EXPECT_TRUE(contains(error,
                       "ranks called different collectives: rank 0 called broadcast #1 with float32 [2] "
                       "(root 1), rank"))
      << error;
  EXPECT_TRUE(contains(error, "called all_reduce #1 with float32 [2] (sum)")) << error;
  pg_->barrier();
}

TEST_F(MpiMismatch, InvalidArgumentsOnOneRankThrowOnEveryRank) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  torch::Tensor t = torch::ones({2});
  const int root = rank_ == 1 ? world_ : 0;  // rank 1 names a rank that does not exist
  const std::string error = dist_error_of([&] { pg_->broadcast(t, root); });
  if (rank_ == 1)
    EXPECT_TRUE(contains(error, "rank 1: broadcast #1: root " + std::to_string(world_) + " is not a rank")) << error;
  else
    EXPECT_TRUE(contains(error, "broadcast #1: rank 1 rejected its arguments")) << error;
  pg_->broadcast(t, 0);
}

TEST_F(MpiTimeout, ARankThatNeverCallsTimesOutTheOthers) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  {
    auto short_lived = make_group(/*check=*/true, 2s);
    if (rank_ != 0) {
      torch::Tensor t = torch::ones({4});
      const auto [error, waited] = timed_dist_error_of([&] { short_lived->all_reduce(t, ReduceOp::kSum); });
      // Rank 0 never came, and the others are named as arrived by not being named.
      EXPECT_EQ(
          error,
          "rank " + std::to_string(rank_) +
              ": all_reduce #1 did not complete within 2 s, waiting for rank 0, which never reached it; rank 0 did "
              "not answer a roll call (dead or stuck)");
      EXPECT_GE(waited, 2.0);
      EXPECT_LT(waited, 10.0);
      // The group is unusable from now on, and says so instead of hanging.
      const std::string again = dist_error_of([&] { short_lived->barrier(); });
      EXPECT_TRUE(contains(again, "process group unusable since all_reduce #1 timed out")) << again;
    }
  }
  pg_->barrier();  // resynchronise the ranks for the tests that follow
}

TEST_F(MpiTimeout, WithoutChecksTheCollectiveItselfTimesOut) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  {
    auto short_lived = make_group(/*check=*/false, 1s);
    if (rank_ != 0) {
      torch::Tensor t = torch::ones({4});
      auto work = short_lived->all_reduce_async(t, ReduceOp::kSum);
      const std::string error = dist_error_of([&] { work->wait(); });
      // The ranks that timed out hold a roll call: rank 0, elsewhere, does not answer it.
      EXPECT_TRUE(contains(
          error, ": all_reduce #1 did not complete within 1 s; rank 0 did not answer a roll call (dead or stuck)"))
          << error;
      EXPECT_EQ(dist_error_of([&] { work->wait(); }), error) << "wait() rethrows the same error";
    }
  }
  pg_->barrier();
}

// Making a group is itself collective (a private communicator is duplicated from the world's): a
// rank that never makes its group times out the others' constructors, which name the phase, instead
// of hanging there. Rank 0 makes its group only after the others gave up, so that the duplication
// they left behind is matched and the world's communicators stay in step for the tests that follow.
TEST_F(MpiTimeout, ARankThatNeverMakesTheGroupTimesOutTheOthersConstructors) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  if (rank_ != 0) {
    const auto [error, waited] = timed_dist_error_of([&] { make_group(/*check=*/true, 2s); });
    EXPECT_EQ(error,
              "rank " + std::to_string(rank_) +
                  ": barrier #0 did not complete within 2 s (creating the process group); no roll call: the group's "
                  "communicator was never made");
    EXPECT_GE(waited, 2.0);
    EXPECT_LT(waited, 10.0);
  }
  pg_->barrier();
  if (rank_ == 0) {
    EXPECT_EQ(make_group(/*check=*/true, 2s)->world_size(), world_);
  }
  pg_->barrier();
}

// Ranks reach a collective at different times (one is slower, one had a freeze not counted), so
// they time out at different times too. A rank still waiting answers the roll call of one that
// timed out, instead of being named with the stuck rank because its own timeout comes after the
// roll call ends. Rank 0 times out at 6 s and calls the roll until 9 s; the middle ranks arrive at
// 4.5 s (they would time out only at 10.5 s); the last rank never comes.
TEST_F(MpiTimeout, RanksStillWaitingAnswerARollCall) {
  if (world_ < 3) GTEST_SKIP() << "needs three ranks";
  const int last = world_ - 1;
  {
    auto short_lived = make_group(/*check=*/true, 6s);
    if (rank_ != last) {
      if (rank_ != 0) std::this_thread::sleep_for(4500ms);
      torch::Tensor t = torch::ones({4});
      const std::string error = dist_error_of([&] { short_lived->all_reduce(t, ReduceOp::kSum); });
      EXPECT_EQ(error, "rank " + std::to_string(rank_) +
                           ": all_reduce #1 did not complete within 6 s, waiting for rank " + std::to_string(last) +
                           ", which never reached it; rank " + std::to_string(last) +
                           " did not answer a roll call (dead or stuck)");
    }
  }
  pg_->barrier();
}

// The other side of answering while waiting: a rank that comes to the collective only while the
// others' roll call is on (it was stuck, or frozen and then resumed) must not answer it at once, or
// the roll call could not find it. Rank 0 comes at 3 s; the others time out at 2 s and call the roll
// until 4 s.
TEST_F(MpiTimeout, ARankArrivingDuringTheRollCallIsStillNamed) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  {
    auto short_lived = make_group(/*check=*/true, 2s);
    if (rank_ == 0) std::this_thread::sleep_for(3s);
    torch::Tensor t = torch::ones({4});
    const std::string error = dist_error_of([&] { short_lived->all_reduce(t, ReduceOp::kSum); });
    if (rank_ != 0) {
      EXPECT_EQ(
          error,
          "rank " + std::to_string(rank_) +
              ": all_reduce #1 did not complete within 2 s, waiting for rank 0, which never reached it; rank 0 did "
              "not answer a roll call (dead or stuck)");
    } else {
      EXPECT_TRUE(contains(error, "all_reduce #1 did not complete within 2 s")) << error;
    }
  }
  pg_->barrier();
}

// A rank frozen inside a collective (SIGSTOP; Open MPI resumes stopped ranks when another aborts)
// does not time out the moment it runs again: only its running time counts, so it neither blames
// peers it could not hear nor answers a roll call meant to find it. Rank 0 freezes the others
// longer than the timeout, resumes them, then joins the collective, which completes everywhere.
TEST_F(MpiTimeout, TimeSpentFrozenDoesNotCount) {
  if (world_ < 2) GTEST_SKIP() << "needs two ranks";
  torch::Tensor pids = torch::zeros({world_}, torch::kInt64);
  pids[rank_] = static_cast<int64_t>(getpid());
  pg_->all_reduce(pids, ReduceOp::kSum);
  for (const bool check : {true, false}) {  // the descriptor exchange's wait and the data's wait
    SCOPED_TRACE(check ? "checked" : "unchecked");
    auto short_lived = make_group(check, 1500ms);
    torch::Tensor t = torch::ones({4});
    if (rank_ == 0) {
      std::this_thread::sleep_for(200ms);
      for (int r = 1; r < world_; ++r) ASSERT_EQ(kill(static_cast<pid_t>(pids[r].item<int64_t>()), SIGSTOP), 0);
      std::this_thread::sleep_for(3s);
      for (int r = 1; r < world_; ++r) ASSERT_EQ(kill(static_cast<pid_t>(pids[r].item<int64_t>()), SIGCONT), 0);
    }
    EXPECT_EQ(dist_error_of([&] { short_lived->all_reduce(t, ReduceOp::kSum); }), "");
    EXPECT_TRUE(torch::equal(t, torch::full({4}, static_cast<float>(world_)))) << t;
  }
  pg_->barrier();
}

// What keeps a stuck rank, resumed, from answering the roll call meant to find it: a wait's running
// span starts again after a freeze (here, a gap between polls longer than the 250 ms it allows).
TEST(RunningDeadline, AFreezeStartsTheRunningSpanAgain) {
  RunningDeadline deadline(60s);
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (!deadline.ran_for(40ms) && std::chrono::steady_clock::now() < give_up) {
    EXPECT_FALSE(deadline.passed());
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(deadline.ran_for(40ms)) << "40 ms of polling every 5 ms did not count as running within 10 s";
  std::this_thread::sleep_for(400ms);
  EXPECT_FALSE(deadline.passed()) << "the 400 ms without a poll was frozen time, not spent of the budget";
  EXPECT_FALSE(deadline.ran_for(40ms));
  EXPECT_TRUE(deadline.ran_for(0ms));
}

TEST(DistError, MessageStartsWithTheRank) {
  const DistError known(3, "boom");
  EXPECT_STREQ(known.what(), "rank 3: boom");
  EXPECT_EQ(known.rank(), 3);
  EXPECT_STREQ(DistError(-1, "boom").what(), "rank ?: boom");
}

TEST(DistError, MpiCheckNamesTheCallFileLineAndLibraryError) {
  const WorldInfo world = init_world(nullptr, nullptr);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &comm));
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  int value = 0;
  int line = 0;
  const std::string error = dist_error_of([&] {
    line = __LINE__ + 1;
    MPI_CHECK(MPI_Send(&value, 1, MPI_INT, /*dest=*/7, /*tag=*/0, comm));
  });
  MPI_Comm_free(&comm);
  EXPECT_TRUE(contains(
      error, "rank " + std::to_string(world.rank) +
                 ": MPI_Send(&value, 1, MPI_INT, 7, 0, comm) failed at tests/dist/mpi_process_group_test.cpp:" +
                 std::to_string(line) + ": MPI_ERR_RANK"))
      << error;
}

// The pure checks behind the mismatch errors, with made-up ranks: runs at any world size.
TEST(DistCheck, DisagreementGroupsRanksAndNamesShapes) {
  const torch::Tensor four = torch::zeros({4, 128}), five = torch::zeros({5, 128});
  std::vector<CollectiveDescriptor> all;
  for (int r = 0; r < 4; ++r)
    all.push_back(describe_collective(CollectiveOp::kAllGather, 17, r == 1 ? &five : &four, 0));
  EXPECT_EQ(find_disagreement(all).value_or(""),
            "all_gather #17: ranks 0,2,3 have float32 [4, 128], rank 1 has float32 [5, 128]");
  all[1] = all[0];
  EXPECT_FALSE(find_disagreement(all).has_value());
}

// NCCL checks each distinct collective once: a later call differing only in its sequence number is
// known; any other difference (op, dtype, shape, root or reduce op) is checked again.
TEST(DistCheck, AgreedCollectivesKnowACallByAllButItsSequenceNumber) {
  const torch::Tensor four = torch::zeros({4, 128}), five = torch::zeros({5, 128}),
                      ints = torch::zeros({4, 128}, torch::kInt);
  AgreedCollectives agreed;
  EXPECT_FALSE(agreed.contains(describe_collective(CollectiveOp::kAllGather, 17, &four, 0)));
  agreed.insert(describe_collective(CollectiveOp::kAllGather, 17, &four, 0));
  EXPECT_TRUE(agreed.contains(describe_collective(CollectiveOp::kAllGather, 18, &four, 0)));
  EXPECT_FALSE(agreed.contains(describe_collective(CollectiveOp::kAllGather, 18, &five, 0)));
  EXPECT_FALSE(agreed.contains(describe_collective(CollectiveOp::kAllGather, 18, &ints, 0)));
  EXPECT_FALSE(agreed.contains(describe_collective(CollectiveOp::kBroadcast, 18, &four, 0)));
  agreed.insert(describe_collective(CollectiveOp::kBroadcast, 19, &four, 0));
  EXPECT_FALSE(agreed.contains(describe_collective(CollectiveOp::kBroadcast, 20, &four, 1)));
}

TEST(DistCheck, AllToAllComparesEveryDimButTheRows) {
  const torch::Tensor a = torch::zeros({4, 3}), b = torch::zeros({7, 3}), c = torch::zeros({4, 2});
  std::vector<CollectiveDescriptor> all = {describe_collective(CollectiveOp::kAllToAll, 2, &a, 0),
                                           describe_collective(CollectiveOp::kAllToAll, 2, &b, 0)};
  EXPECT_FALSE(find_disagreement(all).has_value());
  all.push_back(describe_collective(CollectiveOp::kAllToAll, 2, &c, 0));
  EXPECT_EQ(find_disagreement(all).value_or(""),
            "all_to_all #2: ranks 0,1 have float32 [*, 3], rank 2 has float32 [*, 2]");
}

TEST(DistCheck, DifferentCollectivesAreNamedWithTheirNumbers) {
  const torch::Tensor t = torch::zeros({2});
  const std::vector<CollectiveDescriptor> all = {describe_collective(CollectiveOp::kBroadcast, 3, &t, 1),
                                                 describe_collective(CollectiveOp::kAllReduce, 3, &t, 0),
                                                 describe_collective(CollectiveOp::kBarrier, 4, nullptr, 0)};
  EXPECT_EQ(find_disagreement(all).value_or(""),
            "ranks called different collectives: rank 0 called broadcast #3 with float32 [2] (root 1), rank 1 called "
            "all_reduce #3 with float32 [2] (sum), rank 2 called barrier #4 with no tensor");
}

TEST(DistCheck, CountMismatchNamesSenderAndReceiver) {
  // Two ranks; row r: rank r's send counts then its receive counts.
  EXPECT_FALSE(find_count_mismatch({{1, 2, 1, 3}, {3, 4, 2, 4}}).has_value());
  EXPECT_EQ(find_count_mismatch({{1, 2, 1, 3}, {3, 4, 1, 4}}).value_or(""),
            "send and receive counts disagree: rank 0 sends 2 rows to rank 1, which expects 1");
}

TEST(DistCheck, RankListsAreShort) {
  EXPECT_EQ(rank_list({3}), "rank 3");
  EXPECT_EQ(rank_list({0, 1}), "ranks 0,1");
  EXPECT_EQ(rank_list({0, 1, 2, 5, 7, 8, 9}), "ranks 0-2,5,7-9");
}

}  // namespace
}  // namespace moco::dist
