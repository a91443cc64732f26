#include "registration/registrar.h"

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "base/file_io.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/unix_socket.h"
#include "proto/pluginregistration.grpc.pb.h"
#include "proto/unix_grpc_server.h"
#include "registration/plugin_info_validation.h"

namespace stagehand::registration {
namespace {

constexpr LogComponent kComponent = LogComponent::kRegistration;

}  // namespace

class Registrar::Service final : public pluginregistration::Registration::Service {
 public:
  explicit Service(Registrar& owner) : owner_(owner) {}

  grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                       pluginregistration::PluginInfo* info) override {
    info->set_type(std::string(kCsiPluginType));
    info->set_name(owner_.options_.driver_name);
    info->set_endpoint(owner_.options_.endpoint);
    for (const auto& version : owner_.options_.versions) {
      info->add_supported_versions(version);
    }
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const pluginregistration::RegistrationStatus* status,
                                        pluginregistration::RegistrationStatusResponse*) override {
    owner_.OnStatus(status->plugin_registered(), status->error());
    return grpc::Status::OK;
  }

 private:
  Registrar& owner_;
};

absl::StatusOr<std::unique_ptr<Registrar>> Registrar::Start(RegistrarOptions options,
                                                            RegistrarListener listener,
                                                            const Clock& clock) {
  if (options.driver_name.empty()) {
    return absl::InvalidArgumentError("the registrar needs a driver name");
  }
  SH_RETURN_IF_ERROR(EndpointSocketPath(options.endpoint).status());
  std::unique_ptr<Registrar> registrar(
      new Registrar(std::move(options), std::move(listener), clock));
  if (registrar->socket_path_.size() > 107) {
    return absl::InvalidArgumentError(absl::StrCat("registration socket '", registrar->socket_path_,
                                                   "' is longer than a unix socket allows"));
  }
  SH_RETURN_IF_ERROR(MakeDirs(registrar->options_.registration_dir, 0700));
  // A socket file that accepts connections belongs to a live registrar: do not steal it.
  if (CheckListening(registrar->socket_path_).ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("another process serves the registration socket '", registrar->socket_path_,
                     "'; is a second stagehand running with driver name '",
                     registrar->options_.driver_name, "'?"));
  }
  SH_RETURN_IF_ERROR(registrar->Serve());
  {
    // From here on server_ is the re-creator's (a rejection may have come in already).
    MutexLock lock(registrar->mu_);
    registrar->started_ = true;
    if (registrar->recreate_pending_) {
      registrar->StartRecreator();
    }
  }
  return registrar;
}

Registrar::Registrar(RegistrarOptions options, RegistrarListener listener, const Clock& clock)
    : options_(std::move(options)),
      listener_(std::move(listener)),
      socket_path_(
          JoinPath(options_.registration_dir, absl::StrCat(options_.driver_name, "-reg.sock"))),
      service_(std::make_unique<Service>(*this)),
      schedule_(clock, options_.backoff) {
  status_.socket_path = socket_path_;
}

Registrar::~Registrar() {
  std::jthread recreator;
  {
    MutexLock lock(mu_);
    stopping_ = true;  // No re-creator starts from here on.
    recreator = std::move(recreator_);
  }
  if (recreator.joinable()) {  // Joined outside the lock: it takes mu_.
    recreator.request_stop();
    recreator.join();
  }
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  // Only a socket of ours: a Start refused because another process serves it leaves it be.
  if (served_) {
    (void)RemoveFileIfExists(socket_path_);
  }
}

RegistrarStatus Registrar::status() const {
  MutexLock lock(mu_);
  return status_;
}

absl::Status Registrar::Serve() {
  // A socket file there is stale: nobody listens on it (checked by Start).
  auto served = ServeOnUnixSocket(socket_path_, {service_.get()});
  if (!served.ok()) {
    return absl::Status(served.status().code(),
                        absl::StrCat("registration socket: ", served.status().message()));
  }
  server_ = std::move(*served);
  served_ = true;
  return absl::OkStatus();
}

void Registrar::OnStatus(bool registered, const std::string& error) {
  RecordStatus(registered, error);
  if (listener_) {
    listener_(status());
  }
}

void Registrar::RecordStatus(bool registered, const std::string& error) {
  MutexLock lock(mu_);
  status_.notified = true;
  status_.registered = registered;
  if (registered) {
    if (status_.rejections > 0 || !status_.last_error.empty()) {
      Log(kComponent)
          .info("driver '{}' registered after {} rejection(s)", options_.driver_name,
                status_.rejections);
    } else {
      Log(kComponent).info("driver '{}' registered with the plugin registry", options_.driver_name);
    }
    status_.last_error.clear();
    status_.rejections = 0;
    schedule_.Succeeded();
    return;
  }
  ++status_.rejections;
  const bool new_reason = status_.last_error != error;
  status_.last_error = error;
  const auto delay = schedule_.Failed();
  if (new_reason) {
    Log(kComponent)
        .error("driver '{}' registration rejected: {}; re-creating '{}' in {} ms",
               options_.driver_name, error, socket_path_, delay.count());
  }
  recreate_pending_ = true;
  StartRecreator();
  cv_.notify_all();
}

void Registrar::StartRecreator() {
  if (recreating_ || stopping_ || !started_) {
    return;
  }
  if (recreator_.joinable()) {
    // The last one has finished: it cleared recreating_ and released mu_ on its way out.
    recreator_.join();
  }
  recreating_ = true;
  recreator_ = std::jthread([this](const std::stop_token& token) { Recreate(token); });
}

void Registrar::Recreate(const std::stop_token& token) {
  MutexLock lock(mu_);
  while (!token.stop_requested() && recreate_pending_) {
    // Wait out the backoff; a success meanwhile cancels the re-creation.
    const auto when = schedule_.next_attempt();
    cv_.wait_for(mu_, token, when - std::chrono::steady_clock::now(),
                 [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !recreate_pending_; });
    if (token.stop_requested()) {
      break;
    }
    if (!recreate_pending_ || status_.registered) {
      recreate_pending_ = false;
      continue;
    }
    recreate_pending_ = false;
    status_.notified = false;
    lock.Unlock();
    // Shut down outside the lock: in-flight handlers take it.
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
      server_.reset();
    }
    const absl::Status served = Serve();
    lock.Lock();
    if (!served.ok()) {
      Log(kComponent).error("driver '{}': {}; trying again", options_.driver_name, served);
      (void)schedule_.Failed();
      recreate_pending_ = true;
    }
  }
  recreating_ = false;
}

}  // namespace stagehand::registration
