// `keel convert --header`: a C++ header with the model's shape and the arena sizes of its
// memory plan as constexpr values, for firmware that declares the engine statically.
#pragma once

#include <string>

#include "convert/keel_writer.h"

namespace keel::cli {

bool write_model_header(const convert::SourceModel& model, const convert::WriteOptions& opts, const std::string& path,
                        const std::string& ns, std::string& error);

}  // namespace keel::cli
