// moeplan whatif's outputs: points.csv (written after every point, read back by --resume) and the
// self-contained HTML report.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/model_spec.h"
#include "tools/moeplan/whatif_point.h"

namespace moe::cli {

// points.csv: a row per point, its axis values, status, numbers and plan.
std::string points_csv(const std::vector<Axis>& axes,
                       const std::vector<std::pair<Point, PointResult>>& rows);

// The results an earlier run's points.csv holds, by point key; rows from another set of axes
// (a different column count) are not reused.
std::map<std::string, PointResult> earlier_results(const std::string& path, size_t axes);

// Charts of each metric against each axis, the iteration split per point, and the points' table.
std::string html_report(const WhatifOptions& o, const ModelSpec& m, const ClusterSpec& c,
                        const std::vector<Axis>& axes,
                        const std::vector<std::pair<Point, PointResult>>& rows);

}  // namespace moe::cli
