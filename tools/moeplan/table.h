// A plain-text table for terminal output: columns sized to their widest cell, numbers right
// aligned. Keeps every subcommand's human output in one style.
#pragma once

#include <string>
#include <vector>

#include "planner/units.h"

namespace moe::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Human units: "46.70 B", "22.90 GB", "6.909 ms".
std::string as_billions(double count);
std::string as_gb(double bytes);
// `decimals` places of milliseconds (3 by default).
std::string as_ms(double seconds, int decimals = 3);
std::string as_ms(Seconds t, int decimals = 3);
std::string as_gbps(double bytes_per_sec);

}  // namespace moe::cli
