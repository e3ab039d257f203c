#include "tools/moeplan/command_line.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"

namespace moe::cli {

namespace {

// "--gpus: must be positive, got 0" where CLI11's PositiveNumber would print its range bounds
// (0 to 1.8e308).
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

Flag& Flag::required() {
  option_->required();
  return *this;
}

Flag& Flag::positive() {
  static const CLI::Validator check = sign_check(false);
  option_->check(check);
  return *this;
}

Flag& Flag::non_negative() {
  static const CLI::Validator check = sign_check(true);
  option_->check(check);
  return *this;
}

Flag& Flag::range(int min, int max) {
  return range(int64_t{min}, int64_t{max});
}

Flag& Flag::range(int64_t min, int64_t max) {
  option_->check(CLI::Range(min, max));
  return *this;
}

Flag& Flag::range(double min, double max) {
  // CLI::Range lets nan through (no comparison with it fails); a number must be finite first.
  option_->check(CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const std::optional<double> v = finite_number(text);
        if (!v) return fmt::format("'{}' is not a number", text);
        if (*v < min || *v > max)
          return fmt::format("Value {} not in range {:g} to {:g}", text, min, max);
        return "";
      },
      "RANGE"));
  return *this;
}

Flag& Flag::expected(int min, int max) {
  option_->expected(min, max);
  return *this;
}

Flag& Flag::excludes(const Flag& other) {
  option_->excludes(other.option_);
  return *this;
}

bool Flag::given() const {
  return option_->count() > 0;
}

template <typename T>
Flag Subcommand::option(const std::string& name, T& into, const std::string& help) {
  return Flag(app_->add_option(name, into, help));
}

#define MOEPLAN_OPTION_TYPE(T) \
  template Flag Subcommand::option(const std::string&, T&, const std::string&);
MOEPLAN_OPTION_TYPE(std::string)
MOEPLAN_OPTION_TYPE(int)
MOEPLAN_OPTION_TYPE(int64_t)
MOEPLAN_OPTION_TYPE(uint32_t)
MOEPLAN_OPTION_TYPE(uint64_t)
MOEPLAN_OPTION_TYPE(double)
MOEPLAN_OPTION_TYPE(std::optional<std::string>)
MOEPLAN_OPTION_TYPE(std::optional<int>)
MOEPLAN_OPTION_TYPE(std::optional<int64_t>)
MOEPLAN_OPTION_TYPE(std::optional<double>)
MOEPLAN_OPTION_TYPE(std::vector<std::string>)
MOEPLAN_OPTION_TYPE(std::vector<int64_t>)
#undef MOEPLAN_OPTION_TYPE

Flag Subcommand::flag(const std::string& name, bool& into, const std::string& help) {
  return Flag(app_->add_flag(name, into, help));
}

void Subcommand::on_run(std::function<void()> run) {
  app_->callback(std::move(run));
}

std::set<std::string> Subcommand::given() const {
  std::set<std::string> names;
  for (const CLI::Option* opt : app_->get_options())
    if (opt->count() > 0) names.insert(opt->get_name());
  return names;
}

CommandLine::CommandLine(const std::string& description, const std::string& version)
    : app_(std::make_unique<CLI::App>(description)) {
  app_->require_subcommand(1);
  app_->set_version_flag("--version", version);
}

CommandLine::~CommandLine() = default;

Subcommand CommandLine::subcommand(const std::string& name, const std::string& description) {
  return Subcommand(app_->add_subcommand(name, description));
}

int CommandLine::run(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app_->exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app_->exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error, with a pointer to help.
    std::cerr << fmt::format("error: {} (see moeplan --help)\n", e.what());
    return kExitUsage;
  }
  return 0;
}

}  // namespace moe::cli
