// Tokenizer base: the out-of-line destructor that anchors the vtable.
#include "core/tokenizer/tokenizer.h"

namespace petrel {

Tokenizer::~Tokenizer() = default;

}  // namespace petrel
