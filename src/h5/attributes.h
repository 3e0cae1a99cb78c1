// defines: lock (one HDF5 call at a time), scalar string and int attributes, 1-d string and int64
// datasets: what the image shards (writer and reader) and the checkpoint shards share beside
// h5/hdf5_basics.h. Included by .cpp files only: <hdf5.h> stays out of other headers.
#pragma once

#include "h5/hdf5_basics.h"

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace moco::h5 {

// Every HDF5 call of src/data holds this lock. Debian's serial HDF5 1.10 is built thread-safe
// (H5is_library_threadsafe says so) but other builds are not; a thread-safe build holds one global
// lock around every call anyway, so ours costs nothing there and makes the others correct. The
// parallel work (reading the source files, pread of samples) happens outside HDF5.
std::unique_lock<std::mutex> lock();

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

}  // namespace moco::h5
