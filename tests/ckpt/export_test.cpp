// A trainer checkpoint's query-encoder backbone, exported by moco_ckpt's code, loads into
// torchvision (Debian's /usr/bin/python3) with strict shapes on everything but fc and gives the same
// pooled features as the C++ model; its torch and detectron2 exports hold what the HDF5 one does
// (tests/interop/check_torch_exports.py).
#include "ckpt/checkpoint.h"
#include "ckpt/export.h"
#include "ckpt/torch_export.h"
#include "moco_v2/moco.h"
#include "moco_v2/moco_v2.h"
#include "optim/sgd.h"
#include "train/pretraining.h"
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
  moco_v2::MocoOptions options;
  options.queue_size = 256;
  auto group = std::make_shared<dist::LocalProcessGroup>();
  moco_v2::Moco moco(encoder, options, group, /*seed=*/5);
  {
    // Trained-looking BatchNorm statistics, so that the export's buffers matter.
    torch::NoGradGuard no_grad;
    for (const auto& item : moco->encoder_q->named_buffers()) {
      if (item.key().find("running_mean") != std::string::npos) item.value().normal_(0, 0.1);
      if (item.key().find("running_var") != std::string::npos) item.value().uniform_(0.5, 1.5);
    }
  }
  optim::MomentumSgd sgd(moco->trainable_parameters(), 0.9, 1e-4);
  train::TrainState state(moco_v2::state_entries(*moco, sgd, false), train::pretraining_layout());
  const auto dir = fs::temp_directory_path() / ("moco_ckpt_export_" + arch);
  fs::remove_all(dir);
  const auto checkpoint =
      ckpt::save_checkpoint((dir / "checkpoints").string(), state.entries_for_save({}), {1, 0, 256, "", {}}, *group);
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
  const std::string interop = std::string(MOCO_TEST_DATA_DIR) + "/../interop/";
  const std::string command =
      "/usr/bin/python3 " + interop + "check_torchvision_export.py " + export_path + " " + io_path + " " + arch;
  EXPECT_EQ(std::system(command.c_str()), 0) << command << " (needs Debian's python3-torchvision and python3-h5py)";

  // The same checkpoint in the other formats; detectron2's keeps the head, as the official converter.
  const auto full_path = (dir / "full.h5").string(), torch_path = (dir / "backbone.pth").string(),
             d2_path = (dir / "detectron2.pth").string();
  ckpt::export_module(checkpoint, "encoder_q", {}, full_path);
  ckpt::export_module(checkpoint, "encoder_q", {"fc."}, torch_path, ckpt::ExportFormat::torch);
  ckpt::export_module(checkpoint, "encoder_q", {}, d2_path, ckpt::ExportFormat::detectron2);
  const std::string check = "/usr/bin/python3 " + interop + "check_torch_exports.py " + export_path + " " + full_path +
                            " " + torch_path + " " + d2_path + " " + io_path + " " + arch;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

}  // namespace

TEST(CkptExport, Resnet18LoadsIntoTorchvisionWithTheSameFeatures) { expect_torchvision_agrees("resnet18"); }
TEST(CkptExport, Resnet50LoadsIntoTorchvisionWithTheSameFeatures) { expect_torchvision_agrees("resnet50"); }

TEST(CkptExport, Detectron2KeysFollowTheOfficialConverter) {
  EXPECT_EQ(ckpt::detectron2_key("conv1.weight"), "stem.conv1.weight");
  EXPECT_EQ(ckpt::detectron2_key("bn1.running_var"), "stem.conv1.norm.running_var");
  EXPECT_EQ(ckpt::detectron2_key("layer4.2.bn3.num_batches_tracked"), "res5.2.conv3.norm.num_batches_tracked");
  EXPECT_EQ(ckpt::detectron2_key("layer2.0.downsample.0.weight"), "res3.0.shortcut.weight");
  EXPECT_EQ(ckpt::detectron2_key("layer2.0.downsample.1.bias"), "res3.0.shortcut.norm.bias");
  EXPECT_EQ(ckpt::detectron2_key("fc.2.weight"), "stem.fc.2.weight");
}

TEST(CkptExport, FormatsByName) {
  EXPECT_EQ(ckpt::export_format_named("h5"), ckpt::ExportFormat::h5);
  EXPECT_EQ(ckpt::export_format_named("torch"), ckpt::ExportFormat::torch);
  EXPECT_EQ(ckpt::export_format_named("detectron2"), ckpt::ExportFormat::detectron2);
  EXPECT_EQ(ckpt::export_format_named("moco"), ckpt::ExportFormat::moco);
  EXPECT_EQ(ckpt::export_format_named("pt"), std::nullopt);
}
