#include "agent/logging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>

#include "base/log.h"

namespace stagehand::agent {
namespace {

// %* : the message, escaped for a JSON string.
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm& /*tm*/,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped =
        JsonEscape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }

  std::unique_ptr<custom_flag_formatter> clone() const override {
    return spdlog::details::make_unique<JsonMessage>();
  }
};

// True when systemd connected our stderr to the journal (systemd.exec(5): JOURNAL_STREAM).
bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");  // NOLINT(concurrency-mt-unsafe): startup.
  if (stream == nullptr) {
    return false;
  }

  struct stat st {};

  if (fstat(STDERR_FILENO, &st) != 0) {
    return false;
  }
  unsigned long long dev = 0;
  unsigned long long ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) {
    return false;
  }
  return dev == st.st_dev && ino == st.st_ino;
}

}  // namespace

std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out;
}

absl::Status SetUpLogging(const std::string& format, const std::string& levels) {
  std::string chosen = format;
  if (chosen == "auto") {
    chosen = StderrIsJournal() ? "journal" : "text";
  }
  std::shared_ptr<spdlog::logger> logger;
  if (chosen == "journal") {
    // Native journald fields (PRIORITY, SYSLOG_IDENTIFIER, CODE_*); the text is the message.
    logger = std::make_shared<spdlog::logger>(
        "stagehand", std::make_shared<spdlog::sinks::systemd_sink_mt>("stagehand", false));
  } else {
    logger = spdlog::stderr_color_mt("stagehand");
    if (chosen == "json") {
      auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc,
                                                                   std::string("\n"));
      formatter->add_flag<JsonMessage>('*').set_pattern(
          R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%n","msg":"%*"})");
      logger->set_formatter(std::move(formatter));
    }
  }
  spdlog::set_default_logger(logger);
  RebindComponentLogs();
  return SetLogLevels(levels);
}

}  // namespace stagehand::agent
