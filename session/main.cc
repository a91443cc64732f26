// stagehand-session: the userspace iSCSI session process (libiscsi -> FUSE file), started by the
// agent's userspace transport with its config on stdin and a readiness pipe on stdout. A separate,
// lean binary (no gRPC): it starts in a few milliseconds and keeps one process per volume small.
//
// `stagehand-session __list-libraries` prints the dynamic loader and the shared libraries it
// loaded, one per line ("interpreter <path>", "library <path>"), for the relocatable bundle
// (agent/session_bundle.h).

#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "session/session_process.h"

namespace {

int ListLibraries() {
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t /*size*/, void* /*data*/) -> int {
        // The main program has an empty name, the vDSO a relative one.
        if (info->dlpi_name == nullptr || info->dlpi_name[0] != '/') {
          return 0;
        }
        const bool loader = info->dlpi_addr == getauxval(AT_BASE);
        std::printf("%s %s\n", loader ? "interpreter" : "library", info->dlpi_name);
        return 0;
      },
      nullptr);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "__list-libraries") == 0) {
    return ListLibraries();
  }
  return stagehand::session::SessionMain(std::vector<std::string>(argv + 1, argv + argc));
}
