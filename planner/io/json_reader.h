// Strict reading of JSON input files.
//
// Every object is read through an ObjectReader that remembers which keys were used; finish()
// rejects the rest, so a misspelt key is an error rather than a silently ignored default.
// Failures throw InputError with the file and the JSON pointer of the offending value, e.g.
//   topologies/h800.json: /node/nics/1/gpus: GPU 9 does not exist (node has 8)
// Quantities carry their unit in the key ("hbm_GB", "bandwidth_GBps") or in a string value
// ("400 GB/s", "8 MiB").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "planner/units.h"

namespace moe::io {

// A whole file as text (any file); one that cannot be opened or read is an InputError.
std::string read_text_file(const std::string& path);
// Parses a file; a missing file or malformed JSON becomes an InputError naming the line.
nlohmann::json read_json_file(const std::string& path);
nlohmann::json parse_json_text(const std::string& text, const std::string& source);

class ObjectReader {
 public:
  // Throws unless `value` is an object.
  ObjectReader(const nlohmann::json& value, std::string file, std::string pointer);

  bool has(const std::string& key) const;
  int64_t integer(const std::string& key);
  int64_t integer_or(const std::string& key, int64_t fallback);
  // Accepts JSON null as "absent" (HF configs write "q_lora_rank": null).
  std::optional<int64_t> optional_integer(const std::string& key);
  double number(const std::string& key);
  double number_or(const std::string& key, double fallback);
  bool boolean_or(const std::string& key, bool fallback);
  std::string string(const std::string& key);
  std::string string_or(const std::string& key, const std::string& fallback);
  std::vector<int64_t> integer_array(const std::string& key);
  std::vector<int64_t> integer_array_or_empty(const std::string& key);
  std::vector<double> number_array(const std::string& key);
  std::vector<std::string> string_array(const std::string& key);
  ObjectReader object(const std::string& key);
  std::vector<ObjectReader> object_array(const std::string& key);
  const nlohmann::json& raw(const std::string& key);
  // A bandwidth given as a string with a unit: "400 GB/s", "200 Gb/s", "25000 MiB/s".
  BytesPerSec rate_string(const std::string& key);
  // Marks a key as read without reading it (for keys a loader knowingly skips).
  void ignore(const std::string& key);
  // Marks every key as read (HF configs carry many keys we do not need).
  void ignore_rest();

  // Throws for keys nobody read.
  void finish() const;
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;
  // The same for entry `index` of the array under `key` (/key/index).
  [[noreturn]] void fail_at(const std::string& key, size_t index, const std::string& problem) const;
  std::string pointer(const std::string& key) const;
  const std::string& file() const { return file_; }

 private:
  const nlohmann::json& get(const std::string& key);
  const nlohmann::json& value_;
  std::string file_;
  std::string pointer_;
  std::set<std::string> used_;
};

// Requires a positive value, naming the key otherwise.
int64_t positive(ObjectReader& r, const std::string& key);
// A positive count of at most `most` (what an int holds and a cluster can have), naming the key
// otherwise: 1e12 nodes used to wrap to a negative int.
int positive_count(ObjectReader& r, const std::string& key, int most);
double positive_number(ObjectReader& r, const std::string& key);

// "400 GB/s" -> bytes/s; throws std::invalid_argument with the reason.
BytesPerSec parse_rate(const std::string& text);
// "8 MiB" -> bytes.
Bytes parse_bytes(const std::string& text);

}  // namespace moe::io
