#include "tools/moeplan/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

namespace moe::cli {

namespace {
// A number with at most one unit word ("989.5 TFLOP/s", "46.70 B", "12 %") aligns right.
bool numeric(const std::string& s) {
  static const std::regex number(R"(^[-+]?[0-9][0-9.,e+-]*( [A-Za-z%/]+)?$)");
  return std::regex_match(s, number);
}
}  // namespace

std::string Table::render() const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells, bool head) {
    std::string out;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const bool right = !head && c > 0 && numeric(cell);
      out += right ? fmt::format("{:>{}}", cell, width[c]) : fmt::format("{:<{}}", cell, width[c]);
      if (c + 1 < width.size()) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header_, true);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  out += std::string(total > 2 ? total - 2 : 0, '-') + "\n";
  for (const auto& row : rows_) out += line(row, false);
  return out;
}

std::string as_billions(double count) {
  return fmt::format("{:.2f} B", count / 1e9);
}
std::string as_gb(double bytes) {
  return fmt::format("{:.2f} GB", bytes / 1e9);
}
std::string as_ms(double seconds, int decimals) {
  return fmt::format("{:.{}f} ms", seconds * 1e3, decimals);
}
std::string as_ms(Seconds t, int decimals) {
  return as_ms(t.value(), decimals);
}
std::string as_gbps(double bps) {
  return fmt::format("{:.1f} GB/s", bps / 1e9);
}

}  // namespace moe::cli
