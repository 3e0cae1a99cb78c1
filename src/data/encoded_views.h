// defines: the views of an encoded image (JPEG/PNG bytes): the training views of augment_view
// (encoded_train_views) and the evaluation view Resize + CenterCrop (encoded_eval_view)
#pragma once

#include "data/augment.h"
#include "data/image.h"
#include "data/view_augment.h"

#include <cstddef>
#include <cstdint>

namespace moco::data {

// Sample's query view (and key view when key_seed != nullptr) into `query` (and `key`), 3 * S * S
// each, normalised floats or uint8 pixels as each ViewOut says, S = options.out_size, recipe v1, v2 or
// v3 with options.transforms (each view drawn with options_of_view). The crop boxes are drawn on the
// full image size (read from the header), so a view does not depend on how the image is decoded; with dct_scaling the
// JPEG is decoded at the smallest DCT scale that still leaves both boxes at least S px on each
// side (the crop then still shrinks, antialiased), and the boxes are mapped onto it. Throws
// DecodeError for bytes that do not decode.
void encoded_train_views(const uint8_t* bytes, size_t size, const AugmentOptions& options, bool dct_scaling,
                         uint64_t query_seed, ViewOut query, const uint64_t* key_seed, ViewOut key);

// torchvision's Resize(round(S * 256 / 224)) (shorter side, bilinear, antialiased) + CenterCrop(S),
// on a PIL image or a uint8 tensor as `transforms` says: the evaluation view of a 224 px run is
// main_lincls.py's Resize(256) + CenterCrop(224). uint8 [C, S, S].
Image eval_view(const Image& image, int64_t out_size, Transforms transforms);
// The same from encoded bytes; with dct_scaling the JPEG is decoded at the smallest DCT scale that
// still leaves the resized size.
Image encoded_eval_view(const uint8_t* bytes, size_t size, int64_t out_size, bool dct_scaling, Transforms transforms);

}  // namespace moco::data
