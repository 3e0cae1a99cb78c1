// defines: DefaultDtype, a scope in which new tensors take a given dtype (a module built inside it
// is built in that dtype, its flat buffers included)
#pragma once

#include <torch/torch.h>

class DefaultDtype {
 public:
  explicit DefaultDtype(torch::ScalarType type) : before_(torch::get_default_dtype()) {
    torch::set_default_dtype(caffe2::TypeMeta::fromScalarType(type));
  }
  ~DefaultDtype() { torch::set_default_dtype(before_); }
  DefaultDtype(const DefaultDtype&) = delete;
  DefaultDtype& operator=(const DefaultDtype&) = delete;

 private:
  caffe2::TypeMeta before_;
};
