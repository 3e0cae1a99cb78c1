// defines: gaussian_blur (torchvision.transforms.functional.gaussian_blur on a uint8 image) and
// blur_kernel_size (the kernel MoCo v2's blur gets for a sigma)
#pragma once

#include "data/image.h"

namespace moco::data {

// MoCo v2 blurs with PIL's GaussianBlur(radius=sigma), sigma in [0.1, 2]; PIL approximates a
// Gaussian with repeated box blurs and has no kernel size. We compute the Gaussian itself, as
// torchvision's gaussian_blur does, with the odd kernel that covers +-3 sigma (2*ceil(3 sigma)+1,
// 99.7% of the mass; 13 taps at sigma 2), capped so that its reflect padding fits the image.
int64_t blur_kernel_size(double sigma, int64_t height, int64_t width);

// In place: gaussian_blur(img, [k, k], [sigma, sigma]) of torchvision with k = blur_kernel_size:
// float32 kernel exp(-x^2 / (2 sigma^2)) normalised, reflect padding, rounded to uint8. Done as two
// 1-D passes (the 2-D kernel is their outer product), which differs from torchvision's 2-D
// convolution only in float rounding.
void gaussian_blur(Image& image, double sigma);

}  // namespace moco::data
