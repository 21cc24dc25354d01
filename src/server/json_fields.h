#pragma once
// Reading the fields of a request body in the adapters that map another API onto chat
// (messages_api, responses_api): a field lookup in which null counts as absent, and the 400
// they answer for a field of the wrong type, naming the field's path and the request parameter.
#include <string>

#include "server/json_body.h"

namespace kimi::json_fields {

// A field of an object; null counts as absent (as in the chat request).
const ojson* field(const ojson& j, const char* k);

// Throws ApiError(400, "'WHERE' must be WHAT", param).
[[noreturn]] void bad(const std::string& where, const std::string& what, const std::string& param);

// The string j[k]; a 400 naming WHERE.k and param when it is absent or not a string.
std::string string_field(const ojson& j, const char* k, const std::string& where, const std::string& param);

}  // namespace kimi::json_fields
