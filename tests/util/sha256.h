// SHA-256 of a byte buffer as lowercase hex (FIPS 180-4), for comparing outputs with golden hashes.
#pragma once

#include <cstddef>
#include <string>

namespace petrel::testing {

std::string Sha256Hex(const void* data, size_t n_bytes);

}  // namespace petrel::testing
