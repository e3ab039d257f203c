#include "tools/moeplan/chrome_trace.h"

#include <fmt/format.h>

#include <map>

namespace moe::cli {

namespace {
double us(sim::SimTime t) {
  return sim::to_seconds(t).value() * 1e6;
}
}  // namespace

nlohmann::json chrome_trace(const sim::TrainingReport& r) {
  nlohmann::json events = nlohmann::json::array();
  const std::map<std::string, int> lanes = {{"passes", 0},  {"compute", 1}, {"tp", 2},
                                            {"ep", 3},      {"cp", 4},      {"dp", 5},
                                            {"pp send", 6}, {"copy", 7}};
  for (size_t s = 0; s < r.stages.size(); ++s) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", s},
                      {"tid", 0},
                      {"args", {{"name", fmt::format("stage {} GPU", s)}}}});
    for (const auto& [lane, tid] : lanes) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", s},
                        {"tid", tid},
                        {"args", {{"name", lane}}}});
    }
  }
  for (const sim::TraceSpan& sp : r.spans) {
    events.push_back({{"ph", "X"},
                      {"name", sp.name},
                      {"cat", sp.lane},
                      {"pid", sp.stage},
                      {"tid", lanes.at(sp.lane)},
                      {"ts", us(sp.start)},
                      {"dur", us(sp.end) - us(sp.start)}});
  }
  for (const sim::MemorySample& m : r.memory) {
    events.push_back({{"ph", "C"},
                      {"name", "memory"},
                      {"pid", m.stage},
                      {"tid", 0},
                      {"ts", us(m.time)},
                      {"args", {{"GB", m.bytes.value() / 1e9}}}});
  }
  for (const sim::LinkSample& l : r.links) {
    events.push_back({{"ph", "C"},
                      {"name", l.nic ? "NIC flows" : "NVLink flows"},
                      {"pid", l.stage},
                      {"tid", 0},
                      {"ts", us(l.time)},
                      {"args", {{"active", l.active}}}});
  }
  nlohmann::json out = {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  if (r.trace_truncated) {
    out["otherData"] = {{"note", fmt::format("operator spans stop after the first {}; passes, DP "
                                             "collectives, sends and counters cover the whole run",
                                             r.spans.size())}};
  }
  return out;
}

}  // namespace moe::cli
