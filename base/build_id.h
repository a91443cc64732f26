#pragma once

// The GNU build ID of a program (the linker's NT_GNU_BUILD_ID note, a hash of its contents):
// two binaries with the same ID are the same build. The agent compares the ID of the session
// binary it would start with the one each running session process reports, to find sessions
// left running by an earlier build (after a package or image upgrade).

#include <string>

#include "base/status.h"

namespace stagehand {

// The running program's build ID, lowercase hex; empty when it was linked without one.
std::string OwnBuildId();

// The build ID of the ELF file at `path`. NotFound when it has none; InvalidArgument when it is
// not a 64-bit ELF file.
absl::StatusOr<std::string> FileBuildId(const std::string& path);

}  // namespace stagehand
