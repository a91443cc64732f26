#include "session/process_setup.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace stagehand::session {

ReclaimGuard KeepOutOfReclaim() {
  return {.io_flusher = prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) == 0,
          .memory_locked = mlockall(MCL_CURRENT | MCL_FUTURE) == 0};
}

void ReplaceWithDevNull(int fd) {
  const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) {
    close(fd);
    return;
  }
  if (devnull != fd) {
    dup3(devnull, fd, 0);
    close(devnull);
  }
}

}  // namespace stagehand::session
