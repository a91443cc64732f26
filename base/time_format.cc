#include "base/time_format.h"

#include <absl/time/time.h>

namespace stagehand {

std::string FormatRfc3339(std::chrono::system_clock::time_point t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

}  // namespace stagehand
