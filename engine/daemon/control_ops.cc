#include "daemon/control_ops.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "xroce/control_message.h"

namespace xroce::daemon {

namespace {

using control::Op;

// Adapts a typed handler to the table: the body is at least sizeof(Request) (dispatch checked).
template <typename Request, Reply (*Handle)(OpContext&, const Request&)>
Reply typed(OpContext& ctx) {
  Request request{};
  std::memcpy(&request, ctx.body.data(), sizeof request);
  return Handle(ctx, request);
}

template <typename Request, Reply (*Handle)(OpContext&, const Request&)>
constexpr OpSpec op(Op code, Needs needs, uint8_t min_fds = 0, uint8_t max_fds = 0) {
  return OpSpec{code, needs, sizeof(Request), min_fds, max_fds, &typed<Request, Handle>};
}

constexpr OpSpec op(Op code, Needs needs, Reply (*handle)(OpContext&), uint8_t fds = 0) {
  return OpSpec{code, needs, 0, fds, fds, handle};
}

// clang-format off
constexpr OpSpec kOps[] = {
    // A new context: [event socket, /proc/self/mem, /proc/self/maps].
    op<control::HelloRequest, ops::hello>(Op::hello, Needs::kNewContext, 3, 3),
    op(Op::query_device, Needs::kContext, ops::query_device),
    op<control::PortRequest, ops::query_port>(Op::query_port, Needs::kContext),
    op(Op::alloc_pd, Needs::kContext, ops::alloc_pd),
    op<control::HandleRequest, ops::dealloc_pd>(Op::dealloc_pd, Needs::kContext),
    // An optional memfd backing the region (include/xroce/shared_mr.h).
    op<control::RegMrRequest, ops::reg_mr>(Op::reg_mr, Needs::kContext, 0, 1),
    op<control::HandleRequest, ops::dereg_mr>(Op::dereg_mr, Needs::kContext),
    op<control::LinkAddRequest, ops::link_add>(Op::link_add, Needs::kRoot),
    op<control::LinkDelRequest, ops::link_del>(Op::link_del, Needs::kRoot),
    op(Op::link_show, Needs::kAnyone, ops::link_show),
    // The daemon's end of the channel.
    op(Op::create_comp_channel, Needs::kContext, ops::create_comp_channel, 1),
    op<control::CreateCqRequest, ops::create_cq>(Op::create_cq, Needs::kContext),
    op<control::HandleRequest, ops::destroy_cq>(Op::destroy_cq, Needs::kContext),
    op<control::ResizeCqRequest, ops::resize_cq>(Op::resize_cq, Needs::kContext),
    op<control::CreateQpRequest, ops::create_qp>(Op::create_qp, Needs::kContext),
    op<control::ModifyQpRequest, ops::modify_qp>(Op::modify_qp, Needs::kContext),
    op<control::HandleRequest, ops::query_qp>(Op::query_qp, Needs::kContext),
    op<control::HandleRequest, ops::destroy_qp>(Op::destroy_qp, Needs::kContext),
    op<control::CreateSrqRequest, ops::create_srq>(Op::create_srq, Needs::kContext),
    op<control::ModifySrqRequest, ops::modify_srq>(Op::modify_srq, Needs::kContext),
    op<control::HandleRequest, ops::query_srq>(Op::query_srq, Needs::kContext),
    op<control::HandleRequest, ops::destroy_srq>(Op::destroy_srq, Needs::kContext),
    op<control::CreateAhRequest, ops::create_ah>(Op::create_ah, Needs::kContext),
    op<control::HandleRequest, ops::destroy_ah>(Op::destroy_ah, Needs::kContext),
    OpSpec{Op::stat, Needs::kNamedDevice, sizeof(control::NameRequest), 0, 0, ops::stat},
    OpSpec{Op::qp_show, Needs::kNamedDevice, sizeof(control::NameRequest), 0, 0, ops::qp_show},
    OpSpec{Op::cc_show, Needs::kNamedDevice, sizeof(control::NameRequest), 0, 0, ops::cc_show},
    op<control::CcSetRequest, ops::cc_set>(Op::cc_set, Needs::kNamedDeviceRoot),
    op<control::CcProfileRequest, ops::cc_profile>(Op::cc_profile, Needs::kNamedDeviceRoot),
    op(Op::text_next, Needs::kAnyone, ops::text_next),
    // rdma_cm (cm_service.h): a connection that is no verbs context becomes an event channel,
    // with the channel's eventfd; then the ucma commands (any body); and `xroce cm show`.
    op(Op::cm_open, Needs::kNewContext, ops::cm_open, 1),
    op(Op::cm_command, Needs::kAnyone, ops::cm_command),
    OpSpec{Op::cm_show, Needs::kNamedDevice, sizeof(control::NameRequest), 0, 0, ops::cm_show},
    // Memory windows, re-registration, XRC domains, SRQ resize, ODP advice.
    op<control::AllocMwRequest, ops::alloc_mw>(Op::alloc_mw, Needs::kContext),
    op<control::HandleRequest, ops::dealloc_mw>(Op::dealloc_mw, Needs::kContext),
    op<control::ReregMrRequest, ops::rereg_mr>(Op::rereg_mr, Needs::kContext),
    // An optional descriptor of the file naming a shared domain.
    op<control::OpenXrcdRequest, ops::open_xrcd>(Op::open_xrcd, Needs::kContext, 0, 1),
    op<control::HandleRequest, ops::close_xrcd>(Op::close_xrcd, Needs::kContext),
    op<control::OpenQpRequest, ops::open_qp>(Op::open_qp, Needs::kContext),
    op<control::ResizeSrqRequest, ops::resize_srq>(Op::resize_srq, Needs::kContext),
    op<control::AdviseMrRequest, ops::advise_mr>(Op::advise_mr, Needs::kContext),
    OpSpec{Op::impair_show, Needs::kNamedDevice, sizeof(control::NameRequest), 0, 0,
           ops::impair_show},
    op<control::ImpairSetRequest, ops::impair_set>(Op::impair_set, Needs::kNamedDeviceRoot),
};
// clang-format on

// Every request that names a device starts with the name.
static_assert(offsetof(control::CcSetRequest, name) == 0 &&
              offsetof(control::CcProfileRequest, name) == 0 &&
              offsetof(control::ImpairSetRequest, name) == 0 &&
              offsetof(control::NameRequest, name) == 0);

// What one page of text may hold: a whole datagram less the headers.
constexpr std::size_t kTextPageBytes =
    control::kMaxMessageBytes - sizeof(control::Header) - sizeof(control::TextReply);

// The checks of `needs`; 0 or the errno the request fails with. Sets ctx.served.
int admit(OpContext& ctx, Needs needs) {
  switch (needs) {
    case Needs::kAnyone:
      return 0;
    case Needs::kRoot:
      return ctx.root() ? 0 : EPERM;
    case Needs::kNewContext:
      return ctx.session.has_context() ? EINVAL : 0;
    case Needs::kContext:
      ctx.served = ctx.devices.find(ctx.session.device);
      return ctx.served == nullptr ? ENODEV : 0;
    case Needs::kNamedDevice:
    case Needs::kNamedDeviceRoot: {
      if (needs == Needs::kNamedDeviceRoot && !ctx.root()) return EPERM;
      ctx.served = ctx.devices.find(control::bounded_name(ctx.body.data(), control::kNameBytes));
      return ctx.served == nullptr ? ENODEV : 0;
    }
  }
  return EINVAL;
}

}  // namespace

const OpSpec* find_op(Op op) {
  for (const OpSpec& spec : kOps) {
    if (spec.op == op) return &spec;
  }
  return nullptr;
}

Reply dispatch(OpContext& ctx, Op op) {
  const OpSpec* spec = find_op(op);
  if (spec == nullptr) return Reply::error(EOPNOTSUPP);
  const std::size_t fds = ctx.message.fds.size();
  if (ctx.body.size() < spec->request_bytes || fds < spec->min_fds || fds > spec->max_fds ||
      ctx.message.fds_truncated) {
    return Reply::error(EINVAL);
  }
  if (int err = admit(ctx, spec->needs)) return Reply::error(err);
  return spec->handle(ctx);
}

std::optional<std::string> apply_lines(
    std::string_view text, std::string_view nothing,
    const std::function<std::optional<std::string>(std::string_view line)>& apply) {
  bool any = false;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    if (auto error = apply(line)) return error;
    any = true;
  }
  if (!any) return std::string(nothing);
  return std::nullopt;
}

std::string set_error_reply(const std::string& message) {
  return nlohmann::ordered_json{{"ok", false}, {"error", message}}.dump();
}

int start_text(const Sessions& sessions, Session& session, std::string text) {
  session.pending_text.clear();
  session.pending_sent = 0;
  if (text.size() > kTextPageBytes &&
      (text.size() > Sessions::kMaxPendingTextPerSession ||
       sessions.pending_text_total() + text.size() > Sessions::kMaxPendingTextTotal)) {
    return ENOMEM;
  }
  session.pending_text = std::move(text);
  return 0;
}

std::string take_text_page(Session& session) {
  const std::size_t left = session.pending_text.size() - session.pending_sent;
  const std::size_t length = std::min(left, kTextPageBytes);
  const control::TextReply head{static_cast<uint32_t>(length), length < left ? 1u : 0u};
  std::string body = control::body_bytes(head);
  body.append(session.pending_text, session.pending_sent, length);
  session.pending_sent += length;
  if (session.pending_sent >= session.pending_text.size()) {
    session.pending_text = std::string();  // gives the memory back
    session.pending_sent = 0;
  }
  return body;
}

bool visible_to(const Sessions& sessions, uid_t viewer, device::ClientId owner) {
  if (viewer == 0) return true;
  const auto uid = sessions.uid_of(owner);
  return uid && *uid == viewer;
}

}  // namespace xroce::daemon
