// moeplan: plans, simulates and calibrates Mixture-of-Experts training layouts.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "calibrate/device_info.h"
#include "planner/errors.h"
#include "tools/moeplan/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"moeplan: plan Mixture-of-Experts training on a GPU cluster"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moeplan 0.1.0");
  moe::cli::add_plan(app);
  moe::cli::add_simulate(app);
  moe::cli::add_info(app);
  moe::cli::add_topo(app);
  moe::cli::add_memory(app);
  moe::cli::add_a2a(app);
  moe::cli::add_comm(app);
  moe::cli::add_affinity(app);
  moe::cli::add_devices(app);
  moe::cli::add_calibrate(app);
  moe::cli::add_anchor(app);
  moe::cli::add_execute(app);
  moe::cli::add_whatif(app);
  moe::cli::add_reproduce(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error, with a pointer to help.
    std::cerr << fmt::format("error: {} (see moeplan --help)\n", e.what());
    return moe::cli::kExitUsage;
  } catch (const moe::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return moe::cli::kExitInput;
  } catch (const moe::NoFitError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return moe::cli::kExitNoFit;
  } catch (const moe::calibrate::NoGpuError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return moe::cli::kExitInput;
  } catch (const moe::ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return moe::cli::kExitInput;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return moe::cli::kExitInput;
  }
  return 0;
}
