// defines: Accepts (the shared keys' choices a method takes), MethodRoom (what a method's room hands
// the programs: its name for model.method, what it accepts, its own config keys and checks, its
// encoder as initialised and where evaluation finds it in a checkpoint, and the factory of its
// run::Method), Methods (the programs' list of them, src/app/methods.cpp), MethodSettings (the values
// of a method's own keys inside a Config), find_method
#pragma once

#include "ckpt/official_layout.h"
#include "model/backbone.h"
#include "run/config_choices.h"
#include "run/config_row.h"
#include "run/memory_part.h"

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moco::run {

struct Config;
struct RunContext;
class Method;

// The shared keys' choices a method trains with. Any other is refused, naming the method, and
// --help lists each method's (config_keys.cpp): the rules are data, not a room's checks.
struct Accepts {
  std::vector<Arch> archs;
  std::vector<Optimizer> optimizers;
  std::vector<Precision> precisions;
  bool micro_batch = false;  // optim.micro_batch > 0: the step of the whole share, run in pieces
};

struct MethodRoom {
  std::string name;   // model.method's value
  std::string about;  // what model.method's --help line says of it
  Accepts accepts;
  // The keys only this method reads. Given to a config of another method they are refused, naming
  // the method; a checkpoint's saved config holding them (written before they moved) still resumes.
  std::vector<ConfigRow> keys;
  // Checks across keys, once every key passed its own range (throws ConfigError via run::require).
  std::function<void(const Config&, const std::string& where)> check;
  // What a rank holds through a step besides its batch of views, estimated before anything is built
  // (run::encoder_parts, and the method's own: a queue, heads); a step that does not fit the memory is
  // refused naming the largest part's key. Empty: the encoder's parts with one view through autograd's
  // graph and 4 copies of its parameters.
  std::function<MemoryPlan(const Config&, int world_size)> memory_plan;
  // Optional: checks that depend on the number of ranks (throws ConfigError via run::require).
  std::function<void(const Config&, int world_size, const std::string& where)> check_for_world;
  // The checkpoint group of the encoder whose backbone evaluation reads: "<module>/" before torchvision's
  // or timm's keys, as the method's state entries name it.
  std::string encoder_group;
  // Where each of its checkpoint's tensors lies in the official main_moco.py's checkpoint (moco_ckpt
  // export --format moco); empty for a method with no official code to match (that export is refused).
  std::function<ckpt::OfficialLayout()> official_layout;
  // Optional: the keys whose values build other modules than the official builder does for this
  // architecture ("<key>=2 (the builder makes 3)"), or "": such an export is refused.
  std::function<std::string(const Config&)> unofficial_modules;
  // The encoder evaluation reads as the method initialises it from train.seed (what a run's random-init
  // baseline and model.pretrained=random score), on the CPU.
  std::function<model::Backbone(const Config&, int64_t in_channels)> initial_encoder;
  // The method for `config`, built for images of `in_channels` channels. Collective.
  std::function<std::unique_ptr<Method>(const Config&, const RunContext&, int64_t in_channels)> make;
};

// The methods a program offers, the first being model.method's default.
using Methods = std::vector<MethodRoom>;

// The room named `name`; ConfigError naming model.method and listing the names when there is none.
const MethodRoom& find_method(const Methods& methods, const std::string& name, const std::string& where);

// The values of the methods' own keys, one settings struct per method, of a type only its room knows.
// A method's settings not yet set are its defaults.
class MethodSettings {
 public:
  template <typename S>
  S& of(const std::string& method) {
    auto& value = values_[method];
    if (!value.has_value()) value = S{};
    return std::any_cast<S&>(value);
  }
  template <typename S>
  const S& of(const std::string& method) const {
    static const S defaults{};
    const auto found = values_.find(method);
    return found == values_.end() ? defaults : std::any_cast<const S&>(found->second);
  }
  // Forgets the settings of every other method (a config holds its own method's only).
  void keep_only(const std::string& method) {
    for (auto it = values_.begin(); it != values_.end();) it = it->first == method ? std::next(it) : values_.erase(it);
  }

 private:
  std::map<std::string, std::any> values_;
};

}  // namespace moco::run
