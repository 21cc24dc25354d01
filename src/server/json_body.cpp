#include "server/json_body.h"

#include <string>

#include "server/api_error.h"

namespace kimi {

ojson parse_json_body(std::string_view body) {
  // nlohmann's parser itself is iterative; the callback runs as each array/object opens, with
  // the depth of the value being opened (the top level is depth 0), and throwing from it ends
  // the parse with the partial document, which is at most kMaxJsonDepth deep.
  const ojson::parser_callback_t limit = [](int depth, ojson::parse_event_t event, ojson&) {
    if ((event == ojson::parse_event_t::object_start || event == ojson::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw ApiError(400, "the request body nests arrays and objects more than " + std::to_string(kMaxJsonDepth) +
                              " levels deep");
    return true;
  };
  try {
    return ojson::parse(body.begin(), body.end(), limit);
  } catch (const ojson::exception& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
}

}  // namespace kimi
