#include "run/config.h"

#include "run/config_keys.h"
#include "run/memory_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace moco::run {
namespace {

// A config being read, and the enum values it was given that name nothing (key -> what validate
// reports), held back so that a later override can still replace them.
struct Reading {
  Config config;
  std::map<std::string, std::string> bad_choices;
  std::vector<std::pair<std::string, std::string>> given;  // (key, where it was given), in the order given
};

void assign(Reading& reading, const Field& field, const YAML::Node& node, const std::string& where) {
  // "arch:" in a file, "model.arch=" on the command line: YAML reads nothing as null, not as "".
  if (!node.IsDefined() || node.IsNull())
    throw ConfigError(where + ": key '" + field.key + "' has no value (expects " + field.type + ")");
  reading.given.emplace_back(field.key, where);
  try {
    field.set(reading.config, node);
    reading.bad_choices.erase(field.key);
  } catch (const BadChoice& bad) {
    reading.bad_choices[field.key] = bad.what;
  } catch (const NotFinite&) {
    throw ConfigError(where + ": key '" + field.key + "' expects a finite " + field.type + ", got " +
                      (node.IsScalar() ? "'" + node.Scalar() + "'" : std::string("a list holding .nan or .inf")));
  } catch (const YAML::Exception&) {
    std::string shown =
        node.IsScalar() ? "'" + node.Scalar() + "'" : "a " + std::string(node.IsMap() ? "mapping" : "list");
    throw ConfigError(where + ": key '" + field.key + "' expects " + field.type + ", got " + shown);
  }
}

// "line 3" of a node, or nothing for nodes without a position (built in memory).
std::string line_of(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? std::string("?") : std::to_string(mark.line + 1);
}

// Walks a mapping, assigning each leaf to its field; every key must be known and appear once.
// yaml-cpp keeps both entries of a repeated key (a lookup finds the first, a walk sees both), so the
// repetition is caught here; unnoticed, the last one would win.
void apply_mapping(Reading& reading, const KeyTable& keys, const YAML::Node& map, const std::string& prefix,
                   const std::string& where) {
  std::map<std::string, YAML::Node> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar())
      throw ConfigError(where + ": line " + line_of(entry.first) + ": a key must be a plain name");
    const std::string key = prefix + entry.first.as<std::string>();
    if (const auto before = seen.find(key); before != seen.end())
      throw ConfigError(where + ": key '" + key + "' is given twice (lines " + line_of(before->second) + " and " +
                        line_of(entry.first) + ")");
    seen.emplace(key, entry.first);
    if (const Field* field = keys.find(key)) {
      assign(reading, *field, entry.second, where);
    } else if (keys.is_section(key)) {
      if (!entry.second.IsMap()) throw ConfigError(where + ": key '" + key + "' is a section and expects a mapping");
      apply_mapping(reading, keys, entry.second, key + ".", where);
    } else {
      throw ConfigError(keys.unknown_key_message(where, key));
    }
  }
}

}  // namespace

void require(bool ok, const std::string& where, const std::string& key, const std::string& what) {
  if (!ok) throw ConfigError(where + ": key '" + key + "' " + what);
}

int64_t global_batch(const Config& c, Job job) {
  return job == Job::kLincls ? c.lincls.batch_size : c.optim.batch_size;
}
const char* global_batch_key(Job job) { return job == Job::kLincls ? "lincls.batch_size" : "optim.batch_size"; }

bool is_vit(Arch arch) { return arch == Arch::kVitTinyCpu || arch == Arch::kVitSmall || arch == Arch::kVitBase; }

data::AugmentOptions default_augment_options() {
  data::AugmentOptions o;
  o.mean = {0.2860};  // Fashion-MNIST's pixel statistics
  o.std = {0.3530};
  return o;
}

int64_t dataset_channels(const Config& c) {
  if (c.data.dataset == Dataset::kSynthetic) return c.data.synthetic_channels;
  return is_encoded_dataset(c) ? 3 : 1;  // ImageFolder images are decoded to RGB, as torchvision's loader does
}

bool is_encoded_dataset(const Config& c) {
  return c.data.dataset == Dataset::kImageFolder || c.data.dataset == Dataset::kHdf5;
}

void validate_for_world(const Config& c, int world_size, const std::string& where, Job job) {
  require(global_batch(c, job) % world_size == 0, where, global_batch_key(job),
          fmt::format("({}) must be divisible by the number of ranks ({}): each rank takes an equal share",
                      global_batch(c, job), world_size));
  const int64_t share = global_batch(c, job) / world_size, piece = c.optim.micro_batch;
  require(job != Job::kMoco || piece == 0 || (piece <= share && share % piece == 0), where, "optim.micro_batch",
          fmt::format("({}) must divide each rank's share of {} ({} on {} rank(s): {} images); 0 runs the share in "
                      "one piece",
                      piece, global_batch_key(job), global_batch(c, job), world_size, share));
  if (job == Job::kMoco && c.methods && method_room(c).check_for_world)
    method_room(c).check_for_world(c, world_size, where);
  require_fits(step_memory(c, world_size, job), memory_limit(), where);
}

// MoCo trains the encoder (the method's plan, or one view through the graph and 4 copies of its
// parameters); the linear protocol reads a frozen one, without a graph.
MemoryPlan step_memory(const Config& c, int world_size, Job job) {
  MemoryPlan plan{views_part(c, world_size, job)};
  const bool moco = job == Job::kMoco;
  const MethodRoom* room = moco && c.methods ? &method_room(c) : nullptr;
  MemoryPlan step = room && room->memory_plan
                        ? room->memory_plan(c, world_size)
                        : encoder_parts(c, world_size, job, moco ? rank_images(c, world_size, job) : 0, moco ? 4 : 1);
  plan.insert(plan.end(), step.begin(), step.end());
  return plan;
}

namespace {

// Each key's own rule (its row), in the order of the rows; a name an enum-valued key did not know
// is reported at its row.
void check_rows(const KeyTable& keys, const Reading& reading, const std::string& where) {
  for (const Field* f : keys.of_method(reading.config.model.method)) {
    if (const auto bad = reading.bad_choices.find(f->key); bad != reading.bad_choices.end())
      require(false, where, f->key, bad->second);
    if (f->check) {
      const std::string what = f->check(reading.config);
      require(what.empty(), where, f->key, what);
    }
  }
}

// data.mean and data.std against each other and the dataset's channels, decided from the config
// alone before any file is read: the IDX sets are greyscale, ImageFolder RGB.
void check_normalisation(const Config& c, const std::string& where) {
  const auto& a = c.data.augment;
  require(!a.mean.empty(), where, "data.mean", "must not be empty");
  require(a.std.size() == a.mean.size(), where, "data.std", "must have as many values as data.mean");
  const int64_t channels = dataset_channels(c);
  for (const auto& [key, values] : {std::pair<const char*, const std::vector<double>*>{"data.mean", &a.mean},
                                    std::pair<const char*, const std::vector<double>*>{"data.std", &a.std}}) {
    const auto n = static_cast<int64_t>(values->size());
    require(n == 1 || n == channels, where, key,
            fmt::format("has {} values but data.dataset {} has {} channel(s){}: give 1 value{}", n, c.data.dataset,
                        channels, c.data.dataset == Dataset::kSynthetic ? " (data.synthetic_channels)" : "",
                        channels > 1 ? fmt::format(" or {}", channels) : std::string()));
  }
  for (double s : a.std) require(s > 0, where, "data.std", "values must be positive");
}

// The asymmetric recipe's per-view keys do nothing in the other recipes: a value other than the
// default there would be silently ignored, so it is refused, naming the key.
void check_per_view_keys(const Config& c, const std::string& where) {
  const data::AugmentOptions& a = c.data.augment;
  if (a.recipe == data::Recipe::kV3) return;
  const data::AugmentOptions defaults;
  const std::string only = "applies to data.augmentation v3 only, not " + std::string(data::recipe_name(a.recipe));
  require(a.key_blur_prob == defaults.key_blur_prob, where, "data.key_blur_prob", only);
  require(a.solarize_prob == defaults.solarize_prob, where, "data.solarize_prob", only);
  require(a.key_solarize_prob == defaults.key_solarize_prob, where, "data.key_solarize_prob", only);
}

// The shared keys against each other.
void check_shared_keys(const Config& c, const std::string& where) {
  require(c.model.stem_stride == 1 || c.model.small_stem, where, "model.stem_stride",
          "applies to the small stem only (model.small_stem: true)");
  require(!c.model.zero_init_residual || !is_vit(c.model.arch), where, "model.zero_init_residual",
          fmt::format("applies to a ResNet's residual blocks, and model.arch {} is a ViT", c.model.arch));
  require(!is_encoded_dataset(c) || c.data.augment.recipe != data::Recipe::kSimple, where, "data.augmentation",
          fmt::format("must not be simple with data.dataset {} (the simple recipe needs images of one size)",
                      c.data.dataset));
  require(!c.data.train_dir.empty() && !c.data.val_dir.empty(), where, "data.train_dir/val_dir", "must not be empty");
  require(c.data.synthetic_train_size > 0 && c.data.synthetic_test_size > 0, where, "data.synthetic_*_size",
          "must be positive");
  check_normalisation(c, where);
  check_per_view_keys(c, where);
  require(c.dist.bucket_mb > 0 && c.dist.first_bucket_mb > 0, where, "dist.bucket_mb/first_bucket_mb",
          "must be positive");
  require(c.knn.memory_size >= 0 && c.knn.query_size >= 0, where, "knn.memory_size/query_size", "must be >= 0");
  require(c.optim.schedule != Schedule::kCosine || c.optim.warmup_epochs < c.train.epochs, where, "optim.warmup_epochs",
          "must be less than train.epochs with the cosine schedule");
}

// The method model.method names (its first when none is given), and no key of another one: a key
// the run's method does not read would do nothing. From a checkpoint's saved config (`drop_others`),
// which held every method's keys before they moved into the rooms, such keys are dropped instead.
void settle_method(const KeyTable& keys, Reading& reading, const Methods& methods, bool drop_others,
                   const std::string& where) {
  auto& method = reading.config.model.method;
  if (method.empty()) method = methods.front().name;
  const std::string unknown = method_choice(methods, method);
  require(unknown.empty(), where, "model.method", unknown);
  for (const auto& [key, where] : reading.given) {
    const Field* f = keys.find(key);
    if (f->method.empty() || f->method == method || drop_others) continue;
    throw ConfigError(
        fmt::format("{}: key '{}' is read by model.method {} only, and this config's model.method is {}: it would do "
                    "nothing; remove it",
                    where, key, f->method, method));
  }
  reading.config.method_settings.keep_only(method);
}

// The shared keys' choices the method trains with (MethodRoom::accepts).
void check_accepted(const MethodRoom& room, const Config& c, const std::string& where) {
  const auto refuse = [&](const char* key, const auto& value, const auto& accepted, const char* verb) {
    if (std::find(accepted.begin(), accepted.end(), value) != accepted.end()) return;
    throw ConfigError(fmt::format("{}: key '{}' {}: model.method {} {} {}", where, key, to_string(value), room.name,
                                  verb, choice_list(accepted)));
  };
  refuse("model.arch", c.model.arch, room.accepts.archs, "trains");
  refuse("optim.optimizer", c.optim.optimizer, room.accepts.optimizers, "trains with");
  refuse("train.precision", c.train.precision, room.accepts.precisions, "trains in");
  if (c.optim.micro_batch > 0 && !room.accepts.micro_batch) {
    std::vector<std::string> takers;
    for (const auto& other : *c.methods)
      if (other.accepts.micro_batch) takers.push_back(other.name);
    throw ConfigError(
        fmt::format("{}: key 'optim.micro_batch' ({}): model.method {} trains each rank's share in one "
                    "piece (optim.micro_batch 0); model.method {} takes pieces",
                    where, c.optim.micro_batch, room.name, fmt::join(takers, " or ")));
  }
}

// The rows first, then what involves more than one key: the shared keys, then the method's.
void validate(const KeyTable& keys, const Reading& reading, const std::string& where) {
  check_rows(keys, reading, where);
  const Config& c = reading.config;
  check_shared_keys(c, where);
  if (!c.methods) return;
  const auto& room = method_room(c);
  check_accepted(room, c, where);
  if (room.check) room.check(c, where);
}

Reading apply_root(const KeyTable& keys, const YAML::Node& root, const std::string& where) {
  Reading reading;
  if (root.IsDefined() && !root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(where + ": the top level must be a mapping of sections");
    apply_mapping(reading, keys, root, "", where);
  }
  return reading;
}

}  // namespace

namespace {

// A file or a command-line value is read whole or refused: a second document ("---") would
// otherwise be dropped unread. `what` is what must be one document ("a config", "a value").
YAML::Node single_document(const std::vector<YAML::Node>& documents, const std::string& where,
                           const std::string& what = "a config") {
  if (documents.size() > 1)
    throw ConfigError(fmt::format("{}: holds {} YAML documents (separated by '---'); {} is one document", where,
                                  documents.size(), what));
  return documents.empty() ? YAML::Node() : documents.front();
}

// A command-line value is read as YAML (for lists and quoting), and YAML may read another text than
// the one typed: ' #...' is a comment, a line break folds to a space, a leading tag or anchor is
// dropped. For a string key (a folder, a checkpoint) that silently names another path, e.g. the
// folder of another run, which the run would then resume. Such a value is refused, showing what YAML
// made of it; quoting keeps the text. Spaces around the value are not part of it.
void check_string_read_as_typed(const Field& field, const YAML::Node& value, const std::string& text,
                                const std::string& where) {
  if (field.type != "string" || !value.IsScalar()) return;
  const auto first = text.find_first_not_of(" \t");
  const auto last = text.find_last_not_of(" \t");
  const std::string typed = first == std::string::npos ? "" : text.substr(first, last - first + 1);
  const bool quoted =
      typed.size() >= 2 && (typed.front() == '\'' || typed.front() == '"') && typed.back() == typed.front();
  if (quoted || value.Scalar() == typed) return;
  throw ConfigError(
      fmt::format("{}: key '{}' would read as '{}', not the text given (YAML drops a ' #' comment "
                  "and a leading tag or anchor, and folds line breaks): quote the value in YAML to keep it",
                  where, field.key, value.Scalar()));
}

}  // namespace

Config load_config(std::shared_ptr<const Methods> methods, const std::string& path,
                   const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": is a folder, not a config file");
  YAML::Node root;
  try {
    root = single_document(YAML::LoadAllFromFile(path), path);
  } catch (const ConfigError&) {
    throw;
  } catch (const YAML::BadFile&) {
    throw ConfigError(path + ": cannot open the config file");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML: " + e.what());
  } catch (const std::exception& e) {  // a read error of the stream (std::ios_base::failure)
    throw ConfigError(path + ": cannot read the config file: " + e.what());
  }
  // An empty file (or one of comments only) would otherwise run every default: 200 epochs.
  if (!root.IsDefined() || root.IsNull())
    throw ConfigError(path + ": the config file is empty (write '{}' to run on every default)");
  const KeyTable keys(methods.get());
  Reading reading = apply_root(keys, root, path);
  std::map<std::string, std::string> given;  // key -> the override that set it
  for (const auto& item : overrides) {
    const auto eq = item.find('=');
    const std::string where = "command-line override '" + item + "'";
    if (eq == std::string::npos || eq == 0) throw ConfigError(where + ": expected key=value");
    const std::string key = item.substr(0, eq);
    const Field* field = keys.find(key);
    if (!field) throw ConfigError(keys.unknown_key_message(where, key));
    // As in a file: of two values, which one was meant is not for the program to guess.
    if (const auto [before, fresh] = given.emplace(key, item); !fresh)
      throw ConfigError(where + ": key '" + key + "' is given twice on the command line (also '" + before->second +
                        "')");
    YAML::Node value;
    try {
      value = single_document(YAML::LoadAll(item.substr(eq + 1)), where + ": key '" + key + "'", "a value");
    } catch (const ConfigError&) {
      throw;
    } catch (const YAML::Exception& e) {
      throw ConfigError(where + ": value is not valid YAML: " + e.what());
    }
    check_string_read_as_typed(*field, value, item.substr(eq + 1), where);
    assign(reading, *field, value, where);
  }
  reading.config.methods = methods;
  const std::string source = overrides.empty() ? path : path + " (with overrides)";
  settle_method(keys, reading, *methods, /*drop_others=*/false, source);
  validate(keys, reading, source);
  return reading.config;
}

namespace {

// Keys added after runs had been saved, whose default is not what those runs computed. A saved
// config without one was written before the key existed and ran the value here, so that a resume
// sees the difference (and refuses it, naming the key) instead of switching silently.
struct ValueBeforeTheKey {
  const char* key;
  const char* value;
};
constexpr ValueBeforeTheKey kValuesBeforeTheKeys[] = {
    {"data.transforms", "tensor"},  // the views' ops before the PIL-equal ones became the default
    {"optim.lr_update", "step"},    // the learning rate was set every step before main_moco.py's per epoch
};

bool holds_key(const YAML::Node& node, const std::string& dotted) {
  if (!node.IsMap()) return false;
  const auto dot = dotted.find('.');
  const YAML::Node child = node[dotted.substr(0, dot)];  // const: the lookup adds nothing
  return child.IsDefined() && (dot == std::string::npos || holds_key(child, dotted.substr(dot + 1)));
}

}  // namespace

Config load_config_text(std::shared_ptr<const Methods> methods, const std::string& yaml, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ": not valid YAML: " + e.what());
  }
  const KeyTable keys(methods.get());
  Reading reading = apply_root(keys, root, where);
  for (const auto& before : kValuesBeforeTheKeys) {
    if (!holds_key(root, before.key)) assign(reading, *keys.find(before.key), YAML::Node(before.value), where);
  }
  reading.config.methods = methods;
  settle_method(keys, reading, *methods, /*drop_others=*/true, where);
  validate(keys, reading, where);
  return reading.config;
}

namespace {

// Shared keys; a method's own say so themselves (Field::resume_must_match), for MoCo: the linear
// protocol reads none of them.
bool changes_math(const Field& f, Job job) {
  if (!f.method.empty()) return job == Job::kMoco && f.resume_must_match;
  // optim.micro_batch changes the order of fp32 sums only where the pieces are exact (pieces_exact, in
  // config_changes), model.activation_checkpointing not a bit.
  static const std::set<std::string> free_in_math_sections{"data.workers",      "data.prefetch",
                                                           "lincls.epochs",     "lincls.save_every_epochs",
                                                           "optim.micro_batch", "model.activation_checkpointing"};
  const std::string& key = f.key;
  if (free_in_math_sections.count(key)) return false;
  const std::string section = key.substr(0, key.find('.'));
  if (key == "train.seed" || section == "data") return true;
  if (job == Job::kLincls) return section == "model" || section == "lincls";
  // The online probe's state is in the checkpoint only when it was on, and its lr shapes that state.
  if (key == "eval.online_probe" || key == "eval.probe_lr") return true;
  return (section == "model" && key != "model.pretrained") || section == "optim";
}

// A method's pieces compute the whole share's step up to fp32 rounding where no BatchNorm in the
// backbone couples the rows (a ViT); a ResNet's normalises each piece apart.
bool pieces_exact(const Config& c) { return is_vit(c.model.arch); }

// A checkpoint holds the loss scale's state (scaler/*) only with fp16: a resume may switch between
// fp32 and bf16, not into or out of fp16.
bool changes_loss_scale(const std::string& key, const std::string& before, const std::string& after) {
  return key == "train.precision" && (before == "fp16") != (after == "fp16");
}

std::string flow(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

}  // namespace

// A method's keys are compared when both configs run the same method; otherwise model.method differs.
std::vector<ConfigChange> config_changes(const Config& before, const Config& after, Job job) {
  const KeyTable keys(after.methods ? after.methods.get() : before.methods.get());
  const bool same_method = before.model.method == after.model.method;
  std::vector<ConfigChange> changes;
  for (const auto& f : keys.all()) {
    if (!f.method.empty() && (!same_method || f.method != after.model.method)) continue;
    const std::string a = flow(f.get(before)), b = flow(f.get(after));
    if (a != b)
      changes.push_back({f.key, a, b,
                         changes_math(f, job) || changes_loss_scale(f.key, a, b) ||
                             (f.key == "optim.micro_batch" && job == Job::kMoco && !pieces_exact(after))});
  }
  return changes;
}

std::string to_yaml(const Config& config) {
  const KeyTable keys(config.methods.get());
  YAML::Node root;
  for (const Field* f : keys.of_method(config.model.method)) {
    const auto dot = f->key.find('.');
    root[f->key.substr(0, dot)][f->key.substr(dot + 1)] = f->get(config);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string method_keys_text(const Config& config, const std::string& section) {
  const KeyTable keys(config.methods.get());
  std::string text;
  for (const Field* f : keys.of_method(config.model.method))
    if (!f->method.empty() && f->key.rfind(section + ".", 0) == 0) text += " " + f->key + "=" + flow(f->get(config));
  return text;
}

std::string config_reference(const Methods& methods) {
  const KeyTable keys(&methods);
  Config defaults;
  defaults.model.method = methods.front().name;
  std::ostringstream out;
  for (const auto& f : keys.all())
    out << "  " << f.key << " (" << f.type << ", default " << flow(f.get(defaults)) << ")\n      " << f.help << "\n";
  return out.str();
}

const MethodRoom& method_room(const Config& config) {
  if (!config.methods) throw std::logic_error("a config built by hand has no methods to look model.method up in");
  return find_method(*config.methods, config.model.method, "model.method");
}

const MethodRoom& find_method(const Methods& methods, const std::string& name, const std::string& where) {
  for (const auto& room : methods)
    if (room.name == name) return room;
  throw ConfigError(fmt::format("{}: key 'model.method' {}", where, method_choice(methods, name)));
}

}  // namespace moco::run
