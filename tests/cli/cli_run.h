// Running the moeplan binary from a test as a user would, and the checks every command's tests
// share.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

struct Result {
  int code = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

// `moeplan ARGS` from the source tree's root. `env`: variables set for this run only
// ("NAME=value ...").
Result run(const std::string& args, const std::string& env = "");

// `moeplan ARGS` that must succeed, its standard output parsed: a failed exit or output that is
// not JSON fails the test and gives null (reading a field of it then fails the test too).
nlohmann::json run_json(const std::string& args);

// A whole file as text ("" when it cannot be opened, which the JSON parse then reports).
std::string read_file(const std::string& path);

// A scratch path of this test process: two checkouts' suites can run on one machine at once.
std::string temp_path(const std::string& name);

// A points.csv's rows below its header, split at commas (the quoted plan column last).
std::vector<std::vector<std::string>> csv_rows(const std::string& text);

size_t lines(const std::string& s);

// Exit `code`, and standard error is one line "error: ..." that contains `needle`.
void expect_one_line_error(const Result& r, const std::string& needle, int code = 1);
