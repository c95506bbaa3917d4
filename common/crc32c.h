// CRC-32C (Castagnoli): the checksum in checkpoint manifests.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8rt {
// Extends `crc` (start with 0) over n bytes.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
}  // namespace fp8rt
