#pragma once
// A StructuredSpec compiled into its recognizer, once per request.
#include <memory>

#include "structured/matcher.h"
#include "structured/spec.h"

namespace kimi::structured {

// Throws GrammarError naming what is wrong or unsupported. spec.kind must not be None.
std::shared_ptr<const Recognizer> compile(const StructuredSpec& spec);

}  // namespace kimi::structured
