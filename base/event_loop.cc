#include "base/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create() {
  UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) {
    return ErrnoStatus(errno, "epoll_create1");
  }
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake) {
    return ErrnoStatus(errno, "eventfd");
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake.Get();
  if (epoll_ctl(epoll.Get(), EPOLL_CTL_ADD, wake.Get(), &event) != 0) {
    return ErrnoStatus(errno, "epoll_ctl(eventfd)");
  }
  return std::unique_ptr<EventLoop>(new EventLoop(std::move(epoll), std::move(wake)));
}

EventLoop::~EventLoop() = default;

void EventLoop::Wake() const {
  const uint64_t one = 1;
  (void)!write(wake_.Get(), &one, sizeof(one));
}

void EventLoop::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  Wake();
}

bool EventLoop::InLoopThread() const {
  MutexLock lock(mu_);
  return loop_thread_ == std::this_thread::get_id();
}

EventLoop::TimerId EventLoop::RunAt(TimePoint when, Task task) {
  bool earliest = false;
  TimerId id = 0;
  {
    MutexLock lock(mu_);
    id = next_id_++;
    earliest = timers_.empty() || when < timers_.begin()->first.first;
    timers_.emplace(std::make_pair(when, id), std::move(task));
    due_.emplace(id, when);
  }
  if (earliest) {
    Wake();  // The loop may be waiting for a later one.
  }
  return id;
}

EventLoop::TimerId EventLoop::RunAfter(std::chrono::milliseconds delay, Task task) {
  return RunAt(std::chrono::steady_clock::now() + delay, std::move(task));
}

bool EventLoop::Cancel(TimerId id) {
  MutexLock lock(mu_);
  auto it = due_.find(id);
  if (it == due_.end()) {
    return false;
  }
  timers_.erase(std::make_pair(it->second, id));
  due_.erase(it);
  return true;
}

absl::Status EventLoop::Watch(int fd, Task on_readable) {
  {
    MutexLock lock(mu_);
    if (!watches_.emplace(fd, std::make_shared<Task>(std::move(on_readable))).second) {
      return absl::InvalidArgumentError(absl::StrCat("fd ", fd, " is watched already"));
    }
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  if (epoll_ctl(epoll_.Get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    const int error = errno;
    MutexLock lock(mu_);
    watches_.erase(fd);
    return ErrnoStatus(error, absl::StrCat("epoll_ctl(add fd ", fd, ")"));
  }
  return absl::OkStatus();
}

void EventLoop::Unwatch(int fd) {
  {
    MutexLock lock(mu_);
    if (watches_.erase(fd) == 0) {
      return;
    }
  }
  (void)epoll_ctl(epoll_.Get(), EPOLL_CTL_DEL, fd, nullptr);
}

int EventLoop::NextTimeoutMs() {
  if (timers_.empty()) {
    return -1;
  }
  const auto now = std::chrono::steady_clock::now();
  const TimePoint first = timers_.begin()->first.first;
  if (first <= now) {
    return 0;
  }
  // Rounded up: waking a millisecond early would only spin.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(first - now).count();
  return static_cast<int>(std::min<int64_t>(ms, 60'000));
}

void EventLoop::RunDueTimers() {
  const auto now = std::chrono::steady_clock::now();
  // One at a time, so that a task may cancel or add the ones after it.
  while (true) {
    Task task;
    {
      MutexLock lock(mu_);
      if (stop_ || timers_.empty() || timers_.begin()->first.first > now) {
        return;
      }
      auto first = timers_.begin();
      due_.erase(first->first.second);
      task = std::move(first->second);
      timers_.erase(first);
    }
    task();
  }
}

void EventLoop::Dispatch(int fd) {
  std::shared_ptr<Task> callback;
  {
    MutexLock lock(mu_);
    auto it = watches_.find(fd);
    if (it == watches_.end() || stop_) {
      return;  // Unwatched after epoll_wait returned it.
    }
    callback = it->second;
  }
  (*callback)();
}

absl::Status EventLoop::Run() {
  {
    MutexLock lock(mu_);
    loop_thread_ = std::this_thread::get_id();
  }
  constexpr int kMaxEvents = 16;
  std::array<epoll_event, kMaxEvents> events{};
  absl::Status result;
  while (true) {
    int timeout = 0;
    {
      MutexLock lock(mu_);
      if (stop_) {
        break;
      }
      timeout = NextTimeoutMs();
    }
    const int n = epoll_wait(epoll_.Get(), events.data(), kMaxEvents, timeout);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      result = ErrnoStatus(errno, "epoll_wait");
      break;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == wake_.Get()) {
        uint64_t count = 0;
        (void)!read(wake_.Get(), &count, sizeof(count));
        continue;
      }
      Dispatch(fd);
    }
    RunDueTimers();
  }
  MutexLock lock(mu_);
  loop_thread_ = std::thread::id();
  stop_ = false;  // This Stop is used up; a later Run runs again.
  return result;
}

bool CallbackGate::Enter(const std::function<void()>& callback) {
  {
    MutexLock lock(mu_);
    if (closed_) {
      return false;
    }
    ++running_;
    running_on_ = std::this_thread::get_id();
  }
  callback();
  MutexLock lock(mu_);
  --running_;
  idle_.notify_all();
  return true;
}

void CallbackGate::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  if (running_ > 0 && running_on_ == std::this_thread::get_id()) {
    return;  // Closed from the callback itself: it returns on its own.
  }
  idle_.wait(mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; });
}

bool CallbackGate::closed() const {
  MutexLock lock(mu_);
  return closed_;
}

LoopTimer::LoopTimer(EventLoop& loop, std::function<void()> fire) : loop_(loop) {
  state_->fire = std::move(fire);
}

void LoopTimer::ScheduleAt(EventLoop::TimePoint when) {
  State& s = *state_;
  if (s.gate.closed()) {
    return;
  }
  MutexLock lock(s.mu);
  if (s.pending && s.pending_at <= when) {
    return;
  }
  if (s.pending) {
    // Never waits: if the loop took it already, its generation is stale and it does nothing.
    loop_.Cancel(s.pending_id);
  }
  const uint64_t generation = ++s.generation;
  s.pending = true;
  s.pending_at = when;
  s.pending_id = loop_.RunAt(when, [state = state_, generation] { Fire(state, generation); });
}

void LoopTimer::Fire(const std::shared_ptr<State>& state, uint64_t generation) {
  state->gate.Enter([&state, generation] {
    {
      MutexLock lock(state->mu);
      if (generation != state->generation || !state->pending) {
        return;
      }
      state->pending = false;
    }
    state->fire();
  });
}

void LoopTimer::Close() {
  State& s = *state_;
  EventLoop::TimerId id = 0;
  {
    MutexLock lock(s.mu);
    ++s.generation;
    id = s.pending ? s.pending_id : 0;
    s.pending = false;
  }
  if (id != 0) {
    loop_.Cancel(id);
  }
  s.gate.Close();
}

absl::StatusOr<std::unique_ptr<LoopWatch>> LoopWatch::Start(EventLoop& loop, int fd,
                                                            std::function<void()> on_readable) {
  std::unique_ptr<LoopWatch> watch(new LoopWatch(loop, fd));
  std::shared_ptr<CallbackGate> gate = watch->gate_;
  SH_RETURN_IF_ERROR(
      loop.Watch(fd, [gate, callback = std::move(on_readable)] { gate->Enter(callback); }));
  watch->watching_ = true;
  return watch;
}

void LoopWatch::Close() {
  if (watching_) {
    loop_.Unwatch(fd_);
    watching_ = false;
  }
  gate_->Close();
}

LoopThread::LoopThread() {
  auto loop = EventLoop::Create();
  if (!loop.ok()) {
    std::fprintf(stderr, "cannot create an event loop: %s\n", loop.status().ToString().c_str());
    std::abort();
  }
  loop_ = *std::move(loop);
  thread_ = std::jthread([loop = loop_.get()] { (void)loop->Run(); });
}

LoopThread::~LoopThread() {
  loop_->Stop();
  thread_.join();
}

}  // namespace stagehand
