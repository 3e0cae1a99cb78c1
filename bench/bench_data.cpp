// bench_data: images per second of one thread decoding JPEGs and making MoCo v2's two 224 px views
// (encoded_train_views), with and without the DCT scaling; bench_data_torchvision.py times the
// official torchvision + PIL transform on the same files. Then the loader (TwoViewLoader, v2 views,
// batches of 16) on the same files as an ImageFolder (4 classes, copied to a scratch folder) and
// packed into 2 HDF5 shards (moco_pack's pack_image_folders): images/s delivered with 1 and 2
// workers, epochs of the two sources alternated, and their ratios.
//   build/bench_data DIR [--rounds N]     (DIR: *.jpg, e.g. ImageNet-sized 500x375 photos)
#include "data/augment.h"
#include "data/encoded_views.h"
#include "data/image_folder.h"
#include "data/image_pack.h"
#include "data/image_shards.h"
#include "data/loader.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

// Images/s of `rounds` epochs through the loader, each source's epochs alternated with the other's.
void loader_bench(const std::vector<std::filesystem::path>& files, const moco::data::AugmentOptions& o, int rounds) {
  using namespace moco::data;
  namespace fs = std::filesystem;
  const fs::path scratch = fs::temp_directory_path() / ("moco_bench_data_" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  for (size_t i = 0; i < files.size(); ++i) {
    const fs::path to = scratch / "folder" / "train" / ("class_" + std::to_string(i % 4)) / files[i].filename();
    fs::create_directories(to.parent_path());
    fs::copy_file(files[i], to);
  }
  PackOptions pack;
  pack.shards = 2;
  pack_image_folders({{"train", scan_image_folder((scratch / "folder" / "train").string())}},
                     (scratch / "packed").string(), pack);
  const std::shared_ptr<const Dataset> sources[2] = {
      std::make_shared<ImageFolderDataset>(scan_image_folder((scratch / "folder" / "train").string()), o.out_size,
                                           true),
      std::make_shared<EncodedImageDataset>(std::make_shared<ImageShardSource>((scratch / "packed").string(), "train"),
                                            o.out_size, true)};
  const char* names[2] = {"ImageFolder", "HDF5 shards"};
  double rate[2][2] = {};  // [workers - 1][source]
  for (int workers = 1; workers <= 2; ++workers) {
    LoaderOptions lo;
    lo.batch_size = 16;
    lo.workers = workers;
    lo.prefetch = 2;
    double seconds[2] = {0, 0};
    int64_t images[2] = {0, 0};
    for (int r = 0; r < rounds; ++r)
      for (int s = 0; s < 2; ++s) {
        TwoViewLoader loader(sources[s], o, lo);
        const auto start = std::chrono::steady_clock::now();
        loader.start_epoch(r);
        while (auto batch = loader.next()) images[s] += batch->query.size(0);
        seconds[s] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    for (int s = 0; s < 2; ++s) {
      rate[workers - 1][s] = static_cast<double>(images[s]) / seconds[s];
      std::cout << "loader, " << names[s] << ", " << workers << " worker(s): " << rate[workers - 1][s] << " images/s ("
                << images[s] << " images)\n";
    }
    std::cout << "  HDF5 shards / ImageFolder at " << workers
              << " worker(s): " << rate[workers - 1][1] / rate[workers - 1][0] << "\n";
  }
  for (int s = 0; s < 2; ++s)
    std::cout << "  2 workers / 1 worker, " << names[s] << ": " << rate[1][s] / rate[0][s] << "\n";
  fs::remove_all(scratch);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moco::data;
  if (argc < 2) {
    std::cerr << "usage: bench_data DIR [--rounds N]\n";
    return 2;
  }
  int rounds = 4;
  if (argc == 4 && std::strcmp(argv[2], "--rounds") == 0) rounds = std::stoi(argv[3]);
  std::vector<std::vector<uint8_t>> files;
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() != ".jpg" && e.path().extension() != ".JPEG" && e.path().extension() != ".jpeg") continue;
    paths.push_back(e.path());
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
        const uint64_t query_seed = view_seed(0, r, static_cast<int64_t>(i), 0),
                       key_seed = view_seed(0, r, static_cast<int64_t>(i), 1);
        encoded_train_views(files[i].data(), files[i].size(), o, dct, query_seed, query.data(), &key_seed, key.data());
      }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "moco_dist, data.dct_scaling=" << (dct ? "true " : "false") << ": "
              << static_cast<double>(rounds * files.size()) / seconds
              << " images/s (decode + two v2 views at 224, one thread, " << files.size() << " files x " << rounds
              << ")\n";
  }
  loader_bench(paths, o, rounds);
  return 0;
}
