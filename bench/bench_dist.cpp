// bench_dist: what communication costs, run under the launcher (mpirun -np N build/bench_dist).
//
// 1. Gradient all-reduce bus bandwidth (nccl-tests convention: algbw = bytes/time, busbw = algbw x
//    2(n-1)/n) of the reducer's bucketed collectives through the ProcessGroup, against one raw
//    MPI_Allreduce of the same bytes.
// 2. Shuffle-BN: time and bytes per step of the all-to-all shuffle + unshuffle, against the
//    reference's way (all-gather every rank's images and keys, keep a slice).
// 3. Exposed communication per training step: the step with N ranks minus the same per-rank step
//    with communication off (a world of one with plain BN), timed in the same run. Both are taken
//    step by step at the slowest rank: ranks doing the same work finish tens of milliseconds apart
//    on a shared machine, and a synchronous step waits for the last one whatever its collectives
//    cost, so that wait is the floor's, not the communication's. The older measure (the slowest
//    rank's median step without communication) is printed beside it, and every step's time per rank
//    is in the JSON. The same step with every gradient bucket waited for as soon as it is launched
//    (GradientReducer::set_wait_at_launch: no overlap with backward) is timed in the same rotation,
//    against the same floor: what the overlap saves is the ratio of the two exposed times.
//    --step-model resnet18 (32 px, 3 channels) has gradients large enough for that to show on a
//    slow link; resnet_tiny (28 px, 1 channel, the default) is the older figure.
// 4. The kNN monitor's search with the bank sharded (each rank searches its share for every query and
//    the ranks' k best are merged) against every rank searching the whole bank, which is what one
//    rank alone does: their ratio is what N ranks take of one rank's time. Also the bank's bytes a
//    rank holds either way. --knn-only runs just this.
#include "dist/bootstrap.h"
#include "dist/mpi_comm.h"
#include "dist/mpi_process_group.h"
#include "dist/reducer.h"
#include "eval/knn.h"
#include "moco_v2/batch_shuffle.h"
#include "moco_v2/moco.h"
#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;
using moco::dist::ProcessGroup;

// Seconds per call of fn, the slowest rank's (a collective is as slow as its slowest member).
template <typename Fn>
double time_per_call(ProcessGroup& group, int warmup, int iters, Fn fn) {
  for (int i = 0; i < warmup; ++i) fn();
  group.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  auto t = torch::tensor({std::chrono::duration<double>(Clock::now() - start).count() / iters}, torch::kDouble);
  return group.all_gather(t).max().item<double>();
}

moco::model::ResNetOptions encoder(const std::string& arch, int64_t channels, int64_t bn_splits) {
  auto o = moco::model::resnet_options_for(arch);
  o.in_channels = channels;
  o.small_stem = true;
  o.mlp_head = true;
  o.bn_splits = bn_splits;
  return o;
}

nlohmann::json allreduce_bench(ProcessGroup& group, const std::string& arch, int64_t bucket_bytes, int iters) {
  const int n = group.world_size();
  moco::model::ResNet net(encoder(arch, 3, 1));
  const auto params = net->parameters();
  const auto buckets =
      moco::dist::compute_bucket_layout(params, bucket_bytes, moco::dist::GradientReducer::kDefaultFirstBucketCapBytes);
  std::vector<torch::Tensor> flats;
  int64_t bytes = 0;
  for (const auto& b : buckets) {
    flats.push_back(torch::randn({b.numel}));
    bytes += b.bytes;
  }
  const double reducer_s = time_per_call(group, 2, iters, [&] {
    std::vector<std::shared_ptr<moco::dist::Work>> work;
    for (auto& f : flats) work.push_back(group.all_reduce_async(f, moco::dist::ReduceOp::kSum));
    for (auto& w : work) w->wait();
  });
  auto raw = torch::randn({bytes / 4});
  const double raw_s = time_per_call(group, 2, iters, [&] {
    MPI_Allreduce(MPI_IN_PLACE, raw.data_ptr<float>(), static_cast<int>(raw.numel()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  });
  const double factor = 2.0 * (n - 1) / n;
  auto gbps = [](double b, double s) { return b / s / 1e9; };
  return {{"model", arch},
          {"bytes", bytes},
          {"buckets", buckets.size()},
          {"reducer_s", reducer_s},
          {"reducer_algbw_GBps", gbps(bytes, reducer_s)},
          {"reducer_busbw_GBps", gbps(bytes, reducer_s) * factor},
          {"raw_mpi_s", raw_s},
          {"raw_mpi_algbw_GBps", gbps(bytes, raw_s)},
          {"raw_mpi_busbw_GBps", gbps(bytes, raw_s) * factor}};
}

nlohmann::json shuffle_bench(ProcessGroup& group, int64_t b, int64_t side, int iters) {
  const int n = group.world_size(), rank = group.rank();
  const auto images = torch::randn({b, 3, side, side});
  const auto keys = torch::randn({b, 128});
  int64_t step = 0, rows_to_others = 0;
  const double a2a_s = time_per_call(group, 2, iters, [&] {
    const moco::moco_v2::BatchShuffle plan(moco::moco_v2::shared_permutation(b * n, 0, step++), rank, n);
    plan.shuffle(images, group);
    plan.unshuffle(keys, group);
    rows_to_others = plan.rows_sent_to_others();
  });
  const double gather_s = time_per_call(group, 2, iters, [&] {
    const auto perm = torch::tensor(moco::moco_v2::shared_permutation(b * n, 0, step++), torch::kLong);
    const auto all_images = group.all_gather(images).index_select(0, perm).narrow(0, rank * b, b);
    const auto all_keys = group.all_gather(keys).index_select(0, perm.argsort()).narrow(0, rank * b, b);
  });
  const int64_t row_bytes = images[0].numel() * 4 + keys[0].numel() * 4;
  return {{"per_rank_batch", b},      {"image", side},
          {"all_to_all_s", a2a_s},    {"all_to_all_bytes_sent_per_rank", rows_to_others * row_bytes},
          {"all_gather_s", gather_s}, {"all_gather_bytes_received_per_rank", (n - 1) * b * row_bytes}};
}

// The network of the step benchmark and its input.
struct StepModel {
  std::string arch;
  int64_t channels = 1;
  int64_t side = 28;
};

StepModel step_model(const std::string& name) {
  if (name == "resnet_tiny") return {name, 1, 28};
  if (name == "resnet18") return {name, 3, 32};
  throw std::invalid_argument("--step-model: '" + name + "' is not resnet_tiny or resnet18");
}

// How a step's gradients travel: overlapped with backward (the trainer's way), each bucket waited
// for at its launch (no overlap), or not at all (a world of one: the floor).
enum class Comm { kOverlap, kWaitAtLaunch, kNone };

// One training step of MoCo: forward, backward with the reducer, optimizer step.
class StepRunner {
 public:
  StepRunner(std::shared_ptr<ProcessGroup> group, const StepModel& model, int64_t b, int64_t bucket_bytes, Comm comm)
      : group_(group),
        comm_(comm),
        moco_(encoder(model.arch, model.channels, 1), options(), group, 0),
        sgd_(moco_->trainable_parameters(), torch::optim::SGDOptions(0.03).momentum(0.9)),
        reducer_(moco_->trainable_parameters(), group, bucket_bytes),
        im_q_(torch::randn({b, model.channels, model.side, model.side})),
        im_k_(torch::randn({b, model.channels, model.side, model.side})) {
    moco_->train();
    reducer_.set_wait_at_launch(comm == Comm::kWaitAtLaunch);
    buffers_ = moco_->encoder_q->buffers();
    for (const auto& t : moco_->encoder_k->buffers()) buffers_.push_back(t);
  }

  double timed_step() {
    const auto start = Clock::now();
    if (comm_ != Comm::kNone) moco::dist::broadcast_parameters(buffers_, *group_);
    auto out = moco_->forward(im_q_, im_k_);
    sgd_.zero_grad();
    out.loss.backward();
    reducer_.finalize();
    moco_->end_step(out);
    sgd_.step();
    const auto& stats = reducer_.last_stats();
    reducer_waits_.push_back(stats.launch_wait_seconds + stats.finalize_wait_seconds);
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // Per step: the time this rank's reducer waited for gradient all-reduces (in the hooks and in
  // finalize()); the communication that the step did not hide, as this rank saw it.
  const std::vector<double>& reducer_waits() const { return reducer_waits_; }

 private:
  static moco::moco_v2::MocoOptions options() {
    moco::moco_v2::MocoOptions o;
    o.queue_size = 4096;
    return o;
  }
  std::shared_ptr<ProcessGroup> group_;
  Comm comm_;
  moco::moco_v2::Moco moco_;
  torch::optim::SGD sgd_;
  moco::dist::GradientReducer reducer_;
  torch::Tensor im_q_, im_k_;
  std::vector<torch::Tensor> buffers_;
  std::vector<double> reducer_waits_;
};

// Every rank's time of every step: [ranks, steps].
torch::Tensor all_ranks(ProcessGroup& group, const std::vector<double>& per_step) {
  const auto mine = torch::tensor(per_step, torch::kDouble);
  return group.all_gather(mine).view({group.world_size(), -1});
}

// Every rank's time of every step [ranks, steps] of each kind, and every rank's reducer waits.
struct StepTimes {
  torch::Tensor overlap, wait_at_launch, none;
  torch::Tensor overlap_waits, wait_at_launch_waits;
};

// The same per-rank step with the world's communication overlapped, with it waited for at each
// bucket's launch, and without it (a world of one), in turn and in a rotating order so that drift
// in the machine's speed falls on all three alike. Every step starts together on every rank, so the
// slowest rank of a step without communication is what a synchronous step would take if its
// collectives cost nothing.
StepTimes step_seconds(std::shared_ptr<ProcessGroup> group, const StepModel& model, int64_t b, int64_t bucket_bytes,
                       int iters) {
  StepRunner overlap(group, model, b, bucket_bytes, Comm::kOverlap),
      at_launch(group, model, b, bucket_bytes, Comm::kWaitAtLaunch),
      none(std::make_shared<moco::dist::LocalProcessGroup>(), model, b, bucket_bytes, Comm::kNone);
  StepRunner* runners[] = {&overlap, &at_launch, &none};
  for (int i = 0; i < 2; ++i)
    for (StepRunner* r : runners) r->timed_step();
  std::vector<double> t[3];
  for (int i = 0; i < iters; ++i) {
    for (int k = 0; k < 3; ++k) {
      const int which = (i + k) % 3;
      group->barrier();
      t[which].push_back(runners[which]->timed_step());
    }
  }
  auto timed_waits = [&](const StepRunner& r) {
    return std::vector<double>(r.reducer_waits().end() - iters, r.reducer_waits().end());  // not the warm-up's
  };
  return {all_ranks(*group, t[0]), all_ranks(*group, t[1]), all_ranks(*group, t[2]),
          all_ranks(*group, timed_waits(overlap)), all_ranks(*group, timed_waits(at_launch))};
}

// The step's figures from every rank's step times [ranks, steps]: medians over steps of the slowest
// rank, and beside them the older measure (the slowest rank's median step without communication).
nlohmann::json step_figures(const torch::Tensor& with, const torch::Tensor& without) {
  auto median = [](const torch::Tensor& t) { return t.median().item<double>(); };
  auto slowest = [](const torch::Tensor& t) { return std::get<0>(t.max(0)); };
  auto rows = [](const torch::Tensor& t) {
    std::vector<std::vector<double>> r;
    for (int64_t i = 0; i < t.size(0); ++i)
      r.emplace_back(t[i].data_ptr<double>(), t[i].data_ptr<double>() + t.size(1));
    return r;
  };
  const double step = median(slowest(with)), floor = median(slowest(without));
  // Each step against the floor step timed beside it: a second view of the exposed time, less
  // moved by a slow stretch of the run than the difference of the medians.
  const double paired = median(slowest(with) - slowest(without));
  const double rank_median = std::get<0>(without.median(1)).max().item<double>();
  return {{"step_s", step},
          {"step_without_comm_s", floor},
          {"exposed_comm_s", step - floor},
          {"exposed_share", (step - floor) / step},
          {"exposed_comm_paired_median_s", paired},
          {"slowest_rank_median_step_without_comm_s", rank_median},
          {"exposed_share_against_slowest_rank_median", (step - rank_median) / step},
          {"rank_spread_without_comm_s", median(slowest(without) - std::get<0>(without.min(0)))},
          {"per_rank_steps_s", rows(with)},
          {"per_rank_steps_without_comm_s", rows(without)}};
}

// What the overlap saves: the exposed communication of the overlapped step as a share of the
// no-overlap step's, and the reducer's own waits (slowest rank, median over steps) of both.
nlohmann::json overlap_figures(const nlohmann::json& overlap, const nlohmann::json& at_launch, const StepTimes& t) {
  auto slowest_median = [](const torch::Tensor& w) { return std::get<0>(w.max(0)).median().item<double>(); };
  const double exposed = overlap["exposed_comm_s"].get<double>();
  const double exposed_at_launch = at_launch["exposed_comm_s"].get<double>();
  const double paired = overlap["exposed_comm_paired_median_s"].get<double>();
  const double paired_at_launch = at_launch["exposed_comm_paired_median_s"].get<double>();
  return {{"exposed_overlap_over_no_overlap", exposed / exposed_at_launch},
          {"exposed_paired_overlap_over_no_overlap", paired / paired_at_launch},
          {"reducer_wait_overlap_s", slowest_median(t.overlap_waits)},
          {"reducer_wait_no_overlap_s", slowest_median(t.wait_at_launch_waits)}};
}

void print_step(const nlohmann::json& s, const std::string& what) {
  std::cout << fmt::format(
      "  {:<22} {:>8.1f} ms, {:>7.1f} ms exposed ({:>5.1f}% of the step); paired median {:.1f} ms\n", what,
      s["step_s"].get<double>() * 1e3, s["exposed_comm_s"].get<double>() * 1e3, 100 * s["exposed_share"].get<double>(),
      s["exposed_comm_paired_median_s"].get<double>() * 1e3);
}

void print_allreduce(const nlohmann::json& results) {
  std::cout << fmt::format("{:<12} {:>10} {:>8} {:>14} {:>14} {:>14} {:>14} {:>14}\n", "all-reduce", "MiB", "buckets",
                           "reducer algbw", "reducer busbw", "raw MPI algbw", "raw MPI busbw", "reducer/raw");
  for (const auto& r : results["allreduce"])
    std::cout << fmt::format(
        "{:<12} {:>10.2f} {:>8} {:>11.3f} GB/s {:>9.3f} GB/s {:>9.3f} GB/s {:>9.3f} GB/s {:>13.0f}%\n",
        r["model"].get<std::string>(), r["bytes"].get<double>() / 1048576, r["buckets"].get<int>(),
        r["reducer_algbw_GBps"].get<double>(), r["reducer_busbw_GBps"].get<double>(),
        r["raw_mpi_algbw_GBps"].get<double>(), r["raw_mpi_busbw_GBps"].get<double>(),
        100 * r["raw_mpi_s"].get<double>() / r["reducer_s"].get<double>());
}

nlohmann::json knn_bench(ProcessGroup& group, int64_t bank, int64_t queries, int64_t dim, int iters) {
  torch::manual_seed(21);  // the same bank and queries on every rank
  const auto memory = torch::randn({bank, dim});
  const auto labels = torch::randint(0, 1000, {bank}, torch::kLong);
  const auto query = torch::randn({queries, dim});
  const int world = group.world_size(), rank = group.rank();
  const int64_t shard = (bank + world - 1) / world, begin = std::min(bank, rank * shard);
  const auto mine = memory.narrow(0, begin, std::min(bank, begin + shard) - begin);
  const auto my_labels = labels.narrow(0, begin, mine.size(0));
  moco::eval::KnnOptions options;  // k 200, T 0.1: the monitor's
  torch::Tensor whole_predicted, sharded_predicted;
  const double whole_s = time_per_call(
      group, 0, iters, [&] { whole_predicted = moco::eval::knn_predict(memory, labels, query, 1000, options); });
  const double sharded_s = time_per_call(group, 0, iters, [&] {
    sharded_predicted = moco::eval::knn_predict_sharded(mine, my_labels, bank, query, 1000, options, group);
  });
  if (!sharded_predicted.equal(whole_predicted))
    throw std::runtime_error(fmt::format("rank {}: the sharded kNN predicted otherwise than the whole bank", rank));
  return {{"bank", bank},
          {"queries", queries},
          {"dim", dim},
          {"whole_bank_s", whole_s},
          {"sharded_s", sharded_s},
          {"sharded_over_whole", sharded_s / whole_s},
          {"bank_bytes_per_rank_whole", memory.nbytes()},
          {"bank_bytes_per_rank_sharded",
           group.all_gather(torch::tensor({static_cast<int64_t>(mine.nbytes())})).max().item<int64_t>()}};
}

void print_knn(const nlohmann::json& results) {
  const auto& r = results["knn"];
  std::cout << fmt::format(
      "\nkNN search, bank {} x {}, {} queries, k 200: every rank the whole bank {:.2f} s, bank sharded {:.2f} s "
      "({:.3f} of it); bank per rank {:.1f} MiB whole, {:.1f} MiB sharded\n",
      r["bank"].get<int64_t>(), r["dim"].get<int64_t>(), r["queries"].get<int64_t>(), r["whole_bank_s"].get<double>(),
      r["sharded_s"].get<double>(), r["sharded_over_whole"].get<double>(),
      r["bank_bytes_per_rank_whole"].get<double>() / 1048576, r["bank_bytes_per_rank_sharded"].get<double>() / 1048576);
}

void print_shuffle(const nlohmann::json& results) {
  std::cout << fmt::format("\n{:<16} {:>18} {:>22} {:>18} {:>24}\n", "shuffle-BN", "all-to-all ms",
                           "all-to-all KiB sent", "all-gather ms", "all-gather KiB received");
  for (const auto& r : results["shuffle"])
    std::cout << fmt::format(
        "b={} {}px{:>10} {:>18.2f} {:>22.1f} {:>18.2f} {:>24.1f}\n", r["per_rank_batch"].get<int>(),
        r["image"].get<int>(), "", r["all_to_all_s"].get<double>() * 1e3,
        r["all_to_all_bytes_sent_per_rank"].get<double>() / 1024, r["all_gather_s"].get<double>() * 1e3,
        r["all_gather_bytes_received_per_rank"].get<double>() / 1024);
}

void print_steps(const nlohmann::json& results) {
  const auto& s = results["step"];
  std::cout << fmt::format(
      "\nstep ({}, {} per rank; medians over steps of the slowest rank): {:.1f} ms with "
      "communication, {:.1f} ms without: {:.1f} ms exposed ({:.1f}% of the step)\n",
      s["model"].get<std::string>(), s["per_rank_batch"].get<int>(), s["step_s"].get<double>() * 1e3,
      s["step_without_comm_s"].get<double>() * 1e3, s["exposed_comm_s"].get<double>() * 1e3,
      100 * s["exposed_share"].get<double>());
  std::cout << fmt::format(
      "  without communication the ranks finished {:.1f} ms apart (median); against the slowest "
      "rank's median step ({:.1f} ms) the exposed share is {:.1f}%\n",
      s["rank_spread_without_comm_s"].get<double>() * 1e3,
      s["slowest_rank_median_step_without_comm_s"].get<double>() * 1e3,
      100 * s["exposed_share_against_slowest_rank_median"].get<double>());
  const auto& o = results["overlap"];
  std::cout << fmt::format("overlap against no overlap (every bucket waited for at its launch), floor {:.1f} ms:\n",
                           s["step_without_comm_s"].get<double>() * 1e3);
  print_step(s, "bucketed overlap");
  print_step(results["step_no_overlap"], "no overlap");
  std::cout << fmt::format(
      "  exposed: overlap/no-overlap {:.2f} (paired medians {:.2f}); the reducer waited {:.1f} ms with "
      "overlap, {:.1f} ms without (slowest rank, median)\n",
      o["exposed_overlap_over_no_overlap"].get<double>(), o["exposed_paired_overlap_over_no_overlap"].get<double>(),
      o["reducer_wait_overlap_s"].get<double>() * 1e3, o["reducer_wait_no_overlap_s"].get<double>() * 1e3);
}

struct Settings {
  int iters = 10;
  std::string json_path = "bench_dist.json";
  std::string step_model = "resnet_tiny";
  int64_t step_batch = 64;
  double bucket_mb = moco::dist::GradientReducer::kDefaultBucketCapBytes / 1048576.0;
  bool allreduce_only = false;
  bool knn_only = false;
  int64_t knn_bank = 50000, knn_queries = 2000, knn_dim = 512;
  int knn_iters = 2;
  int64_t bucket_bytes() const { return static_cast<int64_t>(bucket_mb * 1048576); }
};

nlohmann::json measure(std::shared_ptr<ProcessGroup> group, const Settings& set) {
  nlohmann::json results;
  results["ranks"] = group->world_size();
  results["threads_per_rank"] = torch::get_num_threads();
  results["bucket_cap_bytes"] = set.bucket_bytes();
  if (!set.allreduce_only)
    results["knn"] = knn_bench(*group, set.knn_bank, set.knn_queries, set.knn_dim, set.knn_iters);
  if (set.knn_only) return results;
  results["allreduce"] = {allreduce_bench(*group, "resnet_tiny", set.bucket_bytes(), set.iters),
                          allreduce_bench(*group, "resnet18", set.bucket_bytes(), set.iters)};
  if (set.allreduce_only) return results;
  results["shuffle"] = {shuffle_bench(*group, 32, 32, set.iters),
                        shuffle_bench(*group, 32, 224, std::max(2, set.iters / 4))};
  const StepModel model = step_model(set.step_model);
  const StepTimes times = step_seconds(group, model, set.step_batch, set.bucket_bytes(), std::max(set.iters, 20));
  results["step"] = step_figures(times.overlap, times.none);
  results["step"]["model"] = fmt::format("{} {}px", model.arch, model.side);
  results["step"]["per_rank_batch"] = set.step_batch;
  results["step_no_overlap"] = step_figures(times.wait_at_launch, times.none);
  results["overlap"] = overlap_figures(results["step"], results["step_no_overlap"], times);
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();
  CLI::App app{"bench_dist: collective bandwidth, shuffle-BN cost and exposed communication; run under mpirun"};
  Settings set;
  app.add_option("--iters", set.iters, "timed repetitions of each measurement");
  app.add_option("--json", set.json_path, "where rank 0 writes the results");
  app.add_option("--step-model", set.step_model,
                 "network of the step benchmark: resnet_tiny (28 px) or resnet18 (32 px)")
      ->check(CLI::IsMember({"resnet_tiny", "resnet18"}));
  app.add_option("--step-batch", set.step_batch, "per-rank batch of the step benchmark")->check(CLI::PositiveNumber);
  app.add_option("--bucket-mb", set.bucket_mb,
                 "gradient bucket cap in MiB (the first bucket: 1 MiB), as the trainer's dist.bucket_mb")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--allreduce-only", set.allreduce_only,
               "only the all-reduce bandwidths (a quick second look under other MPI settings)");
  app.add_flag("--knn-only", set.knn_only, "only the kNN search, bank sharded against whole");
  app.add_option("--knn-bank", set.knn_bank, "kNN memory bank rows")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--knn-queries", set.knn_queries, "kNN queries")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--knn-dim", set.knn_dim, "kNN feature dimension")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--knn-iters", set.knn_iters, "timed kNN searches each way")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto world = moco::dist::init_world(&argc, &argv);
  if (world.world_size < 2) {
    std::cerr << "bench_dist needs several ranks: mpirun -np 2 " << argv[0] << "\n";
    moco::dist::finalize_world();
    return 2;
  }
  {
    moco::dist::MpiOptions options;
    const nlohmann::json results = measure(std::make_shared<moco::dist::MpiProcessGroup>(options), set);
    if (world.rank == 0) {
      std::cout << fmt::format("{} ranks, {} threads each\n\n", world.world_size, torch::get_num_threads());
      if (results.contains("knn")) print_knn(results);
      if (!set.knn_only) print_allreduce(results);
      if (!set.allreduce_only && !set.knn_only) print_shuffle(results), print_steps(results);
      std::ofstream(set.json_path) << results.dump(2) << "\n";
      std::cout << "results written to " << set.json_path << "\n";
    }
  }
  moco::dist::finalize_world();
  return 0;
}
