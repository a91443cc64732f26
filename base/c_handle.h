#pragma once

// Owning wrappers for C library handles: `CHandle<T, &free_fn>` is a unique_ptr with a
// null-safe deleter (systemd's _cleanup_ pattern).

#include <memory>

namespace stagehand {

template <auto kFree>
struct CFree {
  template <typename T>
  void operator()(T* p) const noexcept {
    if (p != nullptr) {
      kFree(p);
    }
  }
};

template <typename T, auto kFree>
using CHandle = std::unique_ptr<T, CFree<kFree>>;

}  // namespace stagehand
