// FlatTensors (Note [Flat buffers] in model/flat_tensors.h): tensors bound to slices of one buffer,
// values, shapes and memory orders kept, bound again when something moves them.
#include "model/flat_tensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

using moco::model::FlatTensors;

namespace {

std::vector<torch::Tensor> some_parameters() {
  torch::manual_seed(4);
  return {torch::randn({4, 3, 3, 3}).contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_(),
          torch::randn({5}).requires_grad_(), torch::randn({}).requires_grad_(), torch::randn({2, 130})};
}

bool shares_storage(const torch::Tensor& a, const torch::Tensor& b) {
  return a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

}  // namespace

TEST(FlatTensorsTest, EachTensorBecomesAnAlignedSliceWithItsValuesShapeAndMemoryOrder) {
  const auto tensors = some_parameters();
  std::vector<torch::Tensor> before;
  for (const auto& t : tensors) before.push_back(t.detach().clone());
  FlatTensors flat(tensors);
  const auto buffer = flat.flat();
  int64_t covered = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_TRUE(shares_storage(tensors[i], buffer)) << i;
    EXPECT_EQ(tensors[i].storage_offset() % (FlatTensors::kAlignBytes / 4), 0) << i;
    EXPECT_EQ(tensors[i].strides(), before[i].strides()) << i;
    EXPECT_TRUE(torch::equal(tensors[i], before[i])) << i;
    EXPECT_TRUE(flat.is_slice(tensors[i], buffer, i)) << i;
    covered += tensors[i].numel();
  }
  EXPECT_EQ(buffer.abs().sum().item<float>(), [&] {
    float sum = 0;
    for (const auto& b : before) sum += b.abs().sum().item<float>();
    return sum;
  }()) << "the gaps hold zeros";
  EXPECT_GT(buffer.numel(), covered);
  buffer.mul_(2);  // one op on the buffer reaches every tensor
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(torch::equal(tensors[i], before[i] * 2)) << i;
}

TEST(FlatTensorsTest, ASecondOneOverTheSameTensorsSharesTheBuffer) {
  const auto tensors = some_parameters();
  FlatTensors first(tensors);
  const void* where = tensors[1].data_ptr();
  FlatTensors second(tensors);
  EXPECT_EQ(tensors[1].data_ptr(), where) << "not copied again";
  EXPECT_TRUE(shares_storage(first.flat(), second.flat()));
  EXPECT_TRUE(first.same_layout(second));
}

// Module::to or use_channels_last set a tensor's data anew: the next flat() binds it again, in its
// new memory order, values kept, and says so through layout_version().
TEST(FlatTensorsTest, ATensorMovedOffItsSliceIsBoundAgain) {
  auto tensors = some_parameters();
  FlatTensors flat(tensors);
  const auto version = flat.layout_version();
  const auto values = tensors[0].detach().clone();
  {
    torch::NoGradGuard no_grad;
    tensors[0].set_data(tensors[0].contiguous());  // channels-last -> contiguous, elsewhere
  }
  const auto buffer = flat.flat();
  EXPECT_NE(flat.layout_version(), version);
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(flat.is_slice(tensors[i], buffer, i)) << i;
  EXPECT_TRUE(tensors[0].is_contiguous());
  EXPECT_TRUE(torch::equal(tensors[0], values));
  buffer.zero_();
  EXPECT_EQ(tensors[0].abs().sum().item<float>(), 0.0f);
}

TEST(FlatTensorsTest, RefusesTensorsOfTwoDtypes) {
  EXPECT_THROW(FlatTensors({torch::zeros({3}), torch::zeros({3}, torch::kLong)}), std::invalid_argument);
}

// The buffer's own version counter takes an update through it; bump_versions() tells autograd.
TEST(FlatTensorsTest, BumpVersionsBumpsEveryTensorsVersion) {
  const auto tensors = some_parameters();
  FlatTensors flat(tensors);
  const auto before = tensors[1]._version();
  flat.flat().add_(1);
  EXPECT_EQ(tensors[1]._version(), before);
  flat.bump_versions();
  EXPECT_GT(tensors[1]._version(), before);
}
