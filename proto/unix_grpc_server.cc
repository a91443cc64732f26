#include "proto/unix_grpc_server.h"

#include <sys/stat.h>

#include <cerrno>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"

namespace stagehand {

absl::StatusOr<std::unique_ptr<grpc::Server>> ServeOnUnixSocket(
    const std::string& path, const std::vector<grpc::Service*>& services) {
  (void)RemoveFileIfExists(path);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", path), grpc::InsecureServerCredentials());
  // One idle polling thread per server (gRPC keeps up to two). A poller that takes a call
  // starts another when none is left, so concurrent calls still each get a thread; the extra
  // ones end once their call is done.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 1);
  for (grpc::Service* service : services) {
    builder.RegisterService(service);
  }
  const mode_t old_umask = umask(0077);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_umask);
  if (!server) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", path, "'"));
  }
  if (chmod(path.c_str(), 0600) != 0) {
    const int error = errno;
    server->Shutdown();
    return ErrnoStatus(error, absl::StrCat("chmod 0600 '", path, "'"));
  }
  return server;
}

}  // namespace stagehand
