// The receive-impairment ops (include/xroce/control.h: impair_show, impair_set) behind
// `xroce impair`: the device's RxImpairment (rx_impairment.h), copied to every worker.
// impair_set is all or nothing, as cc_set is: one bad assignment changes nothing.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/control_ops.h"

namespace xroce::daemon {

namespace {

nlohmann::ordered_json impair_json(const std::string& device, const RxImpairment& i) {
  return {{"device", device}, {"loss", i.loss}, {"seed", i.seed}};
}

// Applies one "NAME=VALUE" to `i`; the error's text, or nullopt.
std::optional<std::string> apply(RxImpairment& i, std::string_view line) {
  const std::size_t eq = line.find('=');
  if (eq == std::string_view::npos) return "'" + std::string(line) + "' is not NAME=VALUE";
  const std::string_view name = line.substr(0, eq);
  const std::string value(line.substr(eq + 1));
  if (name == "loss") {
    char* end = nullptr;
    errno = 0;
    const double loss = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(loss) || loss < 0 ||
        loss >= 1) {
      return "loss must be a probability in [0, 1), not '" + value + "'";
    }
    i.loss = loss;
    return std::nullopt;
  }
  if (name == "seed") {
    std::uint64_t seed = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seed);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
      return "seed must be an unsigned integer, not '" + value + "'";
    }
    i.seed = seed;
    return std::nullopt;
  }
  return "unknown parameter '" + std::string(name) + "'; known: loss, seed";
}

void push_impairment(ServedDevice& served) {
  if (!served.runner) return;
  Datapath& datapath = served.runner->datapath();
  const RxImpairment impairment = served.impairment;
  for (std::uint32_t w = 0; w < datapath.worker_count(); ++w) {
    datapath.worker(w).call([&impairment](Worker& worker) {
      worker.set_impairment_on_worker(impairment);
      return 0;
    });
  }
}

}  // namespace

namespace ops {

Reply impair_show(OpContext& ctx) {
  const ServedDevice& served = *ctx.served;
  return {0, {}, impair_json(served.model->name(), served.impairment).dump(), {}};
}

Reply impair_set(OpContext& ctx, const control::ImpairSetRequest& request) {
  if (ctx.body.size() != sizeof request + request.length) return Reply::error(EINVAL);
  ServedDevice& served = *ctx.served;
  RxImpairment next = served.impairment;
  const std::string_view text = ctx.body.substr(sizeof request, request.length);
  if (auto error = apply_lines(text, "nothing to set: give loss=P and/or seed=N",
                               [&](std::string_view line) { return apply(next, line); })) {
    return {0, {}, set_error_reply(*error), {}};
  }
  served.impairment = next;
  push_impairment(served);
  return {0,
          {},
          nlohmann::ordered_json{{"ok", true}, {"impair", impair_json(served.model->name(), next)}}
              .dump(),
          {}};
}

}  // namespace ops
}  // namespace xroce::daemon
