#include "cli/cli_run.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "test_paths.h"

std::string read_file(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) text.append(buf.data(), n);
    std::fclose(f);
  }
  return text;
}

namespace {
// Every scratch path handed out, removed (files and folders alike) once the suite has run, so
// that no run leaves its plans and reproductions behind in the temporary folder.
class ScratchPaths : public ::testing::Environment {
 public:
  std::set<std::string> issued;
  void TearDown() override {
    std::error_code ignored;
    for (const std::string& p : issued) std::filesystem::remove_all(p, ignored);
  }
};
ScratchPaths& scratch() {
  static ScratchPaths* const paths = [] {
    auto* p = new ScratchPaths;  // gtest owns and deletes it
    ::testing::AddGlobalTestEnvironment(p);
    return p;
  }();
  return *paths;
}
// Registered before main runs the tests: an environment added later is never torn down.
const bool kScratchRegistered = (scratch(), true);
}  // namespace

std::string temp_path(const std::string& name) {
  const std::string path = ::testing::TempDir() + std::to_string(getpid()) + "_" + name;
  scratch().issued.insert(path);
  return path;
}

Result run(const std::string& args, const std::string& env) {
  // ctest runs tests in parallel: each call gets its own file.
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "moeplan_cli_stderr_" +
                               std::to_string(getpid()) + "_" + std::to_string(calls++) + ".txt";
  const std::string cmd = std::string("cd ") + MOEPLAN_SOURCE_DIR + " && " + env + " " +
                          MOEPLAN_BIN + " " + args + " 2>" + err_file;
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_file(err_file);
  std::remove(err_file.c_str());
  return r;
}

std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines_in(text);
  std::string line;
  std::getline(lines_in, line);
  while (std::getline(lines_in, line)) {
    std::vector<std::string> f;
    std::stringstream in(line);
    for (std::string v; std::getline(in, v, ',');) f.push_back(v);
    rows.push_back(std::move(f));
  }
  return rows;
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

void expect_one_line_error(const Result& r, const std::string& needle, int code) {
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

nlohmann::json run_json(const std::string& args) {
  const Result r = run(args);
  EXPECT_EQ(r.code, 0) << args << ": " << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << args << ": " << e.what();
    return nullptr;
  }
}
