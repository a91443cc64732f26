#pragma once

// Owning wrappers for libblkid handles. Private to mounter/*.cc.

#include <blkid/blkid.h>

#include "base/c_handle.h"

namespace stagehand::mounter {

using BlkidProbe = CHandle<blkid_struct_probe, &blkid_free_probe>;  // blkid_probe is a pointer.

}  // namespace stagehand::mounter
