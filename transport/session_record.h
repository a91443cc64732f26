#pragma once

// A session record (SessionRecord in proto/state.proto) as the driver and the registry see it:
// one kind per transport, named after the transport. The driver persists records without
// looking inside; only the transport that made a record reads its kind.

#include <string>

#include "proto/state.pb.h"

namespace stagehand::transport {

// The name of the transport that made `session`: the name of its kind's field in SessionRecord
// ("userspace", "kernel"); "" for an empty record (an attach that never got that far).
std::string TransportOf(const state::v1::SessionRecord& session);

// The block device the attachment handed out ("/dev/loop3", "/dev/sdb", "/dev/mapper/3600…");
// "" when it has none (yet).
const std::string& DeviceOf(const state::v1::SessionRecord& session);

// `session` as read from disk. Records written before SessionRecord had kinds held both
// transports' fields flat (fields 1-15): they are moved into the kind of the transport that
// made them ("kernel", else userspace), and the flat fields cleared. Other records pass as they
// are. Pure.
state::v1::SessionRecord UpgradeSessionRecord(state::v1::SessionRecord session);

}  // namespace stagehand::transport
