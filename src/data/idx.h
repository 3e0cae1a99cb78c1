// defines: readers for the IDX format (MNIST, Fashion-MNIST), gzip-compressed or plain
#pragma once

#include "data/dataset.h"
#include "data/fingerprint.h"

#include <memory>
#include <string>

namespace moco::data {

// uint8 [N, H, W] from an idx3-ubyte file (magic 0x00000803). Throws std::runtime_error naming the
// file on a missing, truncated or foreign file.
torch::Tensor read_idx_images(const std::string& path);
// int64 [N] from an idx1-ubyte file (magic 0x00000801).
torch::Tensor read_idx_labels(const std::string& path);

enum class Split { kTrain, kTest };

// The four standard files under root: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
// Checks that image and label counts agree and that every label lies in [0, 10).
std::shared_ptr<InMemoryDataset> load_mnist_style(const std::string& root, Split split);

// Both splits; also checks that test images have the train images' size.
struct MnistSplits {
  std::shared_ptr<InMemoryDataset> train, test;
};
MnistSplits load_mnist_style_splits(const std::string& root);

// The split's identity for its fingerprint: its two files (the ones load_mnist_style reads), each
// with its size and the CRC-32 of its bytes as stored, and the count of images its labels file holds.
// Errors as load_mnist_style's.
SplitListing mnist_style_listing(const std::string& root, Split split);

}  // namespace moco::data
