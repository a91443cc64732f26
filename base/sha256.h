#pragma once

#include <string>
#include <string_view>

namespace stagehand {

// SHA-256 of `data` as 64 lower-case hex digits (FIPS 180-4). Used to name per-volume
// directories the way the kubelet does (sha256 of the volume handle).
std::string Sha256Hex(std::string_view data);

}  // namespace stagehand
