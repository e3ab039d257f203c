#include "planner/io/json_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "planner/errors.h"

namespace moe::io {

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports a byte offset; turn it into a line number a person can find.
    const size_t byte = std::min<size_t>(e.byte, text.size());
    const size_t line =
        1 + static_cast<size_t>(std::count(text.begin(), text.begin() + byte, '\n'));
    std::string what = e.what();
    const size_t colon = what.rfind(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    throw InputError(source, "", fmt::format("malformed JSON at line {}: {}", line, what));
  } catch (const nlohmann::json::exception& e) {
    // out_of_range for numbers no double can hold, e.g. 1e999.
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    throw InputError(source, "", fmt::format("malformed JSON: {}", what));
  }
}

std::string read_text_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw InputError(path, "", "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  // Straight into the string where the size is known (a log can be hundreds of megabytes);
  // a pipe or other stream without one is copied through a buffer.
  std::string text;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size > 0) {
    text.resize(static_cast<size_t>(size));
    in.seekg(0);
    in.read(text.data(), size);
  } else {
    in.clear();
    in.seekg(0);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  if (in.bad()) throw InputError(path, "", "cannot read file");
  return text;
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text(read_text_file(path), path);
}

namespace {
std::string type_name(const nlohmann::json& v) {
  return v.type_name();
}
// JSON pointer escaping (RFC 6901).
std::string escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}
}  // namespace

ObjectReader::ObjectReader(const nlohmann::json& value, std::string file, std::string pointer)
    : value_(value), file_(std::move(file)), pointer_(std::move(pointer)) {
  if (!value_.is_object()) {
    throw InputError(file_, pointer_.empty() ? "/" : pointer_,
                     fmt::format("expected an object, got {}", type_name(value_)));
  }
}

std::string ObjectReader::pointer(const std::string& key) const {
  return pointer_ + "/" + escape(key);
}

void ObjectReader::fail(const std::string& key, const std::string& problem) const {
  throw InputError(file_, key.empty() ? (pointer_.empty() ? "/" : pointer_) : pointer(key),
                   problem);
}

void ObjectReader::fail_at(const std::string& key, size_t index, const std::string& problem) const {
  throw InputError(file_, pointer(key) + fmt::format("/{}", index), problem);
}

bool ObjectReader::has(const std::string& key) const {
  return value_.contains(key) && !value_.at(key).is_null();
}

const nlohmann::json& ObjectReader::get(const std::string& key) {
  used_.insert(key);
  if (!value_.contains(key)) fail(key, "missing required field");
  return value_.at(key);
}

const nlohmann::json& ObjectReader::raw(const std::string& key) {
  return get(key);
}

int64_t ObjectReader::integer(const std::string& key) {
  const nlohmann::json& v = get(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
      return static_cast<int64_t>(d);
  }
  fail(key, fmt::format("expected an integer, got {}", v.dump()));
}

int64_t ObjectReader::integer_or(const std::string& key, int64_t fallback) {
  used_.insert(key);
  return has(key) ? integer(key) : fallback;
}

std::optional<int64_t> ObjectReader::optional_integer(const std::string& key) {
  used_.insert(key);
  if (!has(key)) return std::nullopt;
  return integer(key);
}

double ObjectReader::number(const std::string& key) {
  const nlohmann::json& v = get(key);
  if (!v.is_number()) fail(key, fmt::format("expected a number, got {}", v.dump()));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, "must be finite");
  return d;
}

double ObjectReader::number_or(const std::string& key, double fallback) {
  used_.insert(key);
  return has(key) ? number(key) : fallback;
}

bool ObjectReader::boolean_or(const std::string& key, bool fallback) {
  used_.insert(key);
  if (!has(key)) return fallback;
  const nlohmann::json& v = get(key);
  if (!v.is_boolean()) fail(key, fmt::format("expected true or false, got {}", v.dump()));
  return v.get<bool>();
}

std::string ObjectReader::string(const std::string& key) {
  const nlohmann::json& v = get(key);
  if (!v.is_string()) fail(key, fmt::format("expected a string, got {}", v.dump()));
  return v.get<std::string>();
}

std::string ObjectReader::string_or(const std::string& key, const std::string& fallback) {
  used_.insert(key);
  return has(key) ? string(key) : fallback;
}

std::vector<int64_t> ObjectReader::integer_array(const std::string& key) {
  const nlohmann::json& v = get(key);
  if (!v.is_array()) fail(key, fmt::format("expected an array, got {}", type_name(v)));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer()) {
      fail_at(key, i, fmt::format("expected an integer, got {}", v[i].dump()));
    }
    out.push_back(v[i].get<int64_t>());
  }
  return out;
}

std::vector<int64_t> ObjectReader::integer_array_or_empty(const std::string& key) {
  used_.insert(key);
  return has(key) ? integer_array(key) : std::vector<int64_t>{};
}

std::vector<std::string> ObjectReader::string_array(const std::string& key) {
  const nlohmann::json& v = get(key);
  if (!v.is_array()) fail(key, fmt::format("expected an array, got {}", type_name(v)));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      fail_at(key, i, fmt::format("expected a string, got {}", v[i].dump()));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::vector<double> ObjectReader::number_array(const std::string& key) {
  const nlohmann::json& v = get(key);
  if (!v.is_array()) fail(key, fmt::format("expected an array, got {}", type_name(v)));
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number() || !std::isfinite(v[i].get<double>())) {
      fail_at(key, i, fmt::format("expected a number, got {}", v[i].dump()));
    }
    out.push_back(v[i].get<double>());
  }
  return out;
}

ObjectReader ObjectReader::object(const std::string& key) {
  return ObjectReader(get(key), file_, pointer(key));
}

std::vector<ObjectReader> ObjectReader::object_array(const std::string& key) {
  const nlohmann::json& v = get(key);
  if (!v.is_array()) fail(key, fmt::format("expected an array, got {}", type_name(v)));
  std::vector<ObjectReader> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.emplace_back(v[i], file_, pointer(key) + fmt::format("/{}", i));
  return out;
}

BytesPerSec ObjectReader::rate_string(const std::string& key) {
  const std::string text = string(key);
  try {
    return parse_rate(text);
  } catch (const std::invalid_argument& e) {
    fail(key, e.what());
  }
}

void ObjectReader::ignore(const std::string& key) {
  used_.insert(key);
}

void ObjectReader::ignore_rest() {
  for (auto it = value_.begin(); it != value_.end(); ++it) used_.insert(it.key());
}

void ObjectReader::finish() const {
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (used_.count(it.key()) == 0) fail(it.key(), "unknown field");
  }
}

int64_t positive(ObjectReader& r, const std::string& key) {
  const int64_t v = r.integer(key);
  if (v <= 0) r.fail(key, fmt::format("must be positive, got {}", v));
  return v;
}

int positive_count(ObjectReader& r, const std::string& key, int most) {
  const int64_t v = r.integer(key);
  if (v <= 0 || v > most) r.fail(key, fmt::format("must be between 1 and {}, got {}", most, v));
  return static_cast<int>(v);
}

double positive_number(ObjectReader& r, const std::string& key) {
  const double v = r.number(key);
  if (!(v > 0)) r.fail(key, fmt::format("must be positive, got {}", v));
  return v;
}

namespace {
std::pair<double, std::string> split_quantity(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("'{}' does not start with a number", text));
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  if (!std::isfinite(value) || value <= 0) {
    throw std::invalid_argument(fmt::format("'{}' must be positive", text));
  }
  return {value, unit};
}
}  // namespace

BytesPerSec parse_rate(const std::string& text) {
  const auto [value, unit] = split_quantity(text);
  if (unit == "B/s") return BytesPerSec(value);
  if (unit == "MB/s") return BytesPerSec(value * kMega);
  if (unit == "GB/s") return BytesPerSec(value * kGiga);
  if (unit == "TB/s") return BytesPerSec(value * kTera);
  if (unit == "MiB/s") return BytesPerSec(value * kMebi);
  if (unit == "GiB/s") return BytesPerSec(value * kMebi * 1024.0);
  if (unit == "Gb/s") return gigabits_per_sec(value);
  throw std::invalid_argument(
      fmt::format("'{}': unit '{}' is not one of B/s MB/s GB/s TB/s MiB/s GiB/s Gb/s", text, unit));
}

Bytes parse_bytes(const std::string& text) {
  const auto [value, unit] = split_quantity(text);
  if (unit == "B") return Bytes(value);
  if (unit == "KB") return Bytes(value * kKilo);
  if (unit == "MB") return Bytes(value * kMega);
  if (unit == "GB") return Bytes(value * kGiga);
  if (unit == "KiB") return Bytes(value * 1024.0);
  if (unit == "MiB") return Bytes(value * kMebi);
  if (unit == "GiB") return Bytes(value * kMebi * 1024.0);
  throw std::invalid_argument(
      fmt::format("'{}': unit '{}' is not one of B KB MB GB KiB MiB GiB", text, unit));
}

}  // namespace moe::io
