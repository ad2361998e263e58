// Drawing for `xroce sim --incast --plot F.svg`: the simulator produces the series
// (engine/cc/sim/incast.h), the tool draws them.
#pragma once

#include <string>

#include "cc/sim/fluid_model.h"
#include "cc/sim/incast.h"

namespace xroce::cli {

// An SVG of every flow's measured rate and the bottleneck queue depth over time; with `fluid`,
// the fluid model's rate and queue dashed over them (fluid_model.h).
std::string plot_incast_svg(const cc::sim::IncastResult& result,
                            const cc::sim::FluidResult* fluid = nullptr);

}  // namespace xroce::cli
