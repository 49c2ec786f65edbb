// Plan inputs of a loaded model.
#pragma once

#include "llm/plan.h"
#include "model/model.h"

namespace keel {

PlanShape plan_shape(const Model& model);

}  // namespace keel
