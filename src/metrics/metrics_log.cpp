#include "metrics/metrics_log.h"

#include "metrics/tensorboard_writer.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace moco::metrics {

MetricsLog::MetricsLog(const std::string& path, bool append, const std::string& tensorboard_dir)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw std::runtime_error(path + ": cannot open for writing");
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::write(const StepRecord& r) {
  auto row = nlohmann::json{{"event", "train"},
                            {"step", r.step},
                            {"epoch", r.epoch},
                            {"loss", r.loss},
                            {"lr", r.lr},
                            {"img_per_s", r.img_per_s},
                            {"elapsed_s", r.elapsed_s},
                            {"shuffle_bytes_per_step", r.shuffle_bytes_per_step},
                            {"grad_bytes_per_step", r.grad_bytes_per_step},
                            {"bad_steps", r.bad_steps},
                            {"data_wait_s", r.data_wait_s},
                            {"data_wait_share", r.data_wait_share}};
  for (const auto& [name, value] : r.scalars) row[name] = value;
  write_line(row.dump());
  if (tensorboard_) {
    // The same numbers as the JSON row, under the same names.
    std::vector<std::pair<std::string, double>> tags{
        {"train/loss", r.loss}, {"train/lr", r.lr}, {"train/img_per_s", r.img_per_s}};
    for (const auto& [name, value] : r.scalars) tags.emplace_back("train/" + name, value);
    tags.emplace_back("train/data_wait_share", r.data_wait_share);
    tags.emplace_back("train/bad_steps", static_cast<double>(r.bad_steps));
    for (const auto& [tag, value] : tags) tensorboard_->add_scalar(tag, value, r.step);
  }
}

void MetricsLog::write(const KnnRecord& r) {
  write_line(nlohmann::json{{"event", "knn"},
                            {"encoder", r.encoder},
                            {"top1", r.top1},
                            {"step", r.step},
                            {"epoch", r.epoch},
                            {"memory_size", r.memory_size},
                            {"query_size", r.query_size},
                            {"seconds", r.seconds}}
                 .dump());
  if (tensorboard_) tensorboard_->add_scalar("knn/top1_" + r.encoder, r.top1, r.step);
}

void MetricsLog::write(const ProbeRecord& r) {
  write_line(nlohmann::json{{"event", "probe"},
                            {"top1", r.top1},
                            {"step", r.step},
                            {"epoch", r.epoch},
                            {"query_size", r.query_size},
                            {"seconds", r.seconds}}
                 .dump());
  if (tensorboard_) tensorboard_->add_scalar("probe/top1", r.top1, r.step);
}

void MetricsLog::write(const CheckpointRecord& r) {
  write_line(
      nlohmann::json{{"event", r.event}, {"step", r.step}, {"path", r.path}, {"seconds", r.seconds}, {"bytes", r.bytes}}
          .dump());
}

void MetricsLog::write(const PreemptRecord& r) {
  write_line(
      nlohmann::json{{"event", "preempted"}, {"step", r.step}, {"signal", r.signal}, {"checkpoint", r.checkpoint}}
          .dump());
}

void MetricsLog::write(const LinclsRecord& r) {
  write_line(nlohmann::json{{"event", "lincls"},
                            {"epoch", r.epoch},
                            {"step", r.step},
                            {"top1", r.top1},
                            {"top5", r.top5},
                            {"loss", r.loss},
                            {"lr", r.lr},
                            {"best_top1", r.best_top1},
                            {"best_epoch", r.best_epoch},
                            {"train_seconds", r.train_seconds}}
                 .dump());
  if (tensorboard_) {
    for (const auto& [tag, value] : {std::pair<const char*, double>{"lincls/top1", r.top1},
                                     {"lincls/top5", r.top5},
                                     {"lincls/loss", r.loss},
                                     {"lincls/lr", r.lr}})
      tensorboard_->add_scalar(tag, value, r.epoch);
  }
}

void MetricsLog::write(const LinclsResultRecord& r) {
  write_line(nlohmann::json{{"event", "lincls_result"},
                            {"encoder", r.encoder},
                            {"pretrained", r.pretrained},
                            {"best_top1", r.best_top1},
                            {"best_top5", r.best_top5},
                            {"best_epoch", r.best_epoch},
                            {"last_top1", r.last_top1},
                            {"last_top5", r.last_top5},
                            {"epochs", r.epochs},
                            {"steps", r.steps},
                            {"train_seconds", r.train_seconds},
                            {"sanity_tensors", r.sanity_tensors}}
                 .dump());
}

void MetricsLog::write_line(const std::string& line) {
  errno = 0;
  out_ << line << '\n';
  out_.flush();
  // The stream keeps no error code; the failed write(2) left its errno (no space, read-only, ...).
  if (!out_)
    throw std::runtime_error(path_ + ": write failed" + (errno ? std::string(": ") + std::strerror(errno) : ""));
}

}  // namespace moco::metrics
