#include "server/json_fields.h"

#include "server/api_error.h"

namespace kimi::json_fields {

const ojson* field(const ojson& j, const char* k) {
  auto it = j.find(k);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

void bad(const std::string& where, const std::string& what, const std::string& param) {
  throw ApiError(400, "'" + where + "' must be " + what, param);
}

std::string string_field(const ojson& j, const char* k, const std::string& where, const std::string& param) {
  const ojson* v = field(j, k);
  if (!v || !v->is_string()) bad(where + "." + k, "a string", param);
  return v->get<std::string>();
}

}  // namespace kimi::json_fields
