// stagehand-session: the userspace iSCSI session process (libiscsi -> FUSE file), started by the
// agent's userspace transport with its config on fd 3 and a readiness pipe on fd 4. A separate,
// lean binary (no gRPC): it starts in a few milliseconds and keeps one process per volume small.

#include "iscsi/session_process.h"

int main() {
  return stagehand::iscsi::RunSessionProcess(3, 4);
}
