#pragma once

namespace stagehand::agent {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace stagehand::agent
