// The moeplan subcommands. Each add_* registers its options on the app and runs through the
// shared error handling in main.cpp; libraries throw, only main() turns errors into exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace moe::cli {

void add_info(CLI::App& app);
void add_topo(CLI::App& app);
void add_memory(CLI::App& app);
void add_a2a(CLI::App& app);
void add_comm(CLI::App& app);
void add_affinity(CLI::App& app);
void add_devices(CLI::App& app);
void add_plan(CLI::App& app);
void add_simulate(CLI::App& app);
void add_calibrate(CLI::App& app);
void add_execute(CLI::App& app);
void add_whatif(CLI::App& app);
void add_reproduce(CLI::App& app);
void add_anchor(CLI::App& app);

// Checks for numeric flags: "--gpus: must be positive, got 0" where CLI11's PositiveNumber
// would print its range bounds (0 to 1.8e308).
extern const CLI::Validator kPositive;
extern const CLI::Validator kNonNegative;

// Writes a JSON document to standard output (for --json).
void print_json(const nlohmann::json& j);

// Exit codes (documented in README): 0 ok, 1 bad input or impossible request, 2 bad command
// line, 3 nothing fits (planner).
constexpr int kExitInput = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoFit = 3;

}  // namespace moe::cli
