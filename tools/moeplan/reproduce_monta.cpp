// MoNTA's experiments through the planner and simulator: Fig. 14's strategy choice, Fig. 11's
// priorities.
#include <fmt/format.h>

#include <cmath>

#include "planner/io/loaders.h"
#include "planner/search.h"
#include "simulator/training_sim.h"
#include "tools/moeplan/reproduce_rows.h"

namespace moe::cli {

std::vector<Row> monta_end_to_end(const std::string& root) {
  // Fig. 14 on 2 x 8 A800: TP = 8, EP = 2, experts tensor-parallel, the efficiencies of Table 8;
  // 2 layers of the 2x70B model (the choice depends on the per-layer volume only).
  ModelSpec m = io::load_model(root + "/models/monta-2x70b.json");
  m.num_layers = 2;
  m.moe_layer = {true, true};
  const ClusterSpec c = io::load_cluster(root + "/topologies/monta-2x8-a800.json");
  const auto curves =
      io::load_calibration(root + "/calibrate/data/monta-table8-curves.json").curves;
  std::vector<Row> rows;
  for (int64_t seq : {8192, 65536, 262144}) {
    const TimeContext ctx =
        make_time_context(m, c, paper_era_efficiencies(curves), RoutingSkew{}, seq);
    SearchRequest req;
    req.num_gpus = 16;
    req.global_batch = 2;
    req.fixed = parse_parallel("tp=8,etp=8,ep=2,pp=1,cp=1,vpp=1,mbs=1");
    req.recompute = Recompute::kFull;
    req.threads = 1;
    const SearchResult r = search_plans(ctx, req);
    const double chosen =
        r.ranked.empty() ? NAN : static_cast<double>(r.ranked.front().choice.alltoall);
    // The paper: O1 at 8K; the pipelined O2/O3 for long sequences (O3 at 256K).
    const double paper = seq == 8192 ? 1.0 : 3.0;
    rows.push_back({"Fig. 14", fmt::format("strategy chosen at {}K tokens", seq / 1024), paper,
                    chosen, "0 base, 1 O1, 2 O2, 3 O3",
                    seq == 65536 ? "the paper shows O2 and O3 close at 64K; either is right" : ""});
  }
  // Fig. 11: with ZeRO-3 gradient traffic on the NICs, the EP all-to-all's wait under MoNTA's
  // priorities (EP << PP << CP << DP) against fair sharing. The paper draws the conflict and
  // prints no times.
  {
    const ModelSpec mixtral = io::load_model(root + "/models/mixtral-8x7b.json");
    const ClusterSpec h800 = io::load_cluster(root + "/topologies/megascale-h800-240.json");
    const TimeContext ctx =
        make_time_context(mixtral, h800, paper_era_efficiencies(), RoutingSkew{}, 4096);
    PlanChoice choice;
    choice.parallel = resolve(parse_parallel("tp=2,pp=1,ep=8,etp=2,dp=64,mbs=1,gbs=128"));
    choice.seq_len = 4096;
    choice.zero_stage = 3;
    sim::TrainingOptions o;
    const Seconds fair =
        sim::simulate_training(ctx, h800, choice, o).stages[0].waited[sim::kEpStream];
    o.comm_priorities = true;
    const Seconds ordered =
        sim::simulate_training(ctx, h800, choice, o).stages[0].waited[sim::kEpStream];
    rows.push_back({"Fig. 11", "EP all-to-all wait with priorities over fair sharing (ZeRO-3 DP)",
                    NAN, ordered / fair, "x",
                    fmt::format("Mixtral-8x7B on 128 H800: {:.0f} ms -> {:.0f} ms per iteration",
                                1e3 * fair.value(), 1e3 * ordered.value())});
  }
  return rows;
}

}  // namespace moe::cli
