#include "train/trainer.h"

#include "data/loader.h"
#include "dist/reducer.h"
#include "eval/knn.h"
#include "metrics/metrics_log.h"
#include "model/moco.h"
#include "preempt/preemption.h"
#include "train/checkpointing.h"
#include "train/device.h"
#include "train/invariants.h"
#include "train/knn_monitor.h"
#include "train/run_logging.h"
#include "train/schedule.h"
#include "train/setup.h"
#include "train/sgd.h"
#include "train/train_state.h"

#include <unistd.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/torch.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

namespace moco::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// moco.bn_splits counts BatchNorm groups in the global batch; each rank runs its share. The math is
// then the same for any world size that divides it (a checkpoint resumes on another number of
// ranks exactly); with more ranks than groups, each rank's batch is one group, as in the reference.
int64_t bn_splits_per_rank(const Config& c, int world_size) {
  if (c.moco.bn_splits <= world_size) return 1;
  if (c.moco.bn_splits % world_size != 0) {
    spdlog::warn(
        "moco.bn_splits {} is not a multiple of the {} ranks: each rank normalises its batch as one BatchNorm group",
        c.moco.bn_splits, world_size);
    return 1;
  }
  return c.moco.bn_splits / world_size;
}

model::ResNetOptions encoder_options(const Config& c, int64_t in_channels, int world_size) {
  auto e = backbone_options(c, in_channels);
  e.bn_splits = bn_splits_per_rank(c, world_size);
  return e;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

std::vector<torch::Tensor> cat_vectors(std::vector<torch::Tensor> a, const std::vector<torch::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

uint64_t fnv1a(const torch::Tensor& tensor, uint64_t hash = 1469598103934665603ULL) {
  const auto t = tensor.to(torch::kCPU).contiguous();
  const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;  // any flipped bit changes it
  return hash;
}

uint64_t fnv1a(const std::vector<torch::Tensor>& tensors) {
  uint64_t hash = 1469598103934665603ULL;
  for (const auto& t : tensors) hash = fnv1a(t, hash);
  return hash;
}

// Stops the run, naming the ranks whose queue or pointer differ from rank 0's, or whose BN buffers
// differed from rank 0's at the step's start (bn_hash, taken right after the step's broadcast; 0
// when the buffers are rank-local). The queue is never broadcast: it stays identical only because
// every rank enqueues the same all-gathered keys.
void check_replicas(model::MocoImpl& moco, uint64_t bn_hash, dist::ProcessGroup& group, int64_t step) {
  const auto mine =
      torch::tensor({static_cast<int64_t>(fnv1a(moco.queue())), moco.queue_pointer(), static_cast<int64_t>(bn_hash)},
                    torch::kLong)
          .view({1, 3});
  const auto all = group.all_gather(mine);
  std::string queue_differs, bn_differs;
  for (int64_t r = 1; r < all.size(0); ++r) {
    if (!torch::equal(all[r].narrow(0, 0, 2), all[0].narrow(0, 0, 2)))
      queue_differs += (queue_differs.empty() ? "" : ", ") + std::to_string(r);
    if (!torch::equal(all[r][2], all[0][2])) bn_differs += (bn_differs.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!queue_differs.empty())
    throw std::runtime_error(
        fmt::format("step {}: the queue or its pointer on rank(s) {} differs from rank 0's", step, queue_differs));
  if (!bn_differs.empty())
    throw std::runtime_error(
        fmt::format("step {}: the BatchNorm buffers on rank(s) {} differed from rank 0's at the step's start, "
                    "after their broadcast (dist.broadcast_buffers)",
                    step, bn_differs));
}

// The contrastive task's accuracy (%): how often the positive outscores every negative, and all but
// at most 4. A flat acc@1 is the first sign of a broken setup (the official code prints it).
std::pair<double, double> positive_rank_accuracy(const torch::Tensor& positive_rank) {
  const double n = static_cast<double>(positive_rank.size(0));
  return {100.0 * positive_rank.eq(0).sum().item<double>() / n, 100.0 * positive_rank.lt(5).sum().item<double>() / n};
}

// "rank 1: all_to_all #5 did not complete" -> "rank 1: step 7: all_to_all #5 did not complete".
std::string with_step(const std::string& message, int64_t step) {
  if (message.rfind("step ", 0) == 0) return message;
  const std::string label = fmt::format("step {}: ", step);
  const auto colon = message.find(": ");
  if (message.rfind("rank ", 0) == 0 && colon != std::string::npos)
    return message.substr(0, colon + 2) + label + message.substr(colon + 2);
  return label + message;
}

// MOCO_INJECT_NAN=STEP[:RANK], a test hook: that rank's query batch of that step is NaN.
struct NanInjection {
  int64_t step = -1;
  int rank = 0;
};
NanInjection nan_injection_from_env() {
  NanInjection n;
  if (const char* env = std::getenv("MOCO_INJECT_NAN")) {
    if (std::sscanf(env, "%" SCNd64 ":%d", &n.step, &n.rank) < 1)
      throw std::invalid_argument(fmt::format("MOCO_INJECT_NAN='{}': expected STEP[:RANK]", env));
    spdlog::warn("MOCO_INJECT_NAN: rank {}'s queries of step {} will be NaN", n.rank, n.step);
  }
  return n;
}

// The output folder can be created and written, checked without creating it.
void check_writable(const std::filesystem::path& dir) {
  auto existing = std::filesystem::absolute(dir);
  while (!std::filesystem::exists(existing) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  if (!std::filesystem::is_directory(existing) || access(existing.c_str(), W_OK) != 0)
    throw std::runtime_error(
        fmt::format("train.output_dir {}: cannot be created or written ({} is not a writable folder)", dir.string(),
                    existing.string()));
}

void print_plan(const Config& c, const RunContext& context, const data::Dataset& train_split,
                const data::Dataset& test_split, int64_t steps_per_epoch, int64_t total_steps,
                const Checkpointing& checkpointing, int64_t parameters) {
  const int world = context.group->world_size();
  spdlog::info("dry run: nothing is trained or written");
  spdlog::info("  world: {} rank(s), this one on {}; {} image(s) per rank per step, global batch {}", world,
               context.device.str(), c.optim.batch_size / world, c.optim.batch_size);
  spdlog::info("  data: {} ({} train / {} test images of {}x{}x{}), {} steps per epoch", c.data.dataset,
               train_split.size(), test_split.size(), train_split.channels(), train_split.height(), train_split.width(),
               steps_per_epoch);
  spdlog::info("  model: {} ({} parameters in the query encoder), queue {}, BatchNorm groups per rank {}", c.model.arch,
               parameters, c.moco.queue_size, bn_splits_per_rank(c, world));
  spdlog::info("  schedule: {} steps ({} epochs){}, lr {} ({}), stop at step {}", total_steps, c.train.epochs,
               c.train.time_budget_s > 0
                   ? fmt::format(" or {} s of training, whichever comes first", c.train.time_budget_s)
                   : "",
               c.optim.base_lr * static_cast<double>(c.optim.batch_size) / 256.0, c.optim.schedule,
               c.train.stop_at_step > 0 ? std::to_string(c.train.stop_at_step) : "none");
  spdlog::info("  checkpoints: {} every {} steps / {} minutes and at the end ({}), keep the last {}{}",
               checkpointing.root(), c.ckpt.every_steps > 0 ? std::to_string(c.ckpt.every_steps) : "-",
               c.ckpt.every_minutes > 0 ? fmt::format("{}", c.ckpt.every_minutes) : "-",
               c.ckpt.async ? "in the background" : "synchronous", c.ckpt.keep_last,
               c.ckpt.keep_every_steps > 0 ? fmt::format(" and every {} steps", c.ckpt.keep_every_steps) : "");
  spdlog::info("  resume: {}", checkpointing.will_try_resume() ? "from " + checkpointing.first_candidate() +
                                                                     " (train.resume=" + c.train.resume + ")"
                                                               : "none, a fresh start");
}

}  // namespace

TrainResult train(const Config& config, const RunContext& context) {
  dist::ProcessGroup& group = *context.group;
  const int rank = group.rank(), world = group.world_size();
  const torch::Device device = context.device;
  const int threads = config.train.threads > 0 ? config.train.threads : available_cores();
  torch::set_num_threads(threads);
  torch::manual_seed(config.train.seed);
  if (config.optim.batch_size % world != 0)
    throw ConfigError(
        fmt::format("optim.batch_size {} is not divisible by the {} ranks", config.optim.batch_size, world));
  Checkpointing checkpointing(config, group);  // what to resume from, checked before any data is loaded

  const std::filesystem::path out_dir(config.train.output_dir);
  if (context.dry_run) {
    check_writable(out_dir);
  } else {
    make_output_dir(out_dir.string());
  }
  std::optional<metrics::MetricsLog> metrics;
  if (rank == 0 && !context.dry_run) {
    std::ofstream config_out(out_dir / "config.yaml");
    config_out << to_yaml(config);
    config_out.flush();
    if (!config_out)
      throw std::runtime_error("train.output_dir '" + out_dir.string() + "': cannot write config.yaml in it");
    metrics.emplace((out_dir / "metrics.jsonl").string(), /*append=*/checkpointing.will_try_resume(),
                    config.train.tensorboard ? (out_dir / "tb").string() : std::string());
  }

  const Splits splits = load_splits(config);
  model::MocoOptions moco_options{config.moco.queue_size, config.moco.momentum, config.moco.temperature,
                                  /*skip_nonfinite=*/true,
                                  /*bf16=*/config.train.precision == "bf16"};
  model::Moco moco(encoder_options(config, splits.train->channels(), world), moco_options, context.group,
                   config.train.seed);
  moco->to(device);
  if (config.train.channels_last) use_channels_last(*moco);
  if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(config.train.cudnn_benchmark);
  moco->train();
  const auto bn_buffers = cat_vectors(moco->encoder_q->buffers(), moco->encoder_k->buffers());
  if (world > 1) {
    // Rank 0's start everywhere: query encoder, its BN buffers, the queue; the key encoder copies it.
    dist::broadcast_parameters(
        cat_vectors(cat_vectors(moco->encoder_q->parameters(), moco->encoder_q->buffers()), moco->queue_state()),
        group);
    moco->copy_query_to_key();
  }
  spdlog::info(
      "{}: {} parameters in the query encoder, feature dim {}, queue {}x{}, {} rank(s) on {}, {} threads, {}{}",
      config.model.arch, model::count_parameters(*moco->encoder_q), moco->encoder_q->feature_dim(), config.model.dim,
      config.moco.queue_size, world, device.str(), threads, config.train.precision,
      config.train.channels_last ? ", channels-last" : "");

  MomentumSgd optimizer(moco->trainable_parameters(), config.optim.momentum, config.optim.weight_decay);
  std::vector<std::string> names;
  for (const auto& item : moco->encoder_q->named_parameters()) names.push_back("encoder_q." + item.key());
  dist::GradientReducer reducer(moco->trainable_parameters(), context.group,
                                static_cast<int64_t>(config.dist.bucket_mb * (1 << 20)),
                                static_cast<int64_t>(config.dist.first_bucket_mb * (1 << 20)), names);

  data::LoaderOptions loader_options;
  loader_options.batch_size = config.optim.batch_size / world;
  loader_options.workers = data_workers(config.data.workers, device, context.local_size);
  loader_options.prefetch = config.data.prefetch;
  loader_options.seed = config.train.seed;
  loader_options.rank = rank;
  loader_options.world_size = world;
  loader_options.pin_memory = device.is_cuda();
  spdlog::info("  data: {} decode/augmentation thread(s) per rank{}, {} batch(es) prefetched", loader_options.workers,
               config.data.workers == 0 ? " (data.workers=0: from the cores)" : "", loader_options.prefetch);
  data::TwoViewLoader loader(splits.train, augment_options(config), loader_options);
  const int64_t steps_per_epoch = loader.batches_per_epoch();
  if (steps_per_epoch < 1)
    throw std::invalid_argument(fmt::format("the train split has {} images, fewer than one global batch of {}",
                                            splits.train->size(), config.optim.batch_size));
  const auto total_steps = static_cast<int64_t>(std::ceil(config.train.epochs * static_cast<double>(steps_per_epoch)));

  if (context.dry_run) {
    print_plan(config, context, *splits.train, *splits.test, steps_per_epoch, total_steps, checkpointing,
               model::count_parameters(*moco->encoder_q));
    return {};
  }

  // Without the per-step broadcast the ranks' BN statistics differ: each rank keeps its own.
  const bool bn_rank_local = world > 1 && !config.dist.broadcast_buffers;
  TrainState state(*moco, optimizer, bn_rank_local);
  Progress at;
  if (const auto dir = checkpointing.resume(state.entries())) {
    at = state.restored_progress();
    if (at.epoch * steps_per_epoch + at.batch_in_epoch != at.step)
      throw std::runtime_error(fmt::format("{}: step {} is not epoch {} batch {} of {} batches per epoch", *dir,
                                           at.step, at.epoch, at.batch_in_epoch, steps_per_epoch));
    checkpointing.mark_saved(at.step, at.train_seconds);
    if (metrics) metrics->write(metrics::CheckpointRecord{"resume", at.step, *dir, 0, 0});
  }

  KnnMonitor knn(config, splits, metrics ? &*metrics : nullptr, group);
  TrainResult result;
  result.knn_trained = std::nan("");
  result.train_seconds = at.train_seconds;
  // The baseline every result is read against. It needs no network and takes seconds, so a resumed
  // run computes it again rather than carrying it in the checkpoint; its row is written once.
  const bool fresh = std::isnan(at.knn_random_init);
  result.knn_raw_pixels = knn.raw_baseline_enabled() ? knn.evaluate_raw_pixels(0, 0, /*record=*/fresh) : std::nan("");
  result.knn_random_init = fresh ? knn.evaluate(moco->encoder_q, "random_init", 0, 0) : at.knn_random_init;
  at.knn_random_init = result.knn_random_init;

  // Progress in [0, 1]: steps done, or the share of the time budget spent, whichever is ahead. Every
  // rank sees rank 0's clock, so all agree on the lr and on when to stop.
  auto progress = [&](int64_t step) {
    double p = static_cast<double>(step) / static_cast<double>(total_steps);
    if (config.train.time_budget_s > 0) p = std::max(p, result.train_seconds / config.train.time_budget_s);
    return p;
  };
  auto stop_requested = [&](int64_t step) {
    return config.train.stop_at_step > 0 && step >= config.train.stop_at_step;
  };
  auto save = [&](int64_t step) {
    // BN buffers follow rank 0 from the next step on: save those.
    if (world > 1 && config.dist.broadcast_buffers) dist::broadcast_parameters(bn_buffers, group);
    at.shuffle_steps = moco->shuffle_steps();
    at.train_seconds = result.train_seconds;
    const auto saved =
        checkpointing.save(state.entries_for_save(at), step,
                           static_cast<double>(step) / static_cast<double>(steps_per_epoch), result.train_seconds);
    if (metrics) metrics->write(metrics::CheckpointRecord{"checkpoint", step, saved.path, saved.seconds, saved.bytes});
  };

  std::optional<InvariantChecker> invariants;
  if (config.debug.check_invariants) invariants.emplace(*moco);
  torch::autograd::AnomalyMode::set_enabled(config.debug.anomaly_detection);
  if (config.debug.check_invariants || config.debug.anomaly_detection)
    spdlog::info("debug: {}{}", config.debug.check_invariants ? "invariants checked every step" : "",
                 config.debug.anomaly_detection ? (config.debug.check_invariants ? ", autograd anomaly detection on"
                                                                                 : "autograd anomaly detection on")
                                                : "");

  const auto nan_injection = nan_injection_from_env();
  int64_t step = at.step, interval_steps = 0, loss_steps = 0, shuffle_bytes = 0, bad_steps = 0, bad_in_a_row = 0,
          epoch_steps = 0;
  double loss_sum = 0, interval_seconds = 0, acc1_sum = 0, acc5_sum = 0, interval_wait = 0, epoch_loss = 0,
         epoch_acc1 = 0;
  bool done = progress(step) >= 1.0 || stop_requested(step);
  if (done) spdlog::info("nothing to train: the run is at step {} of {}", step, total_steps);
  try {
    for (int64_t epoch = at.epoch, first_batch = at.batch_in_epoch; !done; ++epoch, first_batch = 0) {
      loader.start_epoch(epoch, first_batch);
      int64_t batch_in_epoch = first_batch;
      for (;;) {
        const auto wait_start = Clock::now();
        auto batch = loader.next();
        if (!batch) break;
        const double data_wait = seconds_since(wait_start);
        const auto step_start = Clock::now();
        const double lr = learning_rate(config, progress(step) * config.train.epochs);
        optimizer.set_lr(lr);

        if (world > 1 && config.dist.broadcast_buffers) dist::broadcast_parameters(bn_buffers, group);
        const bool check_step =
            world > 1 && config.dist.queue_check_every > 0 && (step + 1) % config.dist.queue_check_every == 0;
        const uint64_t bn_hash = check_step && config.dist.broadcast_buffers ? fnv1a(bn_buffers) : 0;
        if (invariants) invariants->before_forward();
        auto query = to_device(batch->query, device, config.train.channels_last);
        if (nan_injection.step == step + 1 && nan_injection.rank == rank) query.fill_(std::nan(""));
        const auto out = moco->forward(query, to_device(batch->key, device, config.train.channels_last));
        if (out.skipped()) {
          ++bad_steps;
          if (++bad_in_a_row > config.train.max_bad_steps)
            throw std::runtime_error(fmt::format(
                "step {}: the queries of rank(s) {} hold NaN or Inf, {} step(s) in a row (train.max_bad_steps {}); "
                "the state is that of the step before; checkpoints, if any, are in {}",
                step + 1, fmt::join(out.skipped_by, ", "), bad_in_a_row, config.train.max_bad_steps,
                checkpointing.root()));
          spdlog::warn(
              "step {}: the queries of rank(s) {} hold NaN or Inf: every rank skips the step ({} in a row, "
              "train.max_bad_steps {})",
              step + 1, fmt::join(out.skipped_by, ", "), bad_in_a_row, config.train.max_bad_steps);
        } else {
          bad_in_a_row = 0;
          if (invariants) invariants->after_forward(step + 1);
          optimizer.zero_grad();
          out.loss.backward();
          reducer.finalize();
          optimizer.step();
          if (invariants) invariants->after_step(step + 1);
        }

        // One small all-reduce per step gives every rank the mean loss, rank 0's clock, and whether any
        // rank was asked to stop (so that all stop after the same step).
        const double step_seconds = seconds_since(step_start);
        const auto [acc1, acc5] =
            out.skipped() ? std::pair<double, double>{0, 0} : positive_rank_accuracy(out.positive_rank);
        auto shared = torch::tensor(
            {out.skipped() ? 0.0 : out.loss.item<double>(), rank == 0 ? result.train_seconds + step_seconds : 0.0,
             preempt::signal_code(preempt::preemption_signal()), acc1, acc5, data_wait},
            torch::kDouble);
        if (world > 1) group.all_reduce(shared, dist::ReduceOp::kSum);
        const double loss = shared[0].item<double>() / world;
        if (!std::isfinite(loss)) throw std::runtime_error(fmt::format("the loss became {} at step {}", loss, step));
        result.train_seconds = shared[1].item<double>();
        const int stop_signal = preempt::signal_from_code(shared[2].item<double>());

        ++step;
        ++batch_in_epoch;
        at.step = step;
        at.epoch = batch_in_epoch == steps_per_epoch ? epoch + 1 : epoch;
        at.batch_in_epoch = batch_in_epoch == steps_per_epoch ? 0 : batch_in_epoch;
        if (check_step) check_replicas(*moco, bn_hash, group, step);
        interval_seconds += step_seconds;
        interval_wait += shared[5].item<double>() / world;
        if (!out.skipped()) {
          acc1_sum += shared[3].item<double>() / world;
          acc5_sum += shared[4].item<double>() / world;
          epoch_loss += loss;
          epoch_acc1 += shared[3].item<double>() / world;
          ++epoch_steps;
          loss_sum += loss;
          shuffle_bytes += moco->last_shuffle_bytes();
          ++loss_steps;
        }
        ++interval_steps;
        const double p = progress(step);
        result.preempted_by = stop_signal;
        done = p >= 1.0 || stop_requested(step) || stop_signal != 0;
        if (step % config.train.log_every == 0 || done) {
          metrics::StepRecord r;
          r.step = step;
          r.epoch = static_cast<double>(step) / static_cast<double>(steps_per_epoch);
          r.loss = loss_steps > 0 ? loss_sum / static_cast<double>(loss_steps) : std::nan("");
          r.bad_steps = bad_steps;
          r.acc1 = loss_steps > 0 ? acc1_sum / static_cast<double>(loss_steps) : std::nan("");
          r.acc5 = loss_steps > 0 ? acc5_sum / static_cast<double>(loss_steps) : std::nan("");
          r.data_wait_s = interval_wait / static_cast<double>(interval_steps);
          r.data_wait_share = interval_wait / (interval_wait + interval_seconds);
          r.lr = lr;
          r.img_per_s = static_cast<double>(interval_steps * config.optim.batch_size) / interval_seconds;
          r.elapsed_s = result.train_seconds;
          r.shuffle_bytes_per_step = loss_steps > 0 ? shuffle_bytes / loss_steps : 0;
          r.grad_bytes_per_step = reducer.last_stats().bytes_reduced;
          if (metrics) metrics->write(r);
          spdlog::info(
              "epoch {:.2f} step {}/{} loss {:.4f} acc@1 {:.1f}% acc@5 {:.1f}% lr {:.4g} {:.1f} img/s data wait "
              "{:.0f}% ETA {}{}",
              r.epoch, step, config.train.time_budget_s > 0 ? "~" : std::to_string(total_steps), r.loss, r.acc1, r.acc5,
              lr, r.img_per_s, 100 * r.data_wait_share,
              format_duration(result.train_seconds * std::max(0.0, 1.0 - p) / std::max(p, 1e-9)),
              world > 1 ? fmt::format(" | shuffle {:.1f} KiB/step, gradients {:.1f} MiB/step",
                                      r.shuffle_bytes_per_step / 1024.0, r.grad_bytes_per_step / 1048576.0)
                        : "");
          loss_sum = acc1_sum = acc5_sum = interval_wait = 0;
          interval_steps = loss_steps = 0;
          interval_seconds = 0;
          shuffle_bytes = 0;
        }
        if (done) break;
        if (checkpointing.due(step, result.train_seconds)) save(step);
      }
      const int64_t epochs_done = epoch + 1;
      if (!done && epoch_steps > 0)
        spdlog::info(
            "epoch {} done: mean loss {:.4f}, acc@1 {:.1f}% over {} step(s); {} step(s) skipped so far; {} of "
            "training{}",
            epochs_done, epoch_loss / static_cast<double>(epoch_steps), epoch_acc1 / static_cast<double>(epoch_steps),
            epoch_steps, bad_steps, format_duration(result.train_seconds),
            splits.train->bad_files() > 0
                ? fmt::format("; {} unreadable image file(s) skipped by this rank", splits.train->bad_files())
                : "");
      epoch_loss = epoch_acc1 = 0;
      epoch_steps = 0;
      if (!done && config.knn.every_epochs > 0 && epochs_done % config.knn.every_epochs == 0) {
        if (world > 1) dist::broadcast_parameters(bn_buffers, group);
        knn.evaluate(moco->encoder_q, "trained", step, static_cast<double>(epochs_done));
      }
    }
  } catch (const std::exception& e) {
    // Whatever failed (a collective that timed out, a worker, a check) happened in this step.
    throw std::runtime_error(with_step(e.what(), step + 1));
  }
  result.steps = step;
  if (!checkpointing.saved_at(step)) save(step);
  checkpointing.finish();
  result.checkpoint = ckpt::step_dir(checkpointing.root(), step);
  if (result.preempted_by != 0) {
    const std::string signal = result.preempted_by == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
    if (metrics) metrics->write(metrics::PreemptRecord{step, signal, result.checkpoint});
    spdlog::info(
        "preempted by {} after step {} of {}: checkpoint {} committed; the same command continues from it "
        "(train.resume=auto)",
        signal, step, total_steps, result.checkpoint);
    return result;
  }
  if (progress(step) < 1.0) {
    spdlog::info(
        "stopped after step {} of {} (train.stop_at_step); the same command with train.stop_at_step=0 continues from "
        "{}",
        step, total_steps, result.checkpoint);
    return result;
  }
  result.finished = true;
  // The BN running statistics that evaluation uses are rank 0's, as in the reference.
  if (world > 1) dist::broadcast_parameters(bn_buffers, group);
  result.knn_trained =
      knn.evaluate(moco->encoder_q, "trained", step, static_cast<double>(step) / static_cast<double>(steps_per_epoch));
  spdlog::info(
      "kNN top-1: {}random init {:.2f}%, trained {:.2f}% after {} steps ({:+.2f} points over random init), {:.0f}s of "
      "training",
      std::isnan(result.knn_raw_pixels) ? "" : fmt::format("raw pixels {:.2f}%, ", result.knn_raw_pixels),
      result.knn_random_init, result.knn_trained, step, result.knn_trained - result.knn_random_init,
      result.train_seconds);
  if (result.knn_trained < result.knn_raw_pixels)
    spdlog::warn(
        "the trained features score {:.2f} points below the raw pixels they start from: as a kNN feature, training has "
        "not "
        "yet beaten the pixels",
        result.knn_raw_pixels - result.knn_trained);
  return result;
}

}  // namespace moco::train
