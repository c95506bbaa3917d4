// CRC-32C (Castagnoli): the checksum in checkpoint manifests. With SSE4.2 (every x86-64 server
// CPU since 2008) the hardware instruction, 8 bytes at a time; otherwise a table, 8 tables at a
// time (slice-by-8). Both give the same checksum; the choice is made once, at first use.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8rt {
// Extends `crc` (start with 0) over n bytes.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// The same with the table alone (the reference the hardware path is tested against).
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);
// "sse4.2" or "table": what Crc32c uses on this machine.
const char* Crc32cImplementation();
}  // namespace fp8rt
