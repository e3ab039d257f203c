#include "tools/moeplan/plan_difference.h"

#include <fmt/format.h>

#include <cmath>

#include "tools/moeplan/table.h"

namespace moe::cli {

void print_plan_difference(const Plan& a, const Plan& b, const std::string& label_a,
                           const std::string& label_b) {
  const TimeBreakdown& x = a.score.time;
  const TimeBreakdown& y = b.score.time;
  auto ms = [](Seconds s) { return fmt::format("{:.1f} ms", s.value() * 1e3); };
  Table t({"term", label_a, label_b, "difference"});
  auto row = [&](const char* name, Seconds u, Seconds v) {
    if (std::abs((u - v).value()) < 1e-6 * x.iteration.value()) return;
    t.add({name, ms(u), ms(v), ms(u - v)});
  };
  row("compute", x.compute, y.compute);
  row("recompute", x.recompute, y.recompute);
  row("TP/SP comm (exposed)", x.tp_comm, y.tp_comm);
  row("EP comm (exposed)", x.ep_comm, y.ep_comm);
  row("CP comm (exposed)", x.cp_comm, y.cp_comm);
  row("PP comm", x.pp_comm, y.pp_comm);
  row("DP comm (exposed)", x.dp_comm, y.dp_comm);
  row("bubble", x.bubble, y.bubble);
  row("optimizer", x.optimizer, y.optimizer);
  row("host launch-bound", x.host, y.host);
  row("activation offload", x.activation_offload, y.activation_offload);
  row("PCIe loading (exposed)", x.pcie_load, y.pcie_load);
  row("CPU experts (exposed)", x.cpu_experts, y.cpu_experts);
  fmt::print("{}", t.render());
  fmt::print("  peak memory {} vs {}\n", as_gb(a.score.peak_bytes.value()),
             as_gb(b.score.peak_bytes.value()));
}

}  // namespace moe::cli
