#pragma once
// The project's Kimi-K2.5 chat template (templates/kimi-k25.jinja), compiled into the binary so
// that `kimi make-model` can ship it with every generated model.
namespace kimi {
extern const char* const kKimiK25ChatTemplate;
}
