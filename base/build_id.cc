#include "base/build_id.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <cstring>
#include <span>
#include <vector>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>

#include "base/unique_fd.h"

namespace stagehand {
namespace {

// The build ID among the ELF notes in `notes`; empty when there is none.
std::string BuildIdInNotes(std::span<const uint8_t> notes) {
  size_t at = 0;
  while (at + sizeof(Elf64_Nhdr) <= notes.size()) {
    Elf64_Nhdr header{};
    std::memcpy(&header, notes.data() + at, sizeof(header));
    const size_t name_at = at + sizeof(header);
    const size_t desc_at = name_at + ((header.n_namesz + 3) & ~size_t{3});
    const size_t next = desc_at + ((header.n_descsz + 3) & ~size_t{3});
    if (next > notes.size()) {
      break;
    }
    if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 &&
        std::memcmp(notes.data() + name_at, "GNU", 4) == 0) {
      return absl::BytesToHexString(absl::string_view(
          reinterpret_cast<const char*>(notes.data() + desc_at), header.n_descsz));
    }
    at = next;
  }
  return "";
}

bool ReadAt(int fd, void* out, size_t size, off_t offset) {
  return pread(fd, out, size, offset) == static_cast<ssize_t>(size);
}

}  // namespace

std::string OwnBuildId() {
  std::string id;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t /*size*/, void* data) -> int {
        // The main program comes first, with an empty name.
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_NOTE) {
            // The loader gives the load address as an integer.
            const uintptr_t address = info->dlpi_addr + ph.p_vaddr;
            // NOLINTNEXTLINE(performance-no-int-to-ptr): an address the loader reported.
            const auto* start = reinterpret_cast<const uint8_t*>(address);
            *static_cast<std::string*>(data) = BuildIdInNotes({start, ph.p_memsz});
            if (!static_cast<std::string*>(data)->empty()) {
              break;
            }
          }
        }
        return 1;  // Only the main program.
      },
      &id);
  return id;
}

absl::StatusOr<std::string> FileBuildId(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  Elf64_Ehdr eh{};
  if (!ReadAt(fd.Get(), &eh, sizeof(eh), 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a 64-bit ELF file"));
  }
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    if (!ReadAt(fd.Get(), &ph, sizeof(ph), static_cast<off_t>(eh.e_phoff + i * sizeof(ph)))) {
      break;
    }
    if (ph.p_type != PT_NOTE || ph.p_filesz > (1 << 20)) {
      continue;
    }
    std::vector<uint8_t> notes(ph.p_filesz);
    if (ReadAt(fd.Get(), notes.data(), notes.size(), static_cast<off_t>(ph.p_offset))) {
      if (std::string id = BuildIdInNotes(notes); !id.empty()) {
        return id;
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("'", path, "' has no build ID"));
}

}  // namespace stagehand
