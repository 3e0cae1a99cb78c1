// Linked into every executable of a -DMOCO_SANITIZE build only (CMakeLists.txt).
//
// PMIx (Open MPI's launcher interface) leaks a few bytes per peer on its own event thread
// (pmix_hash_fetch). Open MPI dlopens libpmix through a plugin and dlcloses it in MPI_Finalize, so at
// exit LeakSanitizer sees "<unknown module>" frames that no suppression can name. Loading it here
// first with RTLD_NODELETE keeps it mapped to the end: its leaks then show as libpmix.so, which
// tools/lsan.supp names. Nothing else changes: Open MPI's later dlopen gets this same library.
#include <dlfcn.h>

namespace {

[[maybe_unused]] const bool kPmixKeptLoaded = [] {
  return dlopen("libpmix.so.2", RTLD_LAZY | RTLD_NODELETE) != nullptr;  // absent: nothing to keep
}();

}  // namespace
