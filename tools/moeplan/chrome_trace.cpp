#include "tools/moeplan/chrome_trace.h"

#include <fmt/format.h>

#include <map>

namespace moe::cli {

namespace {
double us(sim::SimTime t) {
  return sim::to_seconds(t).value() * 1e6;
}

using Lanes = std::map<std::string, int>;

// Names for `processes` processes (`label` formats the index) with a thread per lane, then
// every span as a complete event.
nlohmann::json span_events(size_t processes, const char* label, const Lanes& lanes,
                           const std::vector<sim::TraceSpan>& spans) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t s = 0; s < processes; ++s) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", s},
                      {"tid", 0},
                      {"args", {{"name", fmt::format(fmt::runtime(label), s)}}}});
    for (const auto& [lane, tid] : lanes) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", s},
                        {"tid", tid},
                        {"args", {{"name", lane}}}});
    }
  }
  for (const sim::TraceSpan& sp : spans) {
    events.push_back({{"ph", "X"},
                      {"name", sp.name},
                      {"cat", sp.lane},
                      {"pid", sp.stage},
                      {"tid", lanes.at(sp.lane)},
                      {"ts", us(sp.start)},
                      {"dur", us(sp.end) - us(sp.start)}});
  }
  return events;
}

nlohmann::json truncation_note(size_t spans, const char* rest) {
  return {{"note", fmt::format("spans stop after the first {}; {}", spans, rest)}};
}

}  // namespace

nlohmann::json chrome_trace(const sim::OffloadReport& r) {
  const Lanes lanes = {{"gpu", 0}, {"h2d", 1},        {"d2h", 2},
                       {"cpu", 3}, {"tokens h2d", 4}, {"tokens d2h", 5}};
  nlohmann::json out = {{"traceEvents", span_events(r.gpu_busy.size(), "GPU {}", lanes, r.spans)},
                        {"displayTimeUnit", "ns"}};
  if (r.trace_truncated) out["otherData"] = truncation_note(r.spans.size(), "the run goes on");
  return out;
}

nlohmann::json chrome_trace(const sim::TrainingReport& r) {
  // A thread per GPU stream (sim::stream_name), with the passes and the pipeline's sends.
  Lanes lanes = {{"passes", 0}, {"pp send", sim::kStreams + 1}};
  for (int k = 0; k < sim::kStreams; ++k) lanes[sim::stream_name(k)] = k + 1;
  nlohmann::json events = span_events(r.stages.size(), "stage {} GPU", lanes, r.spans);
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
    out["otherData"] = truncation_note(
        r.spans.size(), "passes, DP collectives, sends and counters cover the whole run");
  }
  return out;
}

}  // namespace moe::cli
