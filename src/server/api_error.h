#pragma once
// An error the API reports to the client as an OpenAI-style error object with an HTTP status.
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

namespace kimi {

class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string param = {})
      : Error(std::move(message)), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

// {"error": {"message", "type", "param", "code"}} as OpenAI and vLLM send it.
nlohmann::ordered_json error_body(int status, const std::string& message, const std::string& param = {});

}  // namespace kimi
