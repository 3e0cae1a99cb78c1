#include "train/training_run.h"

#include "run/device.h"
#include "run/run_output.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace moco::train {
namespace {

// Threads and the seed, before anything draws; a batch that does not split over the ranks refused.
int prepare_process(const run::Config& config, int world, int local_size) {
  const int threads = run::intra_op_threads(config.train.threads, local_size);
  torch::set_num_threads(threads);
  torch::manual_seed(config.train.seed);
  if (config.optim.batch_size % world != 0)
    throw run::ConfigError(
        fmt::format("optim.batch_size {} is not divisible by the {} ranks", config.optim.batch_size, world));
  return threads;
}

data::LoaderOptions train_loader_options(const run::Config& config, const run::RunContext& context) {
  const int world = context.group->world_size();
  data::LoaderOptions options;
  options.batch_size = config.optim.batch_size / world;
  options.workers = run::data_workers(config.data.workers, context.device, context.local_size);
  options.prefetch = config.data.prefetch;
  options.seed = config.train.seed;
  options.rank = context.group->rank();
  options.world_size = world;
  options.pin_memory = context.device.is_cuda();
  options.uint8_views = uint8_views(context.device, run::augment_options(config).recipe);
  run::log_rank_cores(context.device, context.local_size, torch::get_num_threads(), options.workers);
  spdlog::info("  data: {} decode/augmentation thread(s) per rank{}, {} batch(es) prefetched", options.workers,
               config.data.workers == 0 ? " (data.workers=0: from the cores)" : "", options.prefetch);
  return options;
}

constexpr double kMostSteps = 9007199254740992.0;  // 2^53

RunShape run_shape(const run::Config& c, const data::TwoViewLoader& loader, const data::Dataset& train, int world) {
  RunShape shape;
  shape.steps_per_epoch = loader.batches_per_epoch();
  shape.world = world;
  // The config's fault, found once the data is read (before the output folder holds anything).
  if (shape.steps_per_epoch < 1) {
    const auto why = fmt::format("the train split has {} images, fewer than one global batch", train.size());
    throw run::ConfigError(fmt::format("key 'optim.batch_size' ({}): {}", c.optim.batch_size, why));
  }
  const double steps = std::ceil(c.train.epochs * static_cast<double>(shape.steps_per_epoch));
  // Past 2^53 a double no longer counts steps one by one (and past 2^63 the cast to int64_t is
  // undefined: train.epochs=1e30 made "-9223372036854775808 steps" and a schedule over a negative length).
  if (steps > kMostSteps)
    throw run::ConfigError(
        fmt::format("key 'train.epochs' ({}) at {} steps per epoch makes {:.3g} steps: more than "
                    "any run takes (at most {:.3g})",
                    c.train.epochs, shape.steps_per_epoch, steps, kMostSteps));
  shape.total_steps = static_cast<int64_t>(steps);
  return shape;
}

}  // namespace

bool uint8_views(torch::Device device, data::Recipe recipe) {
  return device.is_cuda() && recipe != data::Recipe::kSimple;
}

TrainingRun::TrainingRun(const run::Config& c, const run::RunContext& ctx)
    : config(c),
      context(ctx),
      group(*ctx.group),
      rank(group.rank()),
      world(group.world_size()),
      threads(prepare_process(c, world, ctx.local_size)),
      checkpointing(c, group),
      splits(run::load_splits(c)),
      method(run::method_room(c).make(c, ctx, splits.train->channels())),
      loader(splits.train, run::augment_options(c), train_loader_options(c, ctx)),
      batches(loader, run::augment_options(c), splits.train->channels(), ctx.device),
      shape(run_shape(c, loader, *splits.train, world)),
      metrics(run::open_run_output(c, rank, checkpointing, ctx.dry_run)) {
  method->set_run_length(shape.total_steps);
  spdlog::info("  views: {}", batches.describe());
}

void TrainingRun::log_plan() {
  const auto facts = method->facts();
  train::log_plan(config, shape,
                  {splits.train.get(), splits.test.get(), facts.parameters, facts.plan, context.device.str()},
                  checkpointing);
}

}  // namespace moco::train
