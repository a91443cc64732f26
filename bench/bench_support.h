#pragma once

// What the benchmarks that drive the real daemon share: failing loudly (a benchmark that cannot
// measure exits non-zero with the reason) and the median of a run's figures.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "base/status.h"

namespace stagehand::bench {

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "bench failed: %s\n", what.c_str());
  std::exit(1);  // NOLINT(concurrency-mt-unsafe): a benchmark's main thread ends it.
}

inline void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) {
    Die(what + ": " + std::string(s.message()));
  }
}

inline void Check(const grpc::Status& s, const std::string& what) {
  if (!s.ok()) {
    Die(what + ": " + s.error_message());
  }
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace stagehand::bench
