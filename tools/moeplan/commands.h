// The moeplan subcommands. Each add_* registers its options on the app and runs through the
// shared error handling in main.cpp; libraries throw, only main() turns errors into exit codes.
#pragma once

#include <nlohmann/json.hpp>

#include "tools/moeplan/command_line.h"

namespace moe::cli {

void add_info(CommandLine& cli);
void add_topo(CommandLine& cli);
void add_memory(CommandLine& cli);
void add_a2a(CommandLine& cli);
void add_comm(CommandLine& cli);
void add_affinity(CommandLine& cli);
void add_devices(CommandLine& cli);
void add_plan(CommandLine& cli);
void add_simulate(CommandLine& cli);
void add_calibrate(CommandLine& cli);
void add_execute(CommandLine& cli);
void add_whatif(CommandLine& cli);
void add_reproduce(CommandLine& cli);
void add_anchor(CommandLine& cli);

// Writes a JSON document to standard output (for --json).
void print_json(const nlohmann::json& j);

// Exit codes (documented in README): 0 ok, 1 bad input or impossible request, 2 bad command
// line, 3 nothing fits (planner).
constexpr int kExitInput = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoFit = 3;

}  // namespace moe::cli
