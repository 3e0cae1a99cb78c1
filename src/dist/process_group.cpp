#include "dist/process_group.h"

namespace moco::dist {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
};

}  // namespace

std::shared_ptr<Work> LocalProcessGroup::all_reduce_async(torch::Tensor&, ReduceOp) {
  return std::make_shared<DoneWork>();
}

}  // namespace moco::dist
