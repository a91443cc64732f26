#pragma once

// Owning wrappers for libmount handles. Private to mounter/*.cc: never include from a header
// that other components see.

#include <libmount/libmount.h>

#include "base/c_handle.h"

namespace stagehand::mounter {

using MntContext = CHandle<libmnt_context, &mnt_free_context>;
using MntTable = CHandle<libmnt_table, &mnt_unref_table>;  // Refcounted: not mnt_free_table.
using MntIter = CHandle<libmnt_iter, &mnt_free_iter>;

}  // namespace stagehand::mounter
