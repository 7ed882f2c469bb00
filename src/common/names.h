// Enums named in text (specs, file headers): one table per enum gives both
// directions, so a name is written once.
//
//   constexpr NameTable<Codec, 3> kCodecs = {{{"fp32", Codec::kF32}, ...}};
//   FromName(kCodecs, "int8", &codec);  NameOf(kCodecs, codec);
#pragma once

#include <array>
#include <string_view>
#include <utility>

namespace claw {

template <typename E, size_t N>
using NameTable = std::array<std::pair<std::string_view, E>, N>;

// False (and `*out` untouched) if `text` names none.
template <typename E, size_t N>
bool FromName(const NameTable<E, N>& table, std::string_view text, E* out) {
  for (const auto& [name, value] : table) {
    if (name == text) {
      *out = value;
      return true;
    }
  }
  return false;
}

// "?" for a value the table lacks.
template <typename E, size_t N>
std::string_view NameOf(const NameTable<E, N>& table, E value) {
  for (const auto& [name, v] : table) {
    if (v == value) return name;
  }
  return "?";
}

}  // namespace claw
