// registry.h: the generated table of fused-op plans (src/fused/registry.cpp).
#pragma once

#include "hexfuse/task.h"

namespace hexfuse {

int num_plans();
const Plan* plan_at(int index);  // null when out of range

}  // namespace hexfuse
