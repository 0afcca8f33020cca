// Where the fuzz targets that need a real model or vocabulary find the test data:
// $PETREL_SHARED_DIR when set, else the folder the build was configured with (the meson option
// `shared_dir`, passed as PETREL_FUZZ_SHARED_DIR). A missing file ends the run with a message:
// a target without its model would test nothing.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/base/status.h"

namespace petrel::fuzz {

inline std::string SharedPath(const std::string& relative) {
  const char* dir = std::getenv("PETREL_SHARED_DIR");
  return std::string(dir && *dir ? dir : PETREL_FUZZ_SHARED_DIR) + "/" + relative;
}

// The value of a load the target cannot run without, or a message and exit.
template <typename T>
T Required(Result<T> result, const std::string& what) {
  if (!result.ok()) {
    std::fprintf(stderr, "fuzz: cannot load %s: %s\n", what.c_str(),
                 result.status().message().c_str());
    std::exit(2);
  }
  return std::move(*result);
}

}  // namespace petrel::fuzz
