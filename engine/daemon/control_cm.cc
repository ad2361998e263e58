// The rdma_cm ops of the control protocol (include/xroce/control.h): one connection per
// librdmacm event channel, opened by libxroce-preload.so, and `xroce cm show`.
#include <cerrno>
#include <nlohmann/json.hpp>
#include <set>

#include "daemon/control_ops.h"
#include "xroce/control_message.h"

namespace xroce::daemon::ops {

// A connection becomes an event channel: the daemon keeps the channel's eventfd readable while
// the channel has events (cm_service.h).
Reply cm_open(OpContext& ctx) {
  Fd event = ctx.message.take(0);
  if (!is_eventfd(event.get())) return Reply::error(EINVAL);
  const int err =
      ctx.devices.cm().open_file(ctx.session.id, ctx.session.peer.pid(), event.release());
  if (err != 0) return Reply::error(err);
  return {
      0, control::body_bytes(control::HandleReply{static_cast<uint32_t>(ctx.session.id)}), {}, {}};
}

Reply cm_command(OpContext& ctx) {
  std::string response;
  const int err = ctx.devices.cm().command(ctx.session.id, std::string(ctx.body), response);
  if (err != 0) return Reply::error(err);
  return {0, std::move(response), {}, {}};
}

// The device's ids; a user other than root sees those of its own processes only.
Reply cm_show(OpContext& ctx) {
  const std::string text = ctx.devices.cm().show(ctx.served->model->name());
  if (text.empty()) return Reply::error(ENODEV);
  if (ctx.root()) return {0, {}, text, {}};
  std::set<pid_t> own;
  for (const auto& [fd, session] : ctx.sessions.by_connection()) {
    if (session->peer.uid() == ctx.sender.uid) own.insert(session->peer.pid());
  }
  auto shown = nlohmann::ordered_json::parse(text);
  auto& ids = shown["ids"];
  for (auto it = ids.begin(); it != ids.end();) {
    it = own.count(it->value("pid", 0)) != 0 ? it + 1 : ids.erase(it);
  }
  return {0, {}, shown.dump(), {}};
}

}  // namespace xroce::daemon::ops
