#include "training/progress.hpp"

#include <unistd.h>

#include <cmath>

namespace af::train {

namespace {

std::string seconds_text(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%d:%02d:%02d", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60, static_cast<int>(s) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%d:%02d", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else if (s >= 1) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%.0fms", s * 1000);
  return buf;
}

std::string rate_text(double per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, per_second >= 1000 ? "%.0f" : "%.1f", per_second);
  return buf;
}

}  // namespace

bool is_terminal(std::FILE* out) { return out != nullptr && ::isatty(::fileno(out)) == 1; }

progress_display::progress_display(std::FILE* out, bool bar, int64_t total)
    : out_(out), bar_(bar), total_(total), start_(std::chrono::steady_clock::now()) {}

std::string progress_display::figures_text(const logs& figures) const {
  std::string out;
  char buf[96];
  for (const auto& [key, value] : figures) {
    std::snprintf(buf, sizeof buf, " - %s: %.4f", key.c_str(), value);
    out += buf;
  }
  return out;
}

void progress_display::update(int64_t batches, int64_t samples, const logs& figures) {
  if (!bar_ || out_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && batches != total_) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int width = 30;
  std::string line;
  if (total_ > 0) {
    const int filled = static_cast<int>(static_cast<double>(width) * static_cast<double>(batches) / static_cast<double>(total_));
    std::string bar(static_cast<std::size_t>(width), '.');
    for (int i = 0; i < filled && i < width; ++i) bar[static_cast<std::size_t>(i)] = '=';
    if (filled < width) bar[static_cast<std::size_t>(filled)] = '>';
    const double eta = batches > 0 ? elapsed / static_cast<double>(batches) * static_cast<double>(total_ - batches) : 0;
    line = std::to_string(batches) + "/" + std::to_string(total_) + " [" + bar + "] - ETA: " + seconds_text(eta);
  } else {
    line = std::to_string(batches) + "/Unknown - " + seconds_text(elapsed);
  }
  line += figures_text(figures);
  if (elapsed > 0) line += " - " + rate_text(static_cast<double>(samples) / elapsed) + " samples/s";
  std::fprintf(out_, "\r%s\033[K", line.c_str());
  std::fflush(out_);
}

void progress_display::finish(int64_t batches, int64_t samples, const logs& figures) {
  if (out_ == nullptr) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = std::to_string(batches) + "/" + std::to_string(batches);
  if (bar_) line += " [" + std::string(30, '=') + "]";
  line += " - " + seconds_text(elapsed);
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "literal" + temporary here.
  if (batches > 0) line.append(" ").append(seconds_text(elapsed / static_cast<double>(batches))).append("/step");
  line += figures_text(figures);
  if (elapsed > 0) line += " - " + rate_text(static_cast<double>(samples) / elapsed) + " samples/s";
  std::fprintf(out_, bar_ ? "\r%s\033[K\n" : "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace af::train
