// defines: TensorBoardWriter, scalars as a TensorBoard event file (events.out.tfevents.*), which
// `tensorboard --logdir` and its Python readers load
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace moco::metrics {

// Each event is a protobuf `Event` in TensorBoard's record framing: length, masked CRC-32C of the
// length, the bytes, masked CRC-32C of the bytes. Every write is flushed, so a killed run keeps its
// events; a resumed run starts a new file in the same folder and TensorBoard reads them all.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);  // creates dir; throws naming the file
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace moco::metrics
