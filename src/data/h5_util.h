// defines: the small part of HDF5's C API that the image shards share between writer and reader:
// h5_lock (one HDF5 call at a time), attributes and string datasets (Handle, init_once and
// error_text come from h5/hdf5_basics.h). Included by .cpp files only: <hdf5.h> stays out of other headers.
#pragma once

#include "h5/hdf5_basics.h"

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace moco::data::h5 {

// Every HDF5 call of src/data holds this lock. Debian's serial HDF5 1.10 is built thread-safe
// (H5is_library_threadsafe says so) but other builds are not; a thread-safe build holds one global
// lock around every call anyway, so ours costs nothing there and makes the others correct. The
// parallel work (reading the source files, pread of samples) happens outside HDF5.
std::unique_lock<std::mutex> lock();

using moco::h5::error_text;
using moco::h5::Handle;
using moco::h5::init_once;

// Each returns false (or "" / -1) on failure; callers name the file in their own error.
bool write_string_attribute(hid_t object, const char* name, const std::string& value);
bool write_int_attribute(hid_t object, const char* name, int64_t value);
bool read_string_attribute(hid_t object, const char* name, std::string& value);
bool read_int_attribute(hid_t object, const char* name, int64_t& value);

// 1-d datasets of variable-length UTF-8 strings (what h5py writes for a list of str).
bool write_strings(hid_t file, const char* name, const std::vector<std::string>& values);
bool read_strings(hid_t file, const char* name, std::vector<std::string>& values);

// 1-d int64 datasets.
bool write_int64s(hid_t file, const char* name, const std::vector<int64_t>& values);
bool read_int64s(hid_t file, const char* name, std::vector<int64_t>& values);

}  // namespace moco::data::h5
