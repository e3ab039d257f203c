#include "tools/moeplan/plan_difference.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "tools/moeplan/table.h"

namespace moe::cli {

void print_plan_difference(const Plan& a, const Plan& b, const std::string& label_a,
                           const std::string& label_b) {
  const TimeBreakdown& x = a.score.time;
  const TimeBreakdown& y = b.score.time;
  Table t({"term", label_a, label_b, "difference"});
  // The breakdown's terms in its order (an APTMoE plan's loading and CPU experts last).
  static constexpr std::pair<const char*, Seconds TimeBreakdown::*> kTerms[] = {
      {"compute", &TimeBreakdown::compute},
      {"recompute", &TimeBreakdown::recompute},
      {"TP/SP comm (exposed)", &TimeBreakdown::tp_comm},
      {"EP comm (exposed)", &TimeBreakdown::ep_comm},
      {"CP comm (exposed)", &TimeBreakdown::cp_comm},
      {"PP comm", &TimeBreakdown::pp_comm},
      {"DP comm (exposed)", &TimeBreakdown::dp_comm},
      {"bubble", &TimeBreakdown::bubble},
      {"optimizer", &TimeBreakdown::optimizer},
      {"host launch-bound", &TimeBreakdown::host},
      {"activation offload", &TimeBreakdown::activation_offload},
      {"PCIe loading (exposed)", &TimeBreakdown::pcie_load},
      {"CPU experts (exposed)", &TimeBreakdown::cpu_experts}};
  for (const auto& [name, term] : kTerms) {
    const Seconds u = x.*term, v = y.*term;
    if (std::abs((u - v).value()) < 1e-6 * x.iteration.value()) continue;
    t.add({name, as_ms(u, 1), as_ms(v, 1), as_ms(u - v, 1)});
  }
  fmt::print("{}", t.render());
  // A busier plan runs its GEMMs at a lower clock under the power limit (power_limit.h).
  if (std::abs(a.choice.compute_clock - b.choice.compute_clock) >= 5e-4)
    fmt::print("  compute clock under the power limit {:.3f} vs {:.3f}\n", a.choice.compute_clock,
               b.choice.compute_clock);
  // The energy objective's caps (0: the board's own limit).
  if (a.choice.power_cap_w != b.choice.power_cap_w) {
    auto cap = [](double w) {
      return w > 0 ? fmt::format("{:.0f} W", w) : std::string("the board's limit");
    };
    fmt::print("  power cap {} vs {}\n", cap(a.choice.power_cap_w), cap(b.choice.power_cap_w));
  }
  fmt::print("  peak memory {} vs {}\n", as_gb(a.score.peak_bytes.value()),
             as_gb(b.score.peak_bytes.value()));
}

}  // namespace moe::cli
