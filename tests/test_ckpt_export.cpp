// A trainer checkpoint's query-encoder backbone, exported by moco_ckpt's code, loads into
// torchvision (Debian's /usr/bin/python3) with strict shapes on everything but fc and gives the same
// pooled features as the C++ model.
#include "ckpt/checkpoint.h"
#include "ckpt/export.h"
#include "model/moco.h"
#include "train/sgd.h"
#include "train/train_state.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

using namespace moco;
namespace fs = std::filesystem;

namespace {

void expect_torchvision_agrees(const std::string& arch) {
  auto encoder = model::resnet_options_for(arch);
  encoder.in_channels = 3;
  encoder.small_stem = false;
  encoder.mlp_head = true;
  model::MocoOptions options;
  options.queue_size = 256;
  auto group = std::make_shared<dist::LocalProcessGroup>();
  model::Moco moco(encoder, options, group, /*seed=*/5);
  {
    // Trained-looking BatchNorm statistics, so that the export's buffers matter.
    torch::NoGradGuard no_grad;
    for (const auto& item : moco->encoder_q->named_buffers()) {
      if (item.key().find("running_mean") != std::string::npos) item.value().normal_(0, 0.1);
      if (item.key().find("running_var") != std::string::npos) item.value().uniform_(0.5, 1.5);
    }
  }
  train::MomentumSgd sgd(moco->trainable_parameters(), 0.9, 1e-4);
  train::TrainState state(*moco, sgd, false);
  const auto dir = fs::temp_directory_path() / ("moco_ckpt_export_" + arch);
  fs::remove_all(dir);
  const auto checkpoint =
      ckpt::save_checkpoint((dir / "checkpoints").string(), state.entries_for_save({}), {1, 0, 256, ""}, *group);
  const auto export_path = (dir / "export.h5").string();
  const auto summary = ckpt::export_module(checkpoint, "encoder_q", {"fc."}, export_path);
  EXPECT_GT(summary.tensors, 100);

  torch::manual_seed(6);
  const auto input = torch::randn({2, 3, 64, 64});
  moco->encoder_q->eval();
  torch::Tensor features;
  {
    torch::NoGradGuard no_grad;
    features = moco->encoder_q->features(input);
  }
  const auto io_path = (dir / "io.h5").string();
  {
    ckpt::H5TensorWriter io(io_path);
    io.write("input", input);
    io.write("features", features);
    io.close();
  }
  const std::string script = std::string(MOCO_TEST_DATA_DIR) + "/../interop/check_torchvision_export.py";
  const std::string command = "/usr/bin/python3 " + script + " " + export_path + " " + io_path + " " + arch;
  EXPECT_EQ(std::system(command.c_str()), 0) << command << " (needs Debian's python3-torchvision and python3-h5py)";
}

}  // namespace

TEST(CkptExport, Resnet18LoadsIntoTorchvisionWithTheSameFeatures) { expect_torchvision_agrees("resnet18"); }
TEST(CkptExport, Resnet50LoadsIntoTorchvisionWithTheSameFeatures) { expect_torchvision_agrees("resnet50"); }
