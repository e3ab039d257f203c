#include <fmt/format.h>

#include <optional>
#include <string>

#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"

namespace moe::cli {

namespace {

CLI::Validator sign_check(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        const std::optional<double> v = finite_number(text);
        if (!v) return fmt::format("'{}' is not a number", text);
        if (*v > 0 || (zero_allowed && *v == 0)) return "";
        return fmt::format("must be {}, got {}", zero_allowed ? "zero or more" : "positive", text);
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}

}  // namespace

const CLI::Validator kPositive = sign_check(false);
const CLI::Validator kNonNegative = sign_check(true);

}  // namespace moe::cli
