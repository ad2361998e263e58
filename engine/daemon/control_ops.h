// The control ops (include/xroce/control.h) as one table: each op's request type, who may ask,
// how many descriptors it carries, and its handler. dispatch() does what every op needs before
// its handler runs (the request's size, its descriptors, the caller's rights, the device it is
// about), so a handler starts with a parsed request and the objects it acts on.
//
// Threading: the control thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/control_devices.h"
#include "daemon/control_session.h"
#include "xroce/control.h"
#include "xroce/fd_passing.h"

namespace xroce::daemon {

struct Reply {
  int32_t status = 0;
  std::string body;                 // the reply struct(s)
  std::optional<std::string> text;  // or a text the server sends in TextReply pages
  std::vector<Fd> fds;              // sent with the reply, then closed here

  static Reply error(int status) { return Reply{status, {}, std::nullopt, {}}; }
};

// What a handler gets.
struct OpContext {
  Devices& devices;
  Sessions& sessions;
  Session& session;
  const SenderCredentials& sender;  // who sent this request (the session's opener)
  ReceivedMessage& message;         // its descriptors: a handler take()s what it keeps
  std::string_view body;            // the whole request body
  // The device the op is about: the session's for a context op, the named one for an op that
  // names a device (NameRequest, CcSetRequest, CcProfileRequest all start with the name).
  ServedDevice* served = nullptr;

  device::Device& device() const { return *served->model; }
  bool root() const { return sender.uid == 0; }
};

enum class Needs : uint8_t {
  kAnyone,          // no context needed (link_show)
  kRoot,            // real uid 0 (link_add, link_del)
  kNewContext,      // a session without a context yet (hello)
  kContext,         // a session with a context on a live device
  kNamedDevice,     // the device the request names, for anyone (stat, qp_show, cc_show)
  kNamedDeviceRoot  // the device the request names, for root (cc_set, cc_profile)
};

struct OpSpec {
  control::Op op;
  Needs needs;
  std::size_t request_bytes;  // the body is at least this long
  uint8_t min_fds;            // descriptors the request carries
  uint8_t max_fds;
  Reply (*handle)(OpContext&);
};

// The spec of `op`, or nullptr for an op the daemon does not know.
const OpSpec* find_op(control::Op op);
// Checks the request against its op's spec and runs the handler. Descriptors the handler does
// not take stay in ctx.message and are closed with it.
Reply dispatch(OpContext& ctx, control::Op op);

// The handlers, one per op (control_handlers.cc, control_queues.cc, control_transport.cc,
// control_stat.cc, control_cc.cc, control_cm.cc). Each may assume what its OpSpec's Needs promises.
namespace ops {
Reply hello(OpContext& ctx, const control::HelloRequest& request);
Reply query_device(OpContext& ctx);
Reply query_port(OpContext& ctx, const control::PortRequest& request);
Reply alloc_pd(OpContext& ctx);
Reply dealloc_pd(OpContext& ctx, const control::HandleRequest& request);
Reply reg_mr(OpContext& ctx, const control::RegMrRequest& request);
Reply dereg_mr(OpContext& ctx, const control::HandleRequest& request);
Reply create_comp_channel(OpContext& ctx);
Reply link_add(OpContext& ctx, const control::LinkAddRequest& request);
Reply link_del(OpContext& ctx, const control::LinkDelRequest& request);
Reply link_show(OpContext& ctx);
Reply create_cq(OpContext& ctx, const control::CreateCqRequest& request);
Reply destroy_cq(OpContext& ctx, const control::HandleRequest& request);
Reply resize_cq(OpContext& ctx, const control::ResizeCqRequest& request);
Reply create_qp(OpContext& ctx, const control::CreateQpRequest& request);
Reply modify_qp(OpContext& ctx, const control::ModifyQpRequest& request);
Reply query_qp(OpContext& ctx, const control::HandleRequest& request);
Reply destroy_qp(OpContext& ctx, const control::HandleRequest& request);
Reply create_srq(OpContext& ctx, const control::CreateSrqRequest& request);
Reply modify_srq(OpContext& ctx, const control::ModifySrqRequest& request);
Reply query_srq(OpContext& ctx, const control::HandleRequest& request);
Reply destroy_srq(OpContext& ctx, const control::HandleRequest& request);
Reply create_ah(OpContext& ctx, const control::CreateAhRequest& request);
Reply destroy_ah(OpContext& ctx, const control::HandleRequest& request);
Reply stat(OpContext& ctx);
Reply qp_show(OpContext& ctx);
Reply cc_show(OpContext& ctx);
Reply cc_set(OpContext& ctx, const control::CcSetRequest& request);
Reply cc_profile(OpContext& ctx, const control::CcProfileRequest& request);
// control_impair.cc
Reply impair_show(OpContext& ctx);
Reply impair_set(OpContext& ctx, const control::ImpairSetRequest& request);
Reply text_next(OpContext& ctx);
Reply cm_open(OpContext& ctx);
Reply cm_command(OpContext& ctx);
Reply cm_show(OpContext& ctx);
Reply rereg_mr(OpContext& ctx, const control::ReregMrRequest& request);
// control_transport.cc
Reply alloc_mw(OpContext& ctx, const control::AllocMwRequest& request);
Reply dealloc_mw(OpContext& ctx, const control::HandleRequest& request);
Reply open_xrcd(OpContext& ctx, const control::OpenXrcdRequest& request);
Reply close_xrcd(OpContext& ctx, const control::HandleRequest& request);
Reply open_qp(OpContext& ctx, const control::OpenQpRequest& request);
Reply resize_srq(OpContext& ctx, const control::ResizeSrqRequest& request);
Reply advise_mr(OpContext& ctx, const control::AdviseMrRequest& request);

// The replies that hand a QP's or an SRQ's rings to the application (control_queues.cc).
Reply qp_reply(device::QueuePair& qp, uint32_t handle);
Reply srq_reply(device::SharedReceiveQueue& srq, uint32_t handle);
}  // namespace ops

// Text replies travel in pages (control::TextReply, Op::text_next). start_text keeps `text` as
// the session's pending text (0, or ENOMEM beyond Sessions' pending-text quotas); each
// take_text_page cuts the next page's reply body from it.
int start_text(const Sessions& sessions, Session& session, std::string text);

// The set ops (cc_set, impair_set): each non-empty line of their "NAME=VALUE\n..." text goes to
// `apply`, which returns an error's text or nullopt. The first error, `nothing` if the text held
// no line, or nullopt.
std::optional<std::string> apply_lines(
    std::string_view text, std::string_view nothing,
    const std::function<std::optional<std::string>(std::string_view line)>& apply);
// A set op's reply when it changed nothing: {"ok": false, "error": message}.
std::string set_error_reply(const std::string& message);
std::string take_text_page(Session& session);

// Releases everything a session's context holds on its device (objects, shared mappings,
// memory) and leaves it without a context. Used when a session closes and when its device goes.
void release_context(Devices& devices, Session& session);

// Whether objects of `owner` may be shown to the user `viewer`: root sees all, anyone else the
// objects of its own processes only.
bool visible_to(const Sessions& sessions, uid_t viewer, device::ClientId owner);

}  // namespace xroce::daemon
