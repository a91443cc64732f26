#pragma once

// Owning handles for libiscsi objects, for code that talks libiscsi directly (iscsi/*.cc,
// stagehandctl).

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include "base/c_handle.h"

namespace stagehand::iscsi {

inline void DestroyIscsiContext(iscsi_context* ctx) {
  (void)iscsi_destroy_context(ctx);
}

using IscsiContext = CHandle<iscsi_context, &DestroyIscsiContext>;
using ScsiTask = CHandle<scsi_task, &scsi_free_scsi_task>;

}  // namespace stagehand::iscsi
