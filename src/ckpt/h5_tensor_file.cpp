#include "ckpt/h5_tensor_file.h"

#include "h5/attributes.h"
#include "h5/hdf5_basics.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

namespace moco::ckpt {
namespace {

using moco::h5::Handle;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw CheckpointError(file + ": " + what + " (HDF5: " + h5::error_text() + ")");
}

struct TypeInfo {
  torch::ScalarType dtype;
  const char* name;
};
const std::vector<TypeInfo>& type_table() {
  static const std::vector<TypeInfo> table = {{torch::kFloat32, "float32"}, {torch::kFloat64, "float64"},
                                              {torch::kFloat16, "float16"}, {torch::kBFloat16, "bfloat16"},
                                              {torch::kInt64, "int64"},     {torch::kInt32, "int32"},
                                              {torch::kInt16, "int16"},     {torch::kInt8, "int8"},
                                              {torch::kUInt8, "uint8"},     {torch::kBool, "bool"}};
  return table;
}

// The in-memory HDF5 type of a dtype. 16-bit floats travel as their raw bits (uint16): HDF5 1.10 has
// no half type; the "dtype" attribute says how to read them.
hid_t memory_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return H5T_NATIVE_FLOAT;
    case torch::kFloat64:
      return H5T_NATIVE_DOUBLE;
    case torch::kFloat16:
    case torch::kBFloat16:
      return H5T_NATIVE_UINT16;
    case torch::kInt64:
      return H5T_NATIVE_INT64;
    case torch::kInt32:
      return H5T_NATIVE_INT32;
    case torch::kInt16:
      return H5T_NATIVE_INT16;
    case torch::kInt8:
      return H5T_NATIVE_INT8;
    case torch::kUInt8:
    case torch::kBool:
      return H5T_NATIVE_UINT8;
    default:
      throw CheckpointError(std::string("checkpoints cannot store dtype ") + c10::toString(dtype));
  }
}

// The dtype of a dataset written without our "dtype" attribute (by h5py, say).
torch::ScalarType dtype_of_stored_type(hid_t type, const std::string& where) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT && size == 4) return torch::kFloat32;
  if (cls == H5T_FLOAT && size == 8) return torch::kFloat64;
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size == 8 && is_signed) return torch::kInt64;
    if (size == 4 && is_signed) return torch::kInt32;
    if (size == 2 && is_signed) return torch::kInt16;
    if (size == 1) return is_signed ? torch::kInt8 : torch::kUInt8;
  }
  throw CheckpointError(where + ": unsupported HDF5 element type (class " + std::to_string(cls) + ", " +
                        std::to_string(size) + " bytes)");
}

// A scalar string attribute; "" if there is none or it cannot be read.
std::string read_string_attribute(hid_t object, const char* name) {
  std::string value;
  return h5::read_string_attribute(object, name, value) ? value : "";
}

void write_string_attribute_on(hid_t object, const std::string& name, const std::string& value,
                               const std::string& where) {
  if (!h5::write_string_attribute(object, name.c_str(), value)) fail(where, "cannot write attribute '" + name + "'");
}

constexpr int64_t kChunkBytes = 4 << 20;  // Fletcher-32 checks per chunk; 4 MiB keeps chunk reads cheap

}  // namespace

std::string dtype_name(torch::ScalarType type) {
  for (const auto& t : type_table())
    if (t.dtype == type) return t.name;
  throw CheckpointError(std::string("checkpoints cannot store dtype ") + c10::toString(type));
}

torch::ScalarType dtype_from_name(const std::string& name) {
  for (const auto& t : type_table())
    if (name == t.name) return t.dtype;
  throw CheckpointError("unknown dtype '" + name + "'");
}

H5TensorWriter::H5TensorWriter(std::string file_path) : file_path_(std::move(file_path)) {
  h5::init_once();
  // The 1.10 file format checksums all metadata (superblock, object headers, chunk indexes), and
  // HDF5 verifies a checksum before it decodes what it covers. Damaged metadata is then refused as
  // such; in the default (1.0) format HDF5 1.10 parses it unchecked, and its decoders read out of
  // bounds on malformed input (found by fuzz/fuzz_ckpt_shard.cpp). Data chunks carry Fletcher-32
  // and every tensor a CRC-32 in the manifest. Readable by HDF5 >= 1.10 (h5py since 2.8).
  Handle access(H5Pcreate(H5P_FILE_ACCESS));
  if (!access.ok() || H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST) < 0)
    fail(file_path_, "cannot select the HDF5 1.10 file format");
  file_ = H5Fcreate(file_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
  if (file_ < 0) fail(file_path_, "cannot create the file");
}

H5TensorWriter::~H5TensorWriter() {
  if (file_ >= 0) H5Fclose(file_);
}

void H5TensorWriter::write(const std::string& path, const torch::Tensor& tensor) {
  const std::string where = file_path_ + ": tensor '" + path + "'";
  const auto t = tensor.detach().to(torch::kCPU).contiguous();
  const hid_t mem_type = memory_type(t.scalar_type());
  std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle create(H5Pcreate(H5P_DATASET_CREATE));
  if (!dims.empty() && t.numel() > 0) {
    // Chunks span whole rows of dim 0, as many as fit in kChunkBytes.
    std::vector<hsize_t> chunk = dims;
    const int64_t row_bytes = std::max<int64_t>(1, t.numel() / t.size(0) * static_cast<int64_t>(t.element_size()));
    chunk[0] = static_cast<hsize_t>(std::clamp<int64_t>(kChunkBytes / row_bytes, 1, t.size(0)));
    if (H5Pset_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data()) < 0 ||
        H5Pset_fletcher32(create.get()) < 0)
      fail(where, "cannot set up chunking and Fletcher-32");
  }
  Handle link(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(link.get(), 1);
  Handle dataset(H5Dcreate2(file_, path.c_str(), mem_type, space.get(), link.get(), create.get(), H5P_DEFAULT));
  if (!dataset.ok()) fail(where, "cannot create the dataset");
  if (t.numel() > 0 && H5Dwrite(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
    fail(where, "cannot write the data");
  write_string_attribute_on(dataset.get(), "dtype", dtype_name(t.scalar_type()), where);
  start_writeback();
}

void H5TensorWriter::start_writeback() {
  // Starts the kernel writing back what is already in the file, so that the disk works while later
  // tensors are checksummed and copied, and close()'s fsync has little left to wait for.
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file_, H5P_DEFAULT, &handle) < 0 || !handle) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  sync_file_range(*static_cast<int*>(handle), 0, 0, SYNC_FILE_RANGE_WRITE);
}

void H5TensorWriter::write_string_attribute(const std::string& name, const std::string& value) {
  write_string_attribute_on(file_, name, value, file_path_);
}

void H5TensorWriter::close() {
  if (file_ < 0) return;
  const hid_t file = file_;
  file_ = -1;
  if (H5Fclose(file) < 0) fail(file_path_, "cannot close (flush) the file");
  fsync_path(file_path_);
}

H5TensorReader::H5TensorReader(std::string file_path) : file_path_(std::move(file_path)) {
  h5::init_once();
  file_ = H5Fopen(file_path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail(file_path_, "cannot open as HDF5 (missing, truncated or not a checkpoint shard)");
}

H5TensorReader::~H5TensorReader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool H5TensorReader::contains(const std::string& path) const {
  // H5Lexists needs every intermediate link to exist: check each prefix.
  for (size_t slash = path.find('/');; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
  }
}

namespace {

// The shape and dtype an open dataset declares. A damaged file may declare anything: a shape whose
// bytes do not fit in int64 is refused here, before anyone allocates for it.
StoredTensor describe_dataset(hid_t dataset, const std::string& where) {
  Handle space(H5Dget_space(dataset));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(where, "cannot read the shape");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    fail(where, "cannot read the shape");
  StoredTensor stored;
  const std::string stored_dtype = read_string_attribute(dataset, "dtype");
  if (!stored_dtype.empty()) {
    try {
      stored.dtype = dtype_from_name(stored_dtype);
    } catch (const CheckpointError& e) {
      throw CheckpointError(where + ": " + e.what());
    }
  } else {
    Handle type(H5Dget_type(dataset));
    stored.dtype = dtype_of_stored_type(type.get(), where);
  }
  uint64_t bytes = c10::elementSize(stored.dtype);
  for (const hsize_t d : dims) {
    if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw CheckpointError(where + ": implausible shape in the file (" + std::to_string(rank) +
                            " dimensions whose bytes overflow int64): the file is corrupt");
    stored.shape.push_back(static_cast<int64_t>(d));
  }
  return stored;
}

}  // namespace

StoredTensor H5TensorReader::describe(const std::string& path) const {
  const std::string where = file_path_ + ": tensor '" + path + "'";
  if (!contains(path)) throw CheckpointError(where + ": not in the file");
  Handle dataset(H5Dopen2(file_, path.c_str(), H5P_DEFAULT));
  if (!dataset.ok()) fail(where, "cannot open the dataset");
  return describe_dataset(dataset.get(), where);
}

torch::Tensor H5TensorReader::read(const std::string& path) const {
  const std::string where = file_path_ + ": tensor '" + path + "'";
  if (!contains(path)) throw CheckpointError(where + ": not in the file");
  Handle dataset(H5Dopen2(file_, path.c_str(), H5P_DEFAULT));
  if (!dataset.ok()) fail(where, "cannot open the dataset");
  const StoredTensor stored = describe_dataset(dataset.get(), where);
  auto tensor = torch::empty(stored.shape, torch::TensorOptions().dtype(stored.dtype));
  if (tensor.numel() > 0 &&
      H5Dread(dataset.get(), memory_type(stored.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data_ptr()) < 0)
    fail(where,
         "cannot read the data: the file is corrupt or truncated (a Fletcher-32 mismatch reads as 'filter returned "
         "failure')");
  return tensor;
}

namespace {
herr_t collect_dataset(hid_t group, const char* name, const H5L_info_t*, void* data) {
  const hid_t object = H5Oopen(group, name, H5P_DEFAULT);
  if (object < 0) return 0;
  if (H5Iget_type(object) == H5I_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
  H5Oclose(object);
  return 0;
}
}  // namespace

std::vector<std::string> H5TensorReader::list() const {
  std::vector<std::string> names;
  if (H5Lvisit(file_, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &names) < 0)
    fail(file_path_, "cannot list the datasets");
  return names;
}

std::string H5TensorReader::string_attribute(const std::string& name) const {
  return read_string_attribute(file_, name.c_str());
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw CheckpointError(path + ": cannot open to fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(path + ": fsync failed: " + std::strerror(saved));
}

}  // namespace moco::ckpt
