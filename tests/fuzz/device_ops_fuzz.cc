// libFuzzer target for what the control ops do to a device (engine/device/device.h: the model
// every context op lands in once the daemon's ops table has checked the request): arbitrary
// sequences of object verbs with arbitrary arguments, from three clients, against one Device
// with random memory keys.
//
// Properties besides "no crash, no sanitizer report":
//   - a client never reaches another's object (a handle of another client is EINVAL);
//   - no client holds more than its quota (owned_counts against client_quota);
//   - releasing every client leaves the device empty.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device/device.h"
#include "fuzz_support.h"

namespace {

using xroce::fuzz::Input;
using xroce::fuzz::require;

using namespace xroce;
using device::ClientId;

constexpr ClientId kClients = 3;

// A handle the client made (sometimes), or an arbitrary one (another client's, or none).
uint32_t handle(Input& in, const std::vector<uint32_t>& made) {
  const uint8_t pick = in.byte();
  if (!made.empty() && pick < 200) return made[pick % made.size()];
  return in.word() % 64;
}

struct Client {
  std::vector<uint32_t> pds, cqs, qps, srqs, ahs, mrs;
};

void step(device::Device& dev, Client* clients, Input& in) {
  const ClientId who = 1 + in.byte() % kClients;
  Client& c = clients[who - 1];
  switch (in.byte() % 14) {
    case 0:
      if (auto pd = dev.alloc_pd(who, 100 + static_cast<int>(who))) c.pds.push_back(*pd);
      break;
    case 1:
      (void)dev.dealloc_pd(who, handle(in, c.pds));
      break;
    case 2: {
      device::MrRequest r{handle(in, c.pds),
                          uint64_t{in.word()} << 12,
                          in.word() % (1 << 20),
                          0,
                          in.byte() % 32u,
                          100,
                          uint64_t{in.word()} % (1 << 22)};
      r.iova = r.addr;
      if (auto keys = dev.reg_mr(who, r)) c.mrs.push_back(keys->handle);
      break;
    }
    case 3:
      (void)dev.dereg_mr(who, handle(in, c.mrs));
      break;
    case 4:
      if (auto cq = dev.create_cq(who, device::CqRequest{in.word() % 5000, 0, in.byte() % 2u, 0}))
        c.cqs.push_back(*cq);
      break;
    case 5:
      (void)dev.resize_cq(who, handle(in, c.cqs), in.word() % 5000);
      break;
    case 6:
      (void)dev.destroy_cq(who, handle(in, c.cqs));
      break;
    case 7: {
      device::QpRequest r{handle(in, c.pds),
                          handle(in, c.cqs),
                          handle(in, c.cqs),
                          in.byte() < 128 ? 0 : handle(in, c.srqs),
                          2u + in.byte() % 4,
                          (in.byte() & 1) != 0,
                          control::QpCap{in.word() % 64, in.word() % 64, in.byte() % 40u,
                                         in.byte() % 40u, in.word() % 512},
                          0};
      if (auto qp = dev.create_qp(who, r)) c.qps.push_back(*qp);
      break;
    }
    case 8: {
      const uint32_t qp = handle(in, c.qps);
      (void)dev.modify_qp(who, qp, in.raw<control::QpAttr>(), in.word());
      break;
    }
    case 9:
      (void)dev.query_qp(who, handle(in, c.qps));
      break;
    case 10:
      (void)dev.destroy_qp(who, handle(in, c.qps));
      break;
    case 11: {
      device::SrqRequest r{handle(in, c.pds), in.raw<control::SrqAttr>(), 0};
      r.attr.max_wr %= 512;
      if (auto srq = dev.create_srq(who, r)) c.srqs.push_back(*srq);
      break;
    }
    case 12:
      if (in.byte() < 128) {
        (void)dev.modify_srq(who, handle(in, c.srqs), in.raw<control::SrqAttr>(), in.byte() % 4);
      } else {
        (void)dev.destroy_srq(who, handle(in, c.srqs));
      }
      break;
    case 13:
      if (in.byte() < 128) {
        if (auto ah = dev.create_ah(who, handle(in, c.pds), in.raw<control::AhAttr>()))
          c.ahs.push_back(*ah);
      } else {
        (void)dev.destroy_ah(who, handle(in, c.ahs));
      }
      break;
  }
  // Another client's objects are out of reach.
  for (const uint32_t qp : c.qps) {
    for (ClientId other = 1; other <= kClients; ++other) {
      if (other != who && dev.qp(who, qp) != nullptr) {
        require(dev.qp(other, qp) == nullptr, "a client reaches another's QP");
      }
    }
  }
  const device::OwnedCounts owned = dev.owned_counts(who);
  const device::ClientQuota& quota = dev.client_quota();
  require(owned.qps <= quota.max_qp && owned.cqs <= quota.max_cq && owned.mrs <= quota.max_mr &&
              owned.pds <= quota.max_pd && owned.srqs <= quota.max_srq && owned.ahs <= quota.max_ah,
          "within the quota");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  uint32_t key_state = 0x9e3779b9;
  device::Device dev("fuzz0",
                     device::NetdevState{"veth0", 3, {2, 0, 0, 0, 0, 1}, 1500, true, true, 0}, 7,
                     nullptr, [&key_state] {
                       key_state = key_state * 1664525u + 1013904223u;  // deterministic per input
                       return key_state;
                     });
  const uint8_t v4[4] = {198, 18, 0, 1};
  dev.update_addresses({device::IpAddress::v4_from(v4)});
  Client clients[kClients];
  Input in{data, size};
  for (int i = 0; i < 256 && in.size > 0; ++i)
    step(dev, clients, in);
  for (ClientId who = 1; who <= kClients; ++who)
    dev.release_client(who);
  require(dev.queue_pairs().empty() && dev.memory_regions().empty() && dev.pd_count() == 0 &&
              dev.cq_count() == 0,
          "released clients leave nothing");
  return 0;
}
