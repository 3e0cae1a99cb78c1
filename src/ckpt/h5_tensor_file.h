// defines: CheckpointError (a checkpoint that cannot be written or read, naming the file and tensor),
// H5TensorWriter / H5TensorReader (tensors as HDF5 datasets at slash-separated paths),
// fsync_path (data and folders made durable)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::ckpt {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes one HDF5 file. Each tensor becomes a dataset at `path` ("encoder_q/layer1.0.conv1.weight":
// group encoder_q, dataset layer1.0.conv1.weight), intermediate groups created as needed, with its
// torch dtype in the attribute "dtype". Non-scalar tensors are chunked with HDF5's Fletcher-32
// filter, so the library itself checks every chunk it reads back; 0-d tensors are HDF5 scalars (as
// h5py writes numpy scalars). close() flushes and fsyncs; the destructor closes without throwing.
class H5TensorWriter {
 public:
  explicit H5TensorWriter(std::string file_path);  // creates or truncates
  ~H5TensorWriter();
  H5TensorWriter(const H5TensorWriter&) = delete;
  H5TensorWriter& operator=(const H5TensorWriter&) = delete;

  void write(const std::string& path, const torch::Tensor& tensor);
  void write_string_attribute(const std::string& name, const std::string& value);  // on the root group
  void close();
  const std::string& file_path() const { return file_path_; }

 private:
  void start_writeback();
  std::string file_path_;
  int64_t file_ = -1;  // hid_t; HDF5's headers stay out of this header
};

// What a dataset declares: its shape and the dtype it reads as.
struct StoredTensor {
  std::vector<int64_t> shape;
  torch::ScalarType dtype = torch::kFloat32;
};

class H5TensorReader {
 public:
  explicit H5TensorReader(std::string file_path);  // throws CheckpointError naming the file
  ~H5TensorReader();
  H5TensorReader(const H5TensorReader&) = delete;
  H5TensorReader& operator=(const H5TensorReader&) = delete;

  bool contains(const std::string& path) const;
  // The stored shape and dtype, without reading the data: a damaged file may declare any size, so
  // callers check it (CheckpointReader against the manifest) before read() allocates for it.
  StoredTensor describe(const std::string& path) const;
  // A CPU tensor of the stored dtype and shape. A failed Fletcher-32 check, a truncated file or a
  // missing dataset throws CheckpointError naming the file and the tensor.
  torch::Tensor read(const std::string& path) const;
  // Every dataset's path below the root, in HDF5's (alphabetical) order.
  std::vector<std::string> list() const;
  // A string attribute of the root group; "" if there is none.
  std::string string_attribute(const std::string& name) const;
  const std::string& file_path() const { return file_path_; }

 private:
  std::string file_path_;
  int64_t file_ = -1;
};

// fsync of a file or a folder (a rename is durable only once its folder is synced). Throws
// CheckpointError naming the path.
void fsync_path(const std::string& path);

// Names of the dtypes a checkpoint stores ("float32", "int64", ...), and back.
std::string dtype_name(torch::ScalarType type);
torch::ScalarType dtype_from_name(const std::string& name);  // throws CheckpointError

}  // namespace moco::ckpt
