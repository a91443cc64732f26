#pragma once

// std::mutex with clang's thread-safety annotations. libstdc++'s std::mutex carries none, so
// ABSL_GUARDED_BY on a member next to a std::mutex checks nothing; next to this Mutex, clang's
// -Wthread-safety (the CI's clang pass) checks every access. GCC ignores the annotations.
//
// Not absl::Mutex: the loops wait with std::condition_variable_any and a std::stop_token
// (jthread's interruptible waits). A condition_variable_any waits on the Mutex itself:
//
//   MutexLock lock(mu_);
//   cv_.wait(mu_, token, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); });

#include <mutex>

#include <absl/base/thread_annotations.h>

namespace stagehand {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  ~Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Lockable, for condition_variable_any; code takes a MutexLock instead.
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }

  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock/Lock let go of it and take it again in between (around a
// call that must not run under the lock).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }

  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) {
      mu_.unlock();
    }
  }

  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_.unlock();
    held_ = false;
  }

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace stagehand
