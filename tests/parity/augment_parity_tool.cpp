// The C++ half of the augmentation parity test (augment_parity.py is the other): for every raw
// image in IN_DIR, draws view parameters, applies each operation and the whole v1, v2 and v3
// pipelines, and writes the results and the parameters to OUT_DIR for torchvision to redo: the tensor
// path (torchvision on uint8 tensors) and the PIL path (torchvision on PIL images, pil_ops() below);
// and v3's pair, both views of each image as the loader draws them (write_v3_pair).
//
// Raw image file (*.u8): three little-endian int32 (C, H, W), then C*H*W bytes, planar.
// OUT_DIR/params.jsonl: one JSON object per (image, case); OUT_DIR/<image>.<case>.<op>.u8 per
// tensor op, <image>.<case>.pil.<op>.u8 per PIL op, and <image>.<case>.v2.f32 (the normalised float
// view, C*S*S float32; pil.v2.f32 the same of the PIL path). OUT_DIR/v3_pairs.jsonl: one object per
// (image, case, view 1 or 2) of v3's pair, with <image>.<case>.pil.v3_view<V>.u8 and .f32. Encoded files (*.jpg, *.png)
// in IN_DIR are decoded at full size to OUT_DIR/<file>.decoded.u8 (RGB). With --pil-only (the script's run over every
// 24-bit colour) only the PIL rows are written.
#include "data/color_jitter.h"
#include "data/encoded_views.h"
#include "data/gaussian_blur.h"
#include "data/image_decode.h"
#include "data/pil_blur.h"
#include "data/pil_color.h"
#include "data/pil_resize.h"
#include "data/resize.h"
#include "data/view_augment.h"
#include "data/view_params.h"
#include "sys/openblas_kernels.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <iostream>
#include <stdexcept>
#include <string>

namespace fs = std::filesystem;
using namespace moco::data;

namespace {

Image read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t dims[3];
  in.read(reinterpret_cast<char*>(dims), sizeof dims);
  if (!in) throw std::runtime_error(path.string() + ": no header");
  Image image(dims[0], dims[1], dims[2]);
  in.read(reinterpret_cast<char*>(image.pixels.data()), static_cast<std::streamsize>(image.pixels.size()));
  if (!in) throw std::runtime_error(path.string() + ": truncated");
  return image;
}

void write_raw(const fs::path& path, const Image& image) {
  std::ofstream out(path, std::ios::binary);
  const int32_t dims[3] = {static_cast<int32_t>(image.channels), static_cast<int32_t>(image.height),
                           static_cast<int32_t>(image.width)};
  out.write(reinterpret_cast<const char*>(dims), sizeof dims);
  out.write(reinterpret_cast<const char*>(image.pixels.data()), static_cast<std::streamsize>(image.pixels.size()));
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

// Cases 0 and 1 pin the extremes of every range; the rest are draws from the seed. The gates are
// set by the case number so that every branch of both pipelines is exercised.
ViewParams params_for(int which, const Image& image, const AugmentOptions& o) {
  ViewParams p = draw_view_params(0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(which + 1) + image.pixels.size(),
                                  image.height, image.width, o);
  if (which == 0) {
    p.box = {0, 0, image.height, image.width};
    p.jitter_params = {{3, 2, 1, 0}, 0.6, 0.6, 0.6, -0.5};
    p.sigma = 2.0;
  } else if (which == 1) {
    p.box = {image.height / 3, image.width / 4, std::max<int64_t>(1, image.height / 5),
             std::max<int64_t>(1, image.width / 7)};
    p.jitter_params = {{0, 1, 2, 3}, 1.4, 1.4, 1.4, 0.5};
    p.sigma = 0.1;
  }
  p.jitter = which % 4 != 3;
  p.grayscale = which % 3 == 1;
  p.blur = which % 2 == 0;
  p.flip = which % 2 == 1;
  p.solarize = which % 4 < 2;  // with the blur (case 0: the order shows) and without it
  return p;
}

// v1 jitters always and never blurs.
ViewParams as_v1(ViewParams p) {
  p.jitter = true;
  p.blur = false;
  return p;
}

// The PIL path, one row per operation: the script (PIL_OPS) redoes each row of the same name with
// torchvision on a PIL image. `size` is the case's output size, for the rows that resize.
struct PilOp {
  const char* name;
  std::function<Image(const Image& image, const ViewParams& p, int64_t size)> apply;
};

// A row for an operation that works in place on a copy of the image.
PilOp in_place(const char* name, std::function<void(Image&, const ViewParams&)> op) {
  return {name, [op](const Image& image, const ViewParams& p, int64_t) {
            Image x = image;
            op(x, p);
            return x;
          }};
}

const std::vector<PilOp>& pil_ops() {
  static const std::vector<PilOp> ops = {
      in_place("brightness",
               [](Image& x, const ViewParams& p) { pil::adjust_brightness(x, p.jitter_params.brightness); }),
      in_place("contrast", [](Image& x, const ViewParams& p) { pil::adjust_contrast(x, p.jitter_params.contrast); }),
      in_place("saturation",
               [](Image& x, const ViewParams& p) { pil::adjust_saturation(x, p.jitter_params.saturation); }),
      in_place("hue", [](Image& x, const ViewParams& p) { pil::adjust_hue(x, p.jitter_params.hue); }),
      in_place("jitter", [](Image& x, const ViewParams& p) { pil::color_jitter(x, p.jitter_params); }),
      in_place("grayscale", [](Image& x, const ViewParams&) { pil::to_grayscale(x); }),
      {"resized_crop",
       [](const Image& x, const ViewParams& p, int64_t size) { return pil_resized_crop(x, p.box, size, size); }},
      in_place("blur", [](Image& x, const ViewParams& p) { pil_gaussian_blur(x, p.sigma); }),
      in_place("flip", [](Image& x, const ViewParams&) { hflip(x); }),
      in_place("solarize", [](Image& x, const ViewParams&) { pil::solarize(x); }),
      // The whole pipelines as the training and evaluation views run them (Transforms::kPil).
      {"eval", [](const Image& x, const ViewParams&, int64_t size) { return eval_view(x, size, Transforms::kPil); }},
      {"v1", [](const Image& x, const ViewParams& p,
                int64_t size) { return augment_view(x, as_v1(p), Recipe::kV1, Transforms::kPil, size); }},
      {"v2", [](const Image& x, const ViewParams& p,
                int64_t size) { return augment_view(x, p, Recipe::kV2, Transforms::kPil, size); }},
      {"v3", [](const Image& x, const ViewParams& p,
                int64_t size) { return augment_view(x, p, Recipe::kV3, Transforms::kPil, size); }},
  };
  return ops;
}

// ToTensor + Normalize of a view, C*S*S float32.
void write_normalised(const std::string& path, const Image& view, const std::vector<double>& mean,
                      const std::vector<double>& std) {
  std::vector<float> normalised(view.pixels.size());
  normalize_into(view, mean, std, normalised.data());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(normalised.data()),
             static_cast<std::streamsize>(normalised.size() * sizeof(float)));
}

// The tensor path: each operation alone on the whole image (the crop: on its box), the evaluation
// view and both pipelines, and v2's normalised floats.
void write_tensor_ops(const Image& image, const ViewParams& p, int64_t size, const std::string& stem,
                      const std::vector<double>& mean, const std::vector<double>& std) {
  write_raw(stem + "crop.u8", resized_crop(image, p.box, size, size));
  auto one = [&](const char* op, auto&& apply) {
    Image x = image;
    apply(x);
    write_raw(stem + op + ".u8", x);
  };
  one("brightness", [&](Image& x) { adjust_brightness(x, p.jitter_params.brightness); });
  one("contrast", [&](Image& x) { adjust_contrast(x, p.jitter_params.contrast); });
  one("saturation", [&](Image& x) { adjust_saturation(x, p.jitter_params.saturation); });
  one("hue", [&](Image& x) { adjust_hue(x, p.jitter_params.hue); });
  one("jitter", [&](Image& x) { color_jitter(x, p.jitter_params); });
  one("grayscale", [&](Image& x) { to_grayscale(x); });
  one("blur", [&](Image& x) { gaussian_blur(x, p.sigma); });
  one("flip", [&](Image& x) { hflip(x); });
  one("solarize", [&](Image& x) { pil::solarize(x); });
  write_raw(stem + "eval.u8", eval_view(image, size, Transforms::kTensor));
  write_raw(stem + "v1.u8", augment_view(image, as_v1(p), Recipe::kV1, Transforms::kTensor, size));
  const Image v2 = augment_view(image, p, Recipe::kV2, Transforms::kTensor, size);
  write_raw(stem + "v2.u8", v2);
  write_normalised(stem + "v2.f32", v2, mean, std);
  write_raw(stem + "v3.u8", augment_view(image, p, Recipe::kV3, Transforms::kTensor, size));
}

nlohmann::json params_row(const std::string& name, int k, int64_t size, const Image& image, const ViewParams& p,
                          const std::vector<double>& mean, const std::vector<double>& std) {
  const auto& j = p.jitter_params;
  return {{"image", name},
          {"case", k},
          {"size", size},
          {"box", {p.box.top, p.box.left, p.box.height, p.box.width}},
          {"order", {j.order[0], j.order[1], j.order[2], j.order[3]}},
          {"brightness", j.brightness},
          {"contrast", j.contrast},
          {"saturation", j.saturation},
          {"hue", j.hue},
          {"jitter", p.jitter},
          {"grayscale", p.grayscale},
          {"blur", p.blur},
          {"sigma", p.sigma},
          {"flip", p.flip},
          {"solarize", p.solarize},
          {"kernel_image", blur_kernel_size(p.sigma, image.height, image.width)},
          {"kernel_view", blur_kernel_size(p.sigma, size, size)},
          {"mean", mean},
          {"std", std}};
}

// moco-v3's pair: augmentation1 and augmentation2 of its main_moco.py on the official constants.
AugmentOptions v3_options(const AugmentOptions& o) {
  AugmentOptions v3 = o;
  v3.recipe = Recipe::kV3;
  v3.saturation = 0.2, v3.hue = 0.1;
  v3.blur_prob = 1.0, v3.solarize_prob = 0.0;
  v3.key_blur_prob = 0.1, v3.key_solarize_prob = 0.2;
  return v3;
}

// Both views of v3's pair of one image as the loader makes them (each drawn with its view's options
// from its own seed), written with their parameters for the script to replay on a PIL image.
void write_v3_pair(const std::string& name, int k, int64_t size, const Image& image, const AugmentOptions& o,
                   const std::string& stem, const std::vector<double>& mean, const std::vector<double>& std,
                   std::ostream& pairs_out) {
  for (int view = 0; view < 2; ++view) {
    const AugmentOptions ov = options_of_view(v3_options(o), view);
    const uint64_t seed = view_seed(static_cast<uint64_t>(k), 0, static_cast<int64_t>(image.pixels.size()), view);
    const ViewParams p = draw_view_params(seed, image.height, image.width, ov);
    const Image v = augment_view(image, p, ov.recipe, Transforms::kPil, size);
    const std::string out = stem + "pil.v3_view" + std::to_string(view + 1) + ".";
    write_raw(out + "u8", v);
    write_normalised(out + "f32", v, mean, std);
    nlohmann::json row = params_row(name, k, size, image, p, mean, std);
    row["view"] = view + 1;
    pairs_out << row.dump() << "\n";
  }
}

void write_decoded(const fs::path& file, const fs::path& out_dir) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_raw(out_dir / (file.filename().string() + ".decoded.u8"), decode_image(bytes.data(), bytes.size()).image);
}

}  // namespace

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  const bool pil_only = argc == 5 && std::string(argv[4]) == "--pil-only";
  if (argc != 4 && !pil_only) {
    std::cerr << "usage: " << argv[0] << " IN_DIR OUT_DIR CASES [--pil-only]\n";
    return 2;
  }
  try {
    const fs::path in_dir = argv[1], out_dir = argv[2];
    const int cases = std::stoi(argv[3]);
    AugmentOptions o;
    o.recipe = Recipe::kV2;
    o.mean = {0.485, 0.456, 0.406};
    o.std = {0.229, 0.224, 0.225};
    o.hue = 0.4;
    std::ofstream params_out(out_dir / "params.jsonl"), pairs_out(out_dir / "v3_pairs.jsonl");
    for (const auto& entry : fs::directory_iterator(in_dir)) {
      if (entry.path().extension() == ".jpg" || entry.path().extension() == ".png") {
        if (!pil_only) write_decoded(entry.path(), out_dir);
        continue;
      }
      if (entry.path().extension() != ".u8") continue;
      const std::string name = entry.path().stem().string();
      const Image image = read_raw(entry.path());
      const std::vector<double> mean = image.channels == 3 ? o.mean : std::vector<double>{0.449};
      const std::vector<double> std = image.channels == 3 ? o.std : std::vector<double>{0.226};
      for (int k = 0; k < cases; ++k) {
        const ViewParams p = params_for(k, image, o);
        const int64_t size = k % 2 == 0 ? 224 : 96;
        const std::string stem = (out_dir / (name + "." + std::to_string(k) + ".")).string();
        if (!pil_only) write_tensor_ops(image, p, size, stem, mean, std);
        for (const PilOp& op : pil_ops()) write_raw(stem + "pil." + op.name + ".u8", op.apply(image, p, size));
        if (!pil_only) {
          write_normalised(stem + "pil.v2.f32", augment_view(image, p, Recipe::kV2, Transforms::kPil, size), mean, std);
          write_v3_pair(name, k, size, image, o, stem, mean, std, pairs_out);
        }
        params_out << params_row(name, k, size, image, p, mean, std).dump() << "\n";
      }
    }
    if (!params_out.flush() || !pairs_out.flush())
      throw std::runtime_error("cannot write params.jsonl or v3_pairs.jsonl");
  } catch (const std::exception& e) {
    std::cerr << "augment_parity_tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
