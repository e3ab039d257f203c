// moeplan: plans, simulates and calibrates Mixture-of-Experts training layouts.
#include <iostream>

#include "planner/errors.h"
#include "tools/moeplan/commands.h"

int main(int argc, char** argv) {
  moe::cli::CommandLine cli("moeplan: plan Mixture-of-Experts training on a GPU cluster",
                            "moeplan 0.1.0");
  moe::cli::add_plan(cli);
  moe::cli::add_simulate(cli);
  moe::cli::add_info(cli);
  moe::cli::add_topo(cli);
  moe::cli::add_memory(cli);
  moe::cli::add_a2a(cli);
  moe::cli::add_comm(cli);
  moe::cli::add_affinity(cli);
  moe::cli::add_devices(cli);
  moe::cli::add_calibrate(cli);
  moe::cli::add_anchor(cli);
  moe::cli::add_execute(cli);
  moe::cli::add_whatif(cli);
  moe::cli::add_reproduce(cli);
  try {
    return cli.run(argc, argv);
  } catch (const moe::NoFitError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return moe::cli::kExitNoFit;
  } catch (const std::exception& e) {
    // Bad input files, impossible layouts (ConfigError), no GPU where one is needed: exit 1.
    std::cerr << "error: " << e.what() << "\n";
    return moe::cli::kExitInput;
  }
}
