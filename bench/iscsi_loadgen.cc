// iscsi_loadgen: the raw-iSCSI baseline for the data-path benchmark. One libiscsi session, async
// READ16/WRITE16 kept at a fixed queue depth from one thread, for a fixed time.
//
//   iscsi_loadgen --portal 127.0.0.1:3260 --iqn iqn… --lun 1 --mode randread --bs 4096 --qd 32
//                 --seconds 10 [--span-mib 1024]
//
// Prints one line: "<mode> bs=<bs> qd=<qd> iops=<n> mibps=<n>".

#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

extern "C" {
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
}

namespace {

struct Gen {
  iscsi_context* ctx = nullptr;
  int lun = 0;
  bool write = false;
  bool random = false;
  uint32_t bs = 4096;
  uint32_t block = 512;
  uint64_t span_blocks = 0;  // In units of `bs`.
  uint64_t next_seq = 0;
  uint64_t done = 0;
  uint64_t errors = 0;
  bool stop = false;
  int inflight = 0;
  std::mt19937_64 rng{42};
  std::vector<uint8_t> payload;
};

void Submit(Gen& g);

void OnDone(iscsi_context* /*ctx*/, int status, void* command_data, void* private_data) {
  auto* g = static_cast<Gen*>(private_data);
  auto* task = static_cast<scsi_task*>(command_data);
  if (status != SCSI_STATUS_GOOD) {
    ++g->errors;
  }
  scsi_free_scsi_task(task);
  --g->inflight;
  ++g->done;
  if (!g->stop) {
    Submit(*g);
  }
}

void Submit(Gen& g) {
  uint64_t index = g.random ? g.rng() % g.span_blocks : (g.next_seq++ % g.span_blocks);
  uint64_t lba = index * (g.bs / g.block);
  scsi_task* t = nullptr;
  if (g.write) {
    t = iscsi_write16_task(g.ctx, g.lun, lba, g.payload.data(), g.bs, g.block, 0, 0, 0, 0, 0,
                           &OnDone, &g);
  } else {
    t = iscsi_read16_task(g.ctx, g.lun, lba, g.bs, g.block, 0, 0, 0, 0, 0, &OnDone, &g);
  }
  if (t == nullptr) {
    std::fprintf(stderr, "submit failed: %s\n", iscsi_get_error(g.ctx));
    std::exit(1);
  }
  ++g.inflight;
}

}  // namespace

int main(int argc, char** argv) {
  std::string portal;
  std::string iqn;
  int lun = 0;
  std::string mode = "randread";
  uint32_t bs = 4096;
  int qd = 1;
  int seconds = 10;
  uint64_t span_mib = 1024;
  CLI::App app{"raw libiscsi load generator (benchmark baseline)"};
  app.add_option("--portal", portal)->required();
  app.add_option("--iqn", iqn)->required();
  app.add_option("--lun", lun);
  app.add_option("--mode", mode)->check(CLI::IsMember({"read", "write", "randread", "randwrite"}));
  app.add_option("--bs", bs);
  app.add_option("--qd", qd);
  app.add_option("--seconds", seconds);
  app.add_option("--span-mib", span_mib, "Region of the LUN to use");
  CLI11_PARSE(app, argc, argv);

  Gen g;
  g.ctx = iscsi_create_context("iqn.2026-11.dev.stagehand:loadgen");
  iscsi_set_targetname(g.ctx, iqn.c_str());
  iscsi_set_session_type(g.ctx, ISCSI_SESSION_NORMAL);
  iscsi_set_header_digest(g.ctx, ISCSI_HEADER_DIGEST_NONE_CRC32C);
  if (iscsi_full_connect_sync(g.ctx, portal.c_str(), lun) != 0) {
    std::fprintf(stderr, "login failed: %s\n", iscsi_get_error(g.ctx));
    return 1;
  }
  scsi_task* rc = iscsi_readcapacity16_sync(g.ctx, lun);
  auto* cap =
      rc == nullptr ? nullptr : static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(rc));
  if (cap == nullptr) {
    std::fprintf(stderr, "read capacity failed\n");
    return 1;
  }
  g.block = cap->block_length;
  const uint64_t bytes = std::min<uint64_t>((cap->returned_lba + 1) * g.block, span_mib << 20);
  scsi_free_scsi_task(rc);
  g.lun = lun;
  g.bs = bs;
  g.write = mode == "write" || mode == "randwrite";
  g.random = mode == "randread" || mode == "randwrite";
  g.span_blocks = bytes / bs;
  g.payload.assign(bs, 0xa5);

  for (int i = 0; i < qd; ++i) {
    Submit(g);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  while (true) {
    if (std::chrono::steady_clock::now() >= end) {
      g.stop = true;
    }
    if (g.stop && g.inflight == 0) {
      break;
    }
    pollfd pfd{iscsi_get_fd(g.ctx), static_cast<short>(iscsi_which_events(g.ctx)), 0};
    if (poll(&pfd, 1, 100) < 0) {
      break;
    }
    if (iscsi_service(g.ctx, pfd.revents) < 0) {
      std::fprintf(stderr, "service failed: %s\n", iscsi_get_error(g.ctx));
      return 1;
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  iscsi_logout_sync(g.ctx);
  iscsi_destroy_context(g.ctx);
  const double iops = static_cast<double>(g.done) / secs;
  std::printf("%s bs=%u qd=%d iops=%.0f mibps=%.1f errors=%llu\n", mode.c_str(), bs, qd, iops,
              iops * bs / (1 << 20), static_cast<unsigned long long>(g.errors));
  return g.errors == 0 ? 0 : 1;
}
