// Typed errors of the libraries. Only the CLI turns them into messages and exit codes.
//
// InputError names where a bad value came from (a file and a JSON pointer, or a command-line
// option) so that the user gets one line that says which field to fix.
#pragma once

#include <stdexcept>
#include <string>

namespace moe {

class InputError : public std::runtime_error {
 public:
  // source: a file path or an option name ("--parallel"); where: a JSON pointer or a key.
  InputError(std::string source, std::string where, const std::string& problem)
      : std::runtime_error(format(source, where, problem)),
        source_(std::move(source)),
        where_(std::move(where)) {}

  const std::string& source() const { return source_; }
  const std::string& where() const { return where_; }

 private:
  static std::string format(const std::string& source, const std::string& where,
                            const std::string& problem) {
    std::string out = source;
    if (!where.empty()) out += ": " + where;
    return out + ": " + problem;
  }
  std::string source_;
  std::string where_;
};

// A request the model cannot satisfy (a layout that does not divide the model, say).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Nothing in the searched space fits in GPU memory; the message names the closest candidate.
class NoFitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ConfigError("field: problem") unless ok; validate() functions name fields this way.
inline void require_field(bool ok, const std::string& field, const std::string& problem) {
  if (!ok) throw ConfigError(field + ": " + problem);
}

}  // namespace moe
