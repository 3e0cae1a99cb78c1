// bench_data: images per second of one thread decoding JPEGs and making MoCo v2's two 224 px views
// (encoded_train_views), with and without the DCT scaling; bench_data_torchvision.py times the
// official torchvision + PIL transform on the same files.
//   build/bench_data DIR [--rounds N]     (DIR: *.jpg, e.g. ImageNet-sized 500x375 photos)
#include "data/augment.h"
#include "data/encoded_views.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace moco::data;
  if (argc < 2) {
    std::cerr << "usage: bench_data DIR [--rounds N]\n";
    return 2;
  }
  int rounds = 4;
  if (argc == 4 && std::strcmp(argv[2], "--rounds") == 0) rounds = std::stoi(argv[3]);
  std::vector<std::vector<uint8_t>> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() != ".jpg" && e.path().extension() != ".JPEG" && e.path().extension() != ".jpeg") continue;
    std::ifstream in(e.path(), std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (files.empty()) {
    std::cerr << "bench_data: no .jpg files in " << argv[1] << "\n";
    return 2;
  }
  AugmentOptions o;  // v2 aug+ as configs/moco_v2_r50_imagenet.yaml
  o.recipe = Recipe::kV2;
  o.out_size = 224;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  std::vector<float> query(3 * 224 * 224), key(3 * 224 * 224);
  for (bool dct : {true, false}) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < files.size(); ++i) {
        const uint64_t query_seed = view_seed(0, r, static_cast<int64_t>(i), 0), key_seed = view_seed(0, r, static_cast<int64_t>(i), 1);
        encoded_train_views(files[i].data(), files[i].size(), o, dct, query_seed, query.data(), &key_seed, key.data());
      }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "moco_dist, data.dct_scaling=" << (dct ? "true " : "false") << ": " << static_cast<double>(rounds * files.size()) / seconds
              << " images/s (decode + two v2 views at 224, one thread, " << files.size() << " files x " << rounds << ")\n";
  }
  return 0;
}
