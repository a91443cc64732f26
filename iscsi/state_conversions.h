#pragma once

// Conversions between the iSCSI domain types and the persisted/exchanged state protos.

#include "iscsi/lun_identity.h"
#include "iscsi/target_spec.h"
#include "proto/state.pb.h"

namespace stagehand::iscsi {

inline void ToProto(const LunIdentity& id, state::v1::LunIdentity* out) {
  out->Clear();
  for (const auto& d : id.designators) {
    out->add_designators(d);
  }
  out->set_serial(id.serial);
  out->set_vendor(id.vendor);
  out->set_product(id.product);
}

inline LunIdentity FromProto(const state::v1::LunIdentity& p) {
  LunIdentity id;
  id.designators.assign(p.designators().begin(), p.designators().end());
  id.serial = p.serial();
  id.vendor = p.vendor();
  id.product = p.product();
  return id;
}

inline void ToProto(const Portal& p, state::v1::Portal* out) {
  out->set_host(p.host);
  out->set_port(p.port);
}

inline Portal FromProto(const state::v1::Portal& p) {
  return Portal{p.host(), static_cast<uint16_t>(p.port())};
}

}  // namespace stagehand::iscsi
