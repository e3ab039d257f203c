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
#include "tests/test_models.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
#if MOEPLAN_FUZZ_TARGET == 4
    // A Megatron-LM launch or log is text, not JSON.
    static const moe::ModelSpec model = moe::testing_models::mixtral_8x7b();
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
