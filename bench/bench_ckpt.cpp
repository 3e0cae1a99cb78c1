// bench_ckpt: checkpoint speed against the disk, run as 1 process or under mpirun -np N.
//
// The state is the trainer's own (TrainState) for ResNet-50 MoCo v2 (MLP head, K = 65536, dim 128):
// both encoders, the queue, the SGD momentum buffers. In one command it times
//   - dd writing the same number of bytes to the same folder with conv=fsync (the disk's bandwidth),
//   - a synchronous save (every rank writes its shard, rank 0 commits; fsyncs included),
//   - a load (read, verify, broadcast), and dd reading a file of that size back,
//   - an asynchronous save: the time the training loop is blocked, and the time to commit.
// Each is the slowest rank's time, best of --repeats.
#include "ckpt/async_saver.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "dist/bootstrap.h"
#include "dist/mpi_process_group.h"
#include "moco_v2/moco_v2.h"
#include "moco_v2/moco.h"
#include "optim/sgd.h"
#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"
#include "train/pretraining.h"
#include "train/train_state.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double slowest(moco::dist::ProcessGroup& group, double seconds) {
  auto t = torch::tensor({seconds}, torch::kDouble);
  return group.world_size() > 1 ? group.all_gather(t).max().item<double>() : seconds;
}

template <typename Fn>
double best_of(moco::dist::ProcessGroup& group, int repeats, Fn fn) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    group.barrier();
    const auto start = Clock::now();
    fn(i);
    best = std::min(best, slowest(group, std::chrono::duration<double>(Clock::now() - start).count()));
  }
  return best;
}

// dd's own time for `bytes` through a file in dir (rank 0 runs it; the others wait).
double dd_seconds(moco::dist::ProcessGroup& group, const std::string& command) {
  double seconds = 0;
  if (group.rank() == 0) {
    const auto start = Clock::now();
    if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  auto t = torch::tensor({seconds}, torch::kDouble);
  group.broadcast(t, 0);
  return t.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();          // host memory as moco_dist runs it
  CLI::App app{
      "bench_ckpt: ResNet-50 MoCo v2 checkpoint save/load against dd on the same disk; run plain or under mpirun"};
  std::string dir = "bench_ckpt_tmp", json_path = "bench_ckpt.json";
  int repeats = 3;
  app.add_option("--dir", dir, "scratch folder on the disk to measure (deleted afterwards)")->capture_default_str();
  app.add_option("--repeats", repeats, "best of this many runs of each")->capture_default_str();
  app.add_option("--json", json_path, "where rank 0 writes the results")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto world_info = moco::dist::init_world(&argc, &argv);
  int rc = 0;
  try {
    std::shared_ptr<moco::dist::ProcessGroup> group;
    if (world_info.world_size == 1) {
      group = std::make_shared<moco::dist::LocalProcessGroup>();
    } else {
      group = std::make_shared<moco::dist::MpiProcessGroup>(moco::dist::MpiOptions{});
    }
    const int rank = group->rank(), world = group->world_size();
    auto encoder = moco::model::resnet_options_for("resnet50");
    encoder.mlp_head = true;
    moco::moco_v2::MocoOptions options;
    options.queue_size = 65536;
    moco::moco_v2::Moco moco(encoder, options, group, 0);
    moco::optim::MomentumSgd sgd(moco->trainable_parameters(), 0.9, 1e-4);
    moco::train::TrainState state(moco::moco_v2::state_entries(*moco, sgd, false), moco::train::pretraining_layout());
    const auto& entries = state.entries_for_save({});
    int64_t bytes = 0;
    for (const auto& e : entries)
      bytes += e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size()) * (e.rank_local ? world : 1);
    const double mib = bytes / 1048576.0;

    const std::string root = (fs::path(dir) / fmt::format("w{}", world)).string();
    if (rank == 0) {
      fs::remove_all(root);
      fs::create_directories(root);
    }
    group->barrier();
    const auto dd_file = (fs::path(root) / "dd.bin").string();
    const int64_t blocks = (bytes + (1 << 20) - 1) >> 20;
    double dd_write = 1e30, dd_read = 1e30;
    for (int i = 0; i < repeats; ++i) {
      dd_write = std::min(dd_write,
                          dd_seconds(*group, fmt::format("dd if=/dev/zero of={} bs=1M count={} conv=fsync status=none",
                                                         dd_file, blocks)));
      dd_read = std::min(dd_read, dd_seconds(*group, fmt::format("dd if={} of=/dev/null bs=1M status=none", dd_file)));
    }
    if (rank == 0) fs::remove(dd_file);

    moco::ckpt::SaveInfo info{1, 0, 256, "", {}};
    const double save_s = best_of(*group, repeats, [&](int i) {
      info.step = 1 + i;
      moco::ckpt::save_checkpoint(root, entries, info, *group);
    });
    const std::string saved = moco::ckpt::step_dir(root, info.step);
    const double load_s = best_of(*group, repeats, [&](int) { moco::ckpt::load_checkpoint(saved, entries, *group); });

    double blocked_s = 1e30, async_total_s = 1e30;
    {
      moco::ckpt::AsyncSaver saver(*group);
      for (int i = 0; i < repeats; ++i) {
        info.step = 100 + i;
        group->barrier();
        const auto start = Clock::now();
        saver.save(root, entries, info);
        blocked_s = std::min(blocked_s, slowest(*group, std::chrono::duration<double>(Clock::now() - start).count()));
        saver.wait();
        async_total_s =
            std::min(async_total_s, slowest(*group, std::chrono::duration<double>(Clock::now() - start).count()));
      }
    }
    if (rank == 0) fs::remove_all(root);

    nlohmann::json r{{"ranks", world},
                     {"state_mib", mib},
                     {"dd_write_fsync_mib_s", mib / dd_write},
                     {"save_mib_s", mib / save_s},
                     {"save_vs_dd", dd_write / save_s},
                     {"dd_read_mib_s", mib / dd_read},
                     {"load_mib_s", mib / load_s},
                     {"load_vs_dd", dd_read / load_s},
                     {"sync_save_s", save_s},
                     {"async_blocked_s", blocked_s},
                     {"async_blocked_share", blocked_s / save_s},
                     {"async_commit_s", async_total_s}};
    if (rank == 0) {
      std::cout << fmt::format(
          "bench_ckpt: ResNet-50 MoCo v2 state, K=65536: {:.1f} MiB, {} rank(s), best of {}\n"
          "  dd write+fsync   {:8.1f} MiB/s\n"
          "  save (sync)      {:8.1f} MiB/s  = {:.2f} x dd   ({:.2f} s)\n"
          "  dd read          {:8.1f} MiB/s\n"
          "  load             {:8.1f} MiB/s  = {:.2f} x dd   ({:.2f} s)\n"
          "  async save       blocked {:.3f} s = {:.1f}% of a synchronous save; committed after {:.2f} s\n",
          mib, world, repeats, mib / dd_write, mib / save_s, dd_write / save_s, save_s, mib / dd_read, mib / load_s,
          dd_read / load_s, load_s, blocked_s, 100 * blocked_s / save_s, async_total_s);
      std::ofstream(json_path) << r.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    if (world_info.world_size > 1) moco::dist::abort_world(e.what(), 1);
    rc = 1;
  }
  moco::dist::finalize_world();
  return rc;
}
