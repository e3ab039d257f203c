// The planner's schedule walk against the closed forms it must agree with, and what it adds
// when a hop outlasts a chunk.
#include "planner/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace moe {

namespace {
std::vector<ChunkTimes> equal(int64_t p, int64_t v, double f, double b) {
  ChunkTimes c;
  c.forward.assign(static_cast<size_t>(v), Seconds(f / static_cast<double>(v)));
  c.backward.assign(static_cast<size_t>(v), Seconds(b / static_cast<double>(v)));
  return std::vector<ChunkTimes>(static_cast<size_t>(p), c);
}
}  // namespace

TEST(PipelineSchedule, EqualStagesWithFreeHopsGiveTheClosedForms) {
  // 1F1B and GPipe: (m + p - 1)(t_f + t_b); interleaved: (m + (p - 1)/v)(t_f + t_b).
  for (auto [p, m] : {std::pair{4, 8}, {4, 4}, {1, 5}, {8, 32}}) {
    EXPECT_NEAR(schedule_makespan(equal(p, 1, 1.0, 2.0), m, Seconds(0), false).value(),
                (m + p - 1) * 3.0, 1e-9);
    EXPECT_NEAR(schedule_makespan(equal(p, 1, 1.0, 2.0), m, Seconds(0), true).value(),
                (m + p - 1) * 3.0, 1e-9);
  }
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 16, 4}, {2, 8, 4}}) {
    EXPECT_NEAR(schedule_makespan(equal(p, v, 1.0, 2.0), m, Seconds(0), false).value(),
                (m + static_cast<double>(p - 1) / v) * 3.0, 1e-9)
        << p << " " << m << " " << v;
  }
}

TEST(PipelineSchedule, AHopLongerThanAChunkStallsTheInterleavedSteadyState) {
  // p = v = 4 and 32 micro-batches; each chunk 1 ms forward, 2 ms backward. A 0.1 ms hop only
  // stretches warm-up and drain; a 1.5 ms hop (longer than a chunk's forward) makes every
  // round of the ring wait, far beyond the 2 (p - 1) hops of warm-up and drain.
  const auto stages = equal(4, 4, 4.0, 8.0);
  const double closed = (32 + 3.0 / 4) * 12.0;
  // Warm-up and drain cross the ring v times: 2 (p v - 1) hops.
  const double short_hop = schedule_makespan(stages, 32, Seconds(0.1), false).value();
  EXPECT_NEAR(short_hop, closed + 30 * 0.1, 1e-9);
  const double long_hop = schedule_makespan(stages, 32, Seconds(1.5), false).value();
  EXPECT_GT(long_hop, closed + 30 * 1.5 + 0.05 * closed);
}

TEST(PipelineSchedule, OneFOneBWaitsForItsHopsAsLittlesLawSays) {
  // Stage s holds p - s micro-batches in flight, each on a round trip of the later stages and
  // 2 (p - 1 - s) hops: equal stages take t + 2 (p - 1) hop / p per micro-batch. The walk of
  // the schedule lands within 1.5 % of m T + (p - 1) t + 2 (p - 1) hop (a little of the drain
  // hides in the steady state's waits).
  const std::vector<Seconds> four(4, Seconds(12.0));
  for (double hop : {0.0, 0.1, 1.5, 3.0}) {
    const double period = one_f_one_b_period(four, Seconds(hop)).value();
    EXPECT_NEAR(period, 12.0 + 6 * hop / 4, 1e-12);
    const double walked = schedule_makespan(equal(4, 1, 4.0, 8.0), 32, Seconds(hop), false).value();
    EXPECT_NEAR(walked / (32 * period + 3 * 12.0 + 6 * hop), 1.0, 0.015) << hop;
  }
  // A heavier last stage leaves the others slack: a short hop costs nothing in the steady state.
  const std::vector<Seconds> heavy_last{Seconds(12.0), Seconds(12.0), Seconds(12.0), Seconds(15.0)};
  EXPECT_DOUBLE_EQ(one_f_one_b_period(heavy_last, Seconds(0.5)).value(), 15.0);
  EXPECT_GT(one_f_one_b_period(heavy_last, Seconds(3.0)).value(), 15.0);
}

TEST(PipelineSchedule, AHeavyLastChunkSetsThePaceOfItsPhase) {
  // The output head doubles the last stage's last chunk: the steady state is at least that
  // stage's work, and the walk never comes out shorter than it.
  auto stages = equal(4, 4, 4.0, 8.0);
  stages.back().forward.back() = Seconds(2.0);
  stages.back().backward.back() = Seconds(4.0);
  const double last_stage_work = 32 * (12.0 + 3.0);
  EXPECT_GT(schedule_makespan(stages, 32, Seconds(0), false).value(), last_stage_work);
}

TEST(PipelineSchedule, AHeavyChunksStallsRepeatEveryPMicroBatches) {
  // Stages 1 and 2 of four run a heavy second chunk (2.25 ms passes) beside 0.75 ms ones, v = 2:
  // past the warm-up the interleaved schedule repeats every p micro-batches, so the walks of 4p
  // and 8p give the line longer schedules lie on (time_model.cpp walks only those two).
  auto stages = equal(4, 2, 1.5, 1.5);
  for (size_t s : {1, 2}) stages[s].forward[1] = stages[s].backward[1] = Seconds(2.25e-3);
  for (ChunkTimes& c : stages) {
    c.forward[0] = c.backward[0] = Seconds(0.75e-3);
    if (c.forward[1] > Seconds(1e-3)) continue;
    c.forward[1] = c.backward[1] = Seconds(0.75e-3);
  }
  const double a = schedule_makespan(stages, 16, Seconds(2e-5), false).value();
  const double b = schedule_makespan(stages, 32, Seconds(2e-5), false).value();
  const double busiest = 2 * (0.75e-3 + 2.25e-3);  // stages 1 and 2, a micro-batch
  EXPECT_GT((b - a) / 16, busiest * 1.02);         // the stalls, beyond the busiest stage's work
  for (int64_t m : {64, 128, 256}) {
    const double walked = schedule_makespan(stages, m, Seconds(2e-5), false).value();
    EXPECT_NEAR(walked, b + (b - a) * static_cast<double>(m - 32) / 16, 1e-9 * walked) << m;
  }
}

TEST(PipelineSchedule, ABackwardsSyncRestDelaysTheNextPassOnItsLink) {
  // One stage, two micro-batches: F0 B0 F1 B1, each pass 1 s. B0 leaves 5 s of reduce-scatter on
  // the link, and F1's own gathers there take 1 s: F1 takes 1 + 5 s. B1 starts with the link
  // free of it (F1 ended after the rest), and its own rest runs past the walk's end.
  auto stages = equal(1, 1, 1.0, 1.0);
  EXPECT_DOUBLE_EQ(schedule_makespan(stages, 2, Seconds(0), false).value(), 4.0);
  stages[0].forward_link = {Seconds(1.0)};
  stages[0].backward_link = {Seconds(0.5)};
  stages[0].backward_tail = {Seconds(5.0)};
  EXPECT_DOUBLE_EQ(schedule_makespan(stages, 2, Seconds(0), false).value(), 9.0);
  // A pass whose own work outlasts its link work plus the rest keeps its time.
  stages[0].forward = {Seconds(7.0)};
  EXPECT_DOUBLE_EQ(schedule_makespan(stages, 2, Seconds(0), false).value(), 16.0);
  stages[0].backward_tail = {Seconds(1.0), Seconds(1.0)};
  EXPECT_THROW(schedule_makespan(stages, 2, Seconds(0), false), std::invalid_argument);
}

TEST(PipelineSchedule, FirstBackwardsWaitForMicroBatchZerosRoundTripAndTheWarmUp) {
  // 1F1B over four stages (t_f 1, t_b 2, hops 0.1): the last stage starts its first backward
  // once micro-batch 0 has gone down the pipeline, each stage before it that much later again.
  const std::vector<Seconds> hops(4, Seconds(0.1));
  const std::vector<Seconds> one_f_one_b = first_backward_starts(equal(4, 1, 1, 2), 8, hops, false);
  for (int s = 0; s < 4; ++s)
    EXPECT_NEAR(one_f_one_b[static_cast<size_t>(s)].value(), 4.3 + (3 - s) * 2.1, 1e-12) << s;
  // Interleaved, p = v = 2 (chunks of 1 and 2): stage 1 runs three forwards before its first
  // backward, stage 0 five; micro-batch 0's trip binds both.
  const std::vector<Seconds> free(2, Seconds(0));
  const std::vector<Seconds> interleaved = first_backward_starts(equal(2, 2, 2, 4), 4, free, false);
  EXPECT_NEAR(interleaved[1].value(), 4.0, 1e-12);
  EXPECT_NEAR(interleaved[0].value(), 6.0, 1e-12);
  // GPipe: every forward first, here three on stage 1 after micro-batch 0 reaches it.
  const std::vector<Seconds> gpipe = first_backward_starts(equal(2, 1, 1, 2), 3, free, true);
  EXPECT_NEAR(gpipe[1].value(), 4.0, 1e-12);
  EXPECT_NEAR(gpipe[0].value(), 6.0, 1e-12);
  // Stage 0's weights take 5 to gather, a chunk's half at a time: its chunks' first forwards
  // end at 2.5 and 5, and the trip runs that much later.
  const std::vector<Seconds> gathered =
      first_backward_starts(equal(2, 2, 2, 4), 4, free, false, {Seconds(5), Seconds(0)});
  EXPECT_NEAR(gathered[1].value(), 6.0, 1e-12);
  EXPECT_NEAR(gathered[0].value(), 8.0, 1e-12);
  EXPECT_THROW(first_backward_starts(equal(2, 1, 1, 2), 3, hops, false), std::invalid_argument);
  EXPECT_THROW(first_backward_starts(equal(2, 1, 1, 2), 3, free, false, {Seconds(1)}),
               std::invalid_argument);
}

TEST(PipelineSchedule, RejectsWhatNoScheduleRuns) {
  EXPECT_THROW(schedule_makespan({}, 4, Seconds(0), false), std::invalid_argument);
  EXPECT_THROW(schedule_makespan(equal(4, 2, 1, 2), 6, Seconds(0), false), std::invalid_argument);
  auto ragged = equal(2, 2, 1, 2);
  ragged[1].backward.pop_back();
  EXPECT_THROW(schedule_makespan(ragged, 4, Seconds(0), false), std::invalid_argument);
}

}  // namespace moe

namespace moe {

TEST(PipelineSchedule, EachBoundaryTakesItsOwnHop) {
  // Four stages of 1 + 2 (forward, backward), 8 micro-batches. A slow hop into stage 2 alone
  // costs less than every hop that slow, more than none; with all hops equal the vector form is
  // the scalar one, walk and 1F1B period alike.
  const std::vector<ChunkTimes> stages = equal(4, 1, 1.0, 2.0);
  const std::vector<Seconds> even(4, Seconds(0.2));
  EXPECT_DOUBLE_EQ(schedule_makespan(stages, 8, even, false).value(),
                   schedule_makespan(stages, 8, Seconds(0.2), false).value());
  const std::vector<Seconds> per_stage(4, Seconds(3.0));
  EXPECT_DOUBLE_EQ(one_f_one_b_period(per_stage, even).value(),
                   one_f_one_b_period(per_stage, Seconds(0.2)).value());
  std::vector<Seconds> one_slow = even;
  one_slow[2] = Seconds(4.0);
  const double some = schedule_makespan(stages, 8, one_slow, false).value();
  EXPECT_GT(some, schedule_makespan(stages, 8, even, false).value());
  EXPECT_LT(some, schedule_makespan(stages, 8, Seconds(4.0), false).value());
  // Little's law: stage 1 holds 3 micro-batches in flight, each crossing hops 2 and 3 both ways
  // (9 + 2 x 4.2) / 3, more than stage 0's (12 + 2 x 4.4) / 4.
  EXPECT_DOUBLE_EQ(one_f_one_b_period(per_stage, one_slow).value(), (9.0 + 2 * 4.2) / 3);
  EXPECT_THROW(schedule_makespan(stages, 8, std::vector<Seconds>(3), false), std::invalid_argument);
}

}  // namespace moe

namespace moe {

TEST(PipelineSchedule, ASendBesideTheSendersNextPassSharesItsLink) {
  // Two stages of 1 + 2 (forward, backward) whose passes keep the NIC 80 % busy, a 0.5 hop over
  // it. Where the sender goes straight on to its next pass the send runs at half the rate while
  // that pass's traffic does: 0.5 / (1 - 0.4) long. One micro-batch leaves each sender idle
  // after it sends (stage 0 waits for the backward, stage 1 has nothing left), so nothing
  // stretches; nor where the sends take the other link.
  std::vector<ChunkTimes> stages = equal(2, 1, 1.0, 2.0);
  const double plain_one = schedule_makespan(stages, 1, Seconds(0.5), false).value();
  const double plain_four = schedule_makespan(stages, 4, Seconds(0.5), false).value();
  for (ChunkTimes& s : stages) {
    s.forward_busy = s.backward_busy = {ChunkTimes::LinkBusy{0.8, 0.0}};
    s.down_across = s.up_across = true;
  }
  EXPECT_DOUBLE_EQ(schedule_makespan(stages, 1, Seconds(0.5), false).value(), plain_one);
  const double shared = schedule_makespan(stages, 4, Seconds(0.5), false).value();
  EXPECT_GT(shared, plain_four + 0.5 / 0.6 - 0.5 - 1e-9);
  // Stage 0's first two forwards run back to back: stage 1's first forward starts a stretched
  // hop after the first ends.
  for (ChunkTimes& s : stages) s.down_across = s.up_across = false;
  EXPECT_DOUBLE_EQ(schedule_makespan(stages, 4, Seconds(0.5), false).value(), plain_four);
}

}  // namespace moe
