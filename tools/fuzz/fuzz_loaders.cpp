// libFuzzer target for the input loaders: any byte string must either load or fail with a
// typed error (InputError/ConfigError), never crash, hang or throw anything else.
// Built once per loader, selected by MOEPLAN_FUZZ_TARGET.
#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"
#include "planner/io/megatron_args.h"

#if MOEPLAN_FUZZ_TARGET == 4
namespace {
// The model a launch is read against: Mixtral-8x7B's shape.
moe::ModelSpec launch_model() {
  moe::ModelSpec m;
  m.name = "fuzz";
  m.num_layers = 32;
  m.hidden_size = 4096;
  m.attention.num_heads = 32;
  m.attention.num_kv_heads = 8;
  m.attention.head_dim = 128;
  m.num_routed_experts = 8;
  m.expert_ffn_size = 14336;
  m.top_k = 2;
  m.vocab_size = 32000;
  m.moe_layer = moe::ModelSpec::layer_map(32, 0, 1, true);
  return m;
}
}  // namespace
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
#if MOEPLAN_FUZZ_TARGET == 4
    // A Megatron-LM launch or log is text, not JSON.
    static const moe::ModelSpec model = launch_model();
    moe::io::read_megatron_arguments(text, model, "fuzz.sh");
    return 0;
#endif
    const nlohmann::json j = moe::io::parse_json_text(text, "fuzz.json");
#if MOEPLAN_FUZZ_TARGET == 0
    moe::io::model_from_json(j, "fuzz.json");
#elif MOEPLAN_FUZZ_TARGET == 1
    moe::io::cluster_from_json(j, "fuzz.json");
#elif MOEPLAN_FUZZ_TARGET == 2
    moe::io::calibration_from_json(j, "fuzz.json");
#else
    moe::io::popularity_from_json(j, "fuzz.json");
#endif
  } catch (const moe::InputError&) {
  } catch (const moe::ConfigError&) {
  }
  return 0;
}
