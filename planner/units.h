// Strong unit types for the cost model.
//
// Bytes, seconds, FLOPs and their rates are distinct types so that a byte count can never be
// added to a time, and dividing bytes by a bandwidth is the only way to get a transfer time.
// Values are SI doubles (bytes, seconds, FLOP); conversion to GB, ms or TFLOP/s happens only at
// input and output. The pattern follows ns-3's Time and DataRate.
#pragma once

#include <compare>

namespace moe {

template <typename Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : value_(v) {}
  constexpr double value() const { return value_; }

  constexpr Quantity& operator+=(Quantity o) {
    value_ += o.value_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    value_ -= o.value_;
    return *this;
  }
  friend constexpr Quantity operator+(Quantity a, Quantity b) {
    return Quantity(a.value_ + b.value_);
  }
  friend constexpr Quantity operator-(Quantity a, Quantity b) {
    return Quantity(a.value_ - b.value_);
  }
  friend constexpr Quantity operator*(Quantity a, double k) { return Quantity(a.value_ * k); }
  friend constexpr Quantity operator*(double k, Quantity a) { return Quantity(a.value_ * k); }
  friend constexpr Quantity operator/(Quantity a, double k) { return Quantity(a.value_ / k); }
  // The ratio of two like quantities is a plain number.
  friend constexpr double operator/(Quantity a, Quantity b) { return a.value_ / b.value_; }
  friend constexpr auto operator<=>(Quantity, Quantity) = default;

 private:
  double value_ = 0.0;
};

struct BytesTag {};
struct SecondsTag {};
struct FlopsTag {};
struct BytesPerSecTag {};
struct FlopsPerSecTag {};

using Bytes = Quantity<BytesTag>;
using Seconds = Quantity<SecondsTag>;
using Flops = Quantity<FlopsTag>;
using BytesPerSec = Quantity<BytesPerSecTag>;
using FlopsPerSec = Quantity<FlopsPerSecTag>;

constexpr Seconds operator/(Bytes b, BytesPerSec r) {
  return Seconds(b.value() / r.value());
}
constexpr Seconds operator/(Flops f, FlopsPerSec r) {
  return Seconds(f.value() / r.value());
}
constexpr BytesPerSec operator/(Bytes b, Seconds t) {
  return BytesPerSec(b.value() / t.value());
}
constexpr FlopsPerSec operator/(Flops f, Seconds t) {
  return FlopsPerSec(f.value() / t.value());
}
constexpr Bytes operator*(BytesPerSec r, Seconds t) {
  return Bytes(r.value() * t.value());
}
constexpr Flops operator*(FlopsPerSec r, Seconds t) {
  return Flops(r.value() * t.value());
}

// Decimal prefixes (1 GB = 1e9 bytes), as GPU and network datasheets use them.
constexpr double kKilo = 1e3;
constexpr double kMega = 1e6;
constexpr double kGiga = 1e9;
constexpr double kTera = 1e12;
// Binary prefix (1 MiB = 2^20 bytes), as MoNTA's communication volumes use it.
constexpr double kMebi = 1024.0 * 1024.0;

constexpr Bytes gigabytes(double gb) {
  return Bytes(gb * kGiga);
}
constexpr Bytes mebibytes(double mib) {
  return Bytes(mib * kMebi);
}
constexpr BytesPerSec gigabytes_per_sec(double gbps) {
  return BytesPerSec(gbps * kGiga);
}
constexpr BytesPerSec gigabits_per_sec(double gbit) {
  return BytesPerSec(gbit * kGiga / 8.0);
}
constexpr FlopsPerSec teraflops_per_sec(double tf) {
  return FlopsPerSec(tf * kTera);
}
constexpr Seconds milliseconds(double ms) {
  return Seconds(ms * 1e-3);
}

}  // namespace moe
