// defines: Field (one config key as the reader, the writer and the checks see it), KeyTable (the shared
// keys and those of a program's methods, in the order --help lists them), NotFinite and BadChoice (what
// reading a value may throw before it is reported). Internal to src/run (config.cpp reads with it).
#pragma once

#include "run/config.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

namespace moco::run {

// Thrown by a float field given .nan or .inf: no key means anything by them, and a config holding
// one cannot be written back (to_yaml prints "nan", which YAML does not read as a float), so a
// checkpoint of the run could not be resumed.
struct NotFinite {};

// Thrown by an enum-valued field given a name it does not know. The loader holds it back until the
// config is validated (a later override may still fix it), then reports it as validate always did.
struct BadChoice {
  std::string what;
};

// One configurable value: its dotted key, how to read it from YAML, write it back and check its range.
struct Field {
  std::string key, type, help;
  std::function<void(Config&, const YAML::Node&)> set;  // throws YAML::Exception on a bad value
  std::function<YAML::Node(const Config&)> get;
  std::function<std::string(const Config&)> check;  // "must be positive" when out of range, "" when fine; may be empty
  std::string method;                               // the room whose key it is; empty: a key every method shares
  bool resume_must_match = true;                    // of a method's key: a resume must find it unchanged
};

// The keys a program reads: the shared ones, with each method's among them where its room places them.
class KeyTable {
 public:
  explicit KeyTable(const Methods* methods);  // null: the shared keys only
  // Every key, in the order --help lists them and to_yaml writes them.
  const std::vector<Field>& all() const { return fields_; }
  // The keys of one config: the shared ones and those of `method`.
  std::vector<const Field*> of_method(const std::string& method) const;
  const Field* find(const std::string& key) const;
  bool is_section(const std::string& key) const;  // some key lies below "<key>."
  // "<where>: unknown key 'k' (did you mean 'x'?); 'moco_dist --help' lists every key".
  std::string unknown_key_message(const std::string& where, const std::string& key) const;

 private:
  std::vector<Field> fields_;
};

// model.method's rule: one of the methods' names, said as "must be a or b, not 'x'" otherwise.
std::string method_choice(const Methods& methods, const std::string& name);

// Enum values as a list in words: "resnet18, resnet50 or vit_small".
template <typename E>
std::string choice_list(const std::vector<E>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i)
    text += std::string(i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + to_string(values[i]);
  return text;
}

}  // namespace moco::run
