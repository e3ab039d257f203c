// Runs one MoE layer's forward and backward on a LayerDevice the way MemFine's FCDA does:
// chunk by chunk, dispatch (permute) -> experts -> combine (weighted unpermute), keeping no
// chunk's activations after its combine (chunked recompute: backward redoes each chunk's
// dispatch, up projection and activation before its gradients). Buffers are freed as soon as
// the last operator that reads them is done, so the peak is one chunk's backward working set.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "calibrate/layer_device.h"
#include "calibrate/moe_layer_case.h"

namespace moe::calibrate {

// The timed operators, in the order a chunk runs them.
enum class LayerOp {
  kDispatch,            // permute tokens into expert order
  kUpProjection,        // X W13 (or X W1), every local expert
  kActivation,          // silu(a) * b, or relu
  kDownProjection,      // A W2
  kCombine,             // weighted unpermute
  kRecompute,           // backward: dispatch, up projection and activation again
  kCombineBackward,     // gradient rows scaled by the gate weights
  kDownBackward,        // dA = dY W2^T, dW2 += A^T dY
  kActivationBackward,  //
  kUpBackward,          // dX = dH W13^T, dW13 += X^T dH
  kDispatchBackward,    // sum each token's k row gradients
};
constexpr int kLayerOps = 11;
const char* layer_op_name(LayerOp op);  // "dispatch", "up projection", ...

// The layer's inputs, weights and the gradients it writes, on the device.
struct LayerTensors {
  DeviceMatrix x, d_out;     // [tokens x h]: input, gradient from above
  DeviceMatrix w13, w2;      // [E h x (2)g], [E g x h]: expert e's rows at e h and e g
  DeviceMatrix out, d_x;     // [tokens x h]
  DeviceMatrix d_w13, d_w2;  // like the weights
};
// n values uniform with standard deviation `scale`, never all zero, from a counter hash
// (splitmix64) of (seed, stream, index) rather than a sequential engine: an 8-expert Mixtral
// layer has a billion weights to draw, and any stream can be drawn alone.
std::vector<float> random_values(int64_t n, float scale, uint64_t seed, uint64_t stream);

// Random inputs and weights (scaled like a trained layer's: weights ~ 1/sqrt(fan-in)) drawn
// from `seed` on the host, so two devices given the same seed run the same numbers.
LayerTensors make_layer_tensors(LayerDevice& d, const MoeLayerCase& c, uint32_t seed);
// The same from given host values (row-major, the shapes above), e.g. another device's.
LayerTensors layer_tensors_from(LayerDevice& d, const MoeLayerCase& c, const std::vector<float>& x,
                                const std::vector<float>& d_out, const std::vector<float>& w13,
                                const std::vector<float>& w2);

struct LayerRun {
  std::array<double, kLayerOps> seconds{};  // per operator, forward + backward of all chunks
  double total_seconds = 0;                 // sum of the operators
  double peak_bytes = 0;                    // activations held at once (weights excluded)
};

// One forward and backward pass over `routing`'s chunks; zeroes the weight gradients first.
LayerRun run_layer(LayerDevice& d, const MoeLayerCase& c, const std::vector<ChunkRouting>& routing,
                   LayerTensors& t);

}  // namespace moe::calibrate
