// The subcommands' door to CLI11. Debian's CLI11 (2.1) is header-only and every file that
// includes it builds its validators and parser again: 9.5 s a file at -O2, most of each
// subcommand's compile time. Only command_line.cpp includes it; the subcommands bind their
// options through these three small classes, which keep CLI11's semantics (the same
// add_option/add_flag calls, checks and help text), not a parser of our own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace moe::cli {

// One option of a subcommand; the calls chain like CLI11's.
class Flag {
 public:
  explicit Flag(CLI::Option* option) : option_(option) {}
  Flag& required();
  Flag& positive();      // "--gpus: must be positive, got 0"
  Flag& non_negative();  // zero or more
  Flag& range(int min, int max);
  Flag& range(int64_t min, int64_t max);
  Flag& range(double min, double max);
  Flag& expected(int min, int max);  // values a repeated option takes
  Flag& excludes(const Flag& other);
  bool given() const;  // set on the command line

 private:
  CLI::Option* option_;
};

class Subcommand {
 public:
  explicit Subcommand(CLI::App* app) : app_(app) {}
  // Binds an option to `into`: std::string, int, int64_t, uint32_t, uint64_t, double, their
  // std::optional (not uint), std::vector<std::string> or std::vector<int64_t> (instantiated in
  // command_line.cpp; another type fails to link).
  template <typename T>
  Flag option(const std::string& name, T& into, const std::string& help);
  Flag flag(const std::string& name, bool& into, const std::string& help);
  // Runs once the command line is parsed and checked.
  void on_run(std::function<void()> run);
  // The options set on the command line ("--seed", ...), for defaults a plan file may override.
  std::set<std::string> given() const;

 private:
  CLI::App* app_;
};

// The program: its subcommands, --help and --version.
class CommandLine {
 public:
  CommandLine(const std::string& description, const std::string& version);
  ~CommandLine();
  Subcommand subcommand(const std::string& name, const std::string& description);
  // Parses argv and runs the chosen subcommand, whose errors propagate. Returns the exit code
  // of --help and --version (0), or kExitUsage after one line for a bad command line.
  int run(int argc, char** argv);

 private:
  std::unique_ptr<CLI::App> app_;
};

}  // namespace moe::cli
