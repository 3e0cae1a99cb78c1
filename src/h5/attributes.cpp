#include "h5/attributes.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace moco::h5 {
namespace {

// Length of a 1-d dataset, or -1.
int64_t length_of(hid_t dataset) {
  Handle space(H5Dget_space(dataset));
  if (!space.ok() || H5Sget_simple_extent_ndims(space.get()) != 1) return -1;
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  return static_cast<int64_t>(n);
}

Handle string_type() {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  return Handle(type);
}

}  // namespace

std::unique_lock<std::mutex> lock() {
  static std::mutex mu;
  return std::unique_lock<std::mutex>(mu);
}

bool write_string_attribute(hid_t object, const char* name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  return attr.ok() && H5Awrite(attr.get(), type.get(), value.empty() ? "" : value.data()) >= 0;
}

bool write_int_attribute(hid_t object, const char* name, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  return attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) >= 0;
}

bool read_string_attribute(hid_t object, const char* name, std::string& value) {
  if (H5Aexists(object, name) <= 0) return false;
  Handle attr(H5Aopen(object, name, H5P_DEFAULT));
  if (!attr.ok()) return false;
  Handle type(H5Aget_type(attr.get()));
  if (!type.ok() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return false;
  // One byte more than stored: the memory type is null-terminated, the stored one may be null-padded.
  std::string text(H5Tget_size(type.get()) + 1, '\0');
  Handle mem(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem.get(), text.size());
  if (H5Aread(attr.get(), mem.get(), text.data()) < 0) return false;
  text.resize(std::strlen(text.c_str()));
  value = text;
  return true;
}

bool read_int_attribute(hid_t object, const char* name, int64_t& value) {
  if (H5Aexists(object, name) <= 0) return false;
  Handle attr(H5Aopen(object, name, H5P_DEFAULT));
  Handle type(attr.ok() ? H5Aget_type(attr.get()) : -1);
  if (!type.ok() || H5Tget_class(type.get()) != H5T_INTEGER) return false;
  return H5Aread(attr.get(), H5T_NATIVE_INT64, &value) >= 0;
}

bool write_strings(hid_t file, const char* name, const std::vector<std::string>& values) {
  Handle type = string_type();
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  Handle dataset(H5Dcreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!dataset.ok()) return false;
  if (values.empty()) return true;
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const auto& v : values) pointers.push_back(v.c_str());
  return H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) >= 0;
}

bool read_strings(hid_t file, const char* name, std::vector<std::string>& values) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return false;
  Handle dataset(H5Dopen2(file, name, H5P_DEFAULT));
  if (!dataset.ok()) return false;
  Handle stored(H5Dget_type(dataset.get()));
  if (!stored.ok() || H5Tget_class(stored.get()) != H5T_STRING || H5Tis_variable_str(stored.get()) <= 0) return false;
  const int64_t n = length_of(dataset.get());
  if (n < 0) return false;
  values.clear();
  if (n == 0) return true;
  Handle type = string_type();
  std::vector<char*> pointers(static_cast<size_t>(n), nullptr);
  if (H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) < 0) return false;
  values.reserve(pointers.size());
  for (const char* p : pointers) values.emplace_back(p ? p : "");
  Handle space(H5Dget_space(dataset.get()));
  H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, pointers.data());
  return true;
}

bool write_int64s(hid_t file, const char* name, const std::vector<int64_t>& values) {
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  Handle dataset(H5Dcreate2(file, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!dataset.ok()) return false;
  return values.empty() || H5Dwrite(dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0;
}

bool read_int64s(hid_t file, const char* name, std::vector<int64_t>& values) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return false;
  Handle dataset(H5Dopen2(file, name, H5P_DEFAULT));
  if (!dataset.ok()) return false;
  Handle stored(H5Dget_type(dataset.get()));
  if (!stored.ok() || H5Tget_class(stored.get()) != H5T_INTEGER) return false;
  const int64_t n = length_of(dataset.get());
  if (n < 0) return false;
  values.assign(static_cast<size_t>(n), 0);
  return n == 0 || H5Dread(dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0;
}

}  // namespace moco::h5
