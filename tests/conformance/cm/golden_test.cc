// The golden CM capture: one RoCE v2 frame per CM message tshark dissects (REQ with the IP CM
// header, REP, RTU, REJ, DREQ), IPv4 between 198.18.0.1 and 198.18.0.2, QP1 to QP1. The encoder
// must still produce the committed file byte for byte (set XROCE_CM_GOLDEN_WRITE=1 to rewrite it
// after a deliberate change), and tshark must read back every field we set.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>

#include "cm/gsi.h"
#include "cm/ip_service.h"
#include "wire/pcap.h"

namespace xroce::cm {
namespace {

Gid v4_gid(std::uint8_t last) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, last};
}

std::vector<CmMessage> golden_messages() {
  ReqMsg req;
  req.local_comm_id = 0x1a2b3c4d;
  req.service_id = service_id(PortSpace::kTcp, 7174);
  req.local_ca_guid = 0x02005efffe000001;
  req.local_qpn = 0x000011;
  req.responder_resources = 16;
  req.initiator_depth = 16;
  req.remote_cm_response_timeout = 20;
  req.end_to_end_flow_control = true;
  req.starting_psn = 0x5a5a5a;
  req.local_cm_response_timeout = 20;
  req.retry_count = 7;
  req.path_mtu = 3;
  req.rnr_retry_count = 7;
  req.max_cm_retries = 15;
  req.primary.local_gid = v4_gid(1);
  req.primary.remote_gid = v4_gid(2);
  req.primary.packet_rate = 3;
  req.primary.hop_limit = 64;
  req.primary.local_ack_timeout = 17;
  encode_ip_header(IpHeader{40001, wire::IpAddr::v4(0xc6120001), wire::IpAddr::v4(0xc6120002)},
                   req.private_data);
  req.private_data[kIpHeaderBytes] = 0xab;  // the consumer's first byte

  RepMsg rep;
  rep.local_comm_id = 0x5e6f7081;
  rep.remote_comm_id = req.local_comm_id;
  rep.local_qpn = 0x000012;
  rep.starting_psn = req.starting_psn;
  rep.responder_resources = 16;
  rep.initiator_depth = 16;
  rep.target_ack_delay = 15;
  rep.end_to_end_flow_control = true;
  rep.rnr_retry_count = 7;
  rep.local_ca_guid = 0x02005efffe000002;
  rep.private_data[0] = 0xcd;

  RtuMsg rtu;
  rtu.local_comm_id = req.local_comm_id;
  rtu.remote_comm_id = rep.local_comm_id;

  RejMsg rej;
  rej.local_comm_id = 0;
  rej.remote_comm_id = req.local_comm_id;
  rej.message = MessageRef::kReq;
  rej.reason = static_cast<std::uint16_t>(RejReason::kInvalidServiceId);

  DreqMsg dreq;
  dreq.local_comm_id = req.local_comm_id;
  dreq.remote_comm_id = rep.local_comm_id;
  dreq.remote_qpn = rep.local_qpn;
  return {req, rep, rtu, rej, dreq};
}

std::vector<std::uint8_t> golden_capture() {
  wire::pcap::Writer writer;
  std::uint32_t psn = 0;
  std::uint64_t tid = 0x0000000100000001;
  for (const CmMessage& m : golden_messages()) {
    wire::FrameAddress addr;
    addr.src_mac = {0x02, 0, 0x5e, 0, 0, 1};
    addr.dst_mac = {0x02, 0, 0x5e, 0, 0, 2};
    addr.src_ip = wire::IpAddr::v4(0xc6120001);
    addr.dst_ip = wire::IpAddr::v4(0xc6120002);
    const MadBuffer mad = encode_cm_mad(tid++, m);
    auto frame = encode_gsi_frame(addr, psn++, mad);
    EXPECT_TRUE(frame);
    writer.add(*frame, psn * 1000);
  }
  return writer.bytes();
}

std::vector<std::uint8_t> read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(CmGolden, EncoderStillProducesTheCommittedCapture) {
  const auto fresh = golden_capture();
  if (std::getenv("XROCE_CM_GOLDEN_WRITE") != nullptr) {
    std::ofstream(XROCE_CM_GOLDEN, std::ios::binary)
        .write(reinterpret_cast<const char*>(fresh.data()),
               static_cast<std::streamsize>(fresh.size()));
  }
  EXPECT_EQ(read_file(XROCE_CM_GOLDEN), fresh);
}

// One line per frame: the requested fields, tab-separated (tshark -T fields).
std::vector<std::map<std::string, std::string>> tshark_fields(
    const std::vector<std::string>& fields) {
  std::string cmd = "tshark -r " + std::string(XROCE_CM_GOLDEN) + " -T fields -E separator=/t";
  for (const auto& f : fields)
    cmd += " -e " + f;
  cmd += " 2>/dev/null";
  std::vector<std::map<std::string, std::string>> rows;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return rows;
  char line[4096];
  while (fgets(line, sizeof(line), p) != nullptr) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    std::map<std::string, std::string> row;
    std::stringstream ss(s);
    std::string value;
    for (const auto& f : fields) {
      std::getline(ss, value, '\t');
      row[f] = value;
    }
    rows.push_back(row);
  }
  pclose(p);
  return rows;
}

// tshark prints some fields zero-padded to their storage width (0x0000000080010000).
std::uint64_t num(const std::string& s) {
  return s.empty() ? ~0ull : std::stoull(s, nullptr, 0);
}

TEST(CmGolden, TsharkDissectsEveryFieldWeSet) {
  if (std::system("command -v tshark >/dev/null 2>&1") != 0) GTEST_SKIP() << "no tshark";
  const auto rows = tshark_fields({"infiniband.bth.destqp",
                                   "infiniband.deth.q_key",
                                   "infiniband.deth.srcqp",
                                   "infiniband.mad.mgmtclass",
                                   "infiniband.mad.classversion",
                                   "infiniband.mad.method",
                                   "infiniband.mad.attributeid",
                                   "infiniband.mad.transactionid",
                                   "infiniband.cm.req.serviceid",
                                   "infiniband.cm.req.localcaguid",
                                   "infiniband.cm.req.localqpn",
                                   "infiniband.cm.req.responderres",
                                   "infiniband.cm.req.initdepth",
                                   "infiniband.cm.req.remoteresptout",
                                   "infiniband.cm.req.transpsvctype",
                                   "infiniband.cm.req.startpsn",
                                   "infiniband.cm.req.localresptout",
                                   "infiniband.cm.req.retrcount",
                                   "infiniband.cm.req.pkey",
                                   "infiniband.cm.req.pppmtu",
                                   "infiniband.cm.req.rnrretrcount",
                                   "infiniband.cm.req.maxcmretr",
                                   "infiniband.cm.req.prim_localgid_ipv4",
                                   "infiniband.cm.req.prim_remotegid_ipv4",
                                   "infiniband.cm.req.prim_hoplim",
                                   "infiniband.cm.req.prim_localacktout",
                                   "infiniband.cm.req.ip_cm.ipv",
                                   "infiniband.cm.req.ip_cm.sport",
                                   "infiniband.cm.req.ip_cm.sip4",
                                   "infiniband.cm.req.ip_cm.dip4",
                                   "infiniband.cm.rep.remotecommid",
                                   "infiniband.cm.rep.localqpn",
                                   "infiniband.cm.rep.startpsn",
                                   "infiniband.cm.rep.tgtackdelay",
                                   "infiniband.cm.rep.rnrretrcount",
                                   "infiniband.cm.rep.localcaguid",
                                   "infiniband.cm.rtu.localcommid",
                                   "infiniband.cm.rtu.remotecommid",
                                   "infiniband.cm.rej.remotecommid",
                                   "infiniband.cm.rej.msgrej",
                                   "infiniband.cm.rej.reason",
                                   "infiniband.cm.dreq.localcommid",
                                   "infiniband.cm.dreq.remotecommid",
                                   "infiniband.invariant.crc"});
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& r : rows) {
    EXPECT_EQ(num(r.at("infiniband.bth.destqp")), 0x000001ull);
    EXPECT_EQ(num(r.at("infiniband.deth.q_key")), 0x80010000ull);
    EXPECT_EQ(num(r.at("infiniband.deth.srcqp")), 0x000001ull);
    EXPECT_EQ(num(r.at("infiniband.mad.mgmtclass")), 0x07ull);
    EXPECT_EQ(num(r.at("infiniband.mad.classversion")), 0x02ull);
    EXPECT_EQ(num(r.at("infiniband.mad.method")), 0x03ull);
    EXPECT_FALSE(r.at("infiniband.invariant.crc").empty());
  }
  // tshark 4.0 shows the ICRC without checking it; the reference ICRC (bit at a time, written
  // apart from the fast one) checks it.
  const auto bytes = read_file(XROCE_CM_GOLDEN);  // the records point into it
  auto file = wire::pcap::parse(bytes);
  ASSERT_TRUE(file);
  for (const auto& record : file->records) {
    auto frame = wire::decode_frame(record.data);
    ASSERT_TRUE(frame);
    EXPECT_TRUE(frame->icrc_ok);
    EXPECT_TRUE(is_gsi_mad(*frame));
  }
  const auto& req = rows[0];
  EXPECT_EQ(num(req.at("infiniband.mad.attributeid")), 0x0010ull);
  EXPECT_EQ(num(req.at("infiniband.mad.transactionid")), 0x0000000100000001ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.serviceid")), 0x0000000001061c06ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.localcaguid")), 0x02005efffe000001ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.localqpn")), 0x000011ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.responderres")), 0x10ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.initdepth")), 0x10ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.remoteresptout")), 0x14ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.transpsvctype")), 0x00ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.startpsn")), 0x5a5a5aull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.localresptout")), 0x14ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.retrcount")), 0x07ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.pkey")), 0xffffull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.pppmtu")), 0x03ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.rnrretrcount")), 0x07ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.maxcmretr")), 0x0full);
  EXPECT_EQ(req.at("infiniband.cm.req.prim_localgid_ipv4"), "198.18.0.1");
  EXPECT_EQ(req.at("infiniband.cm.req.prim_remotegid_ipv4"), "198.18.0.2");
  // Not compared: prim_pktrate. tshark 4.0 reads the packet rate from the first byte of the
  // flow label word (offset 88, mask 0x3f) instead of its last (offset 91, IBA 12.6.5: Flow
  // Label 20 bits, Reserved 6, Packet Rate 6), so it shows the flow label's top bits.
  EXPECT_EQ(num(req.at("infiniband.cm.req.prim_hoplim")), 0x40ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.prim_localacktout")), 0x11ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.ip_cm.ipv")), 0x04ull);
  EXPECT_EQ(num(req.at("infiniband.cm.req.ip_cm.sport")), 40001ull);
  EXPECT_EQ(req.at("infiniband.cm.req.ip_cm.sip4"), "198.18.0.1");
  EXPECT_EQ(req.at("infiniband.cm.req.ip_cm.dip4"), "198.18.0.2");
  const auto& rep = rows[1];
  EXPECT_EQ(num(rep.at("infiniband.mad.attributeid")), 0x0013ull);
  EXPECT_EQ(num(rep.at("infiniband.cm.rep.remotecommid")), 0x1a2b3c4dull);
  EXPECT_EQ(num(rep.at("infiniband.cm.rep.localqpn")), 0x000012ull);
  EXPECT_EQ(num(rep.at("infiniband.cm.rep.startpsn")), 0x5a5a5aull);
  EXPECT_EQ(num(rep.at("infiniband.cm.rep.tgtackdelay")), 0x0full);
  EXPECT_EQ(num(rep.at("infiniband.cm.rep.rnrretrcount")), 0x07ull);
  EXPECT_EQ(num(rep.at("infiniband.cm.rep.localcaguid")), 0x02005efffe000002ull);
  EXPECT_EQ(num(rows[2].at("infiniband.mad.attributeid")), 0x0014ull);
  EXPECT_EQ(num(rows[2].at("infiniband.cm.rtu.localcommid")), 0x1a2b3c4dull);
  EXPECT_EQ(num(rows[2].at("infiniband.cm.rtu.remotecommid")), 0x5e6f7081ull);
  EXPECT_EQ(num(rows[3].at("infiniband.mad.attributeid")), 0x0012ull);
  EXPECT_EQ(num(rows[3].at("infiniband.cm.rej.remotecommid")), 0x1a2b3c4dull);
  EXPECT_EQ(num(rows[3].at("infiniband.cm.rej.msgrej")), 0x00ull);
  EXPECT_EQ(num(rows[3].at("infiniband.cm.rej.reason")), 0x0008ull);
  EXPECT_EQ(num(rows[4].at("infiniband.mad.attributeid")), 0x0015ull);
  EXPECT_EQ(num(rows[4].at("infiniband.cm.dreq.localcommid")), 0x1a2b3c4dull);
  EXPECT_EQ(num(rows[4].at("infiniband.cm.dreq.remotecommid")), 0x5e6f7081ull);
}

// The other direction: MADs the kernel's CM wrote (Linux 6.1 ib_cm/rdma_cm over rxe, against
// xroce, captured by interop.cm_rxe: tests/data/captures/README.md). Every one, from either
// side, is a GSI MAD our decoder takes, and the kernel side's messages are the ones its
// programs make: REQ, REP, RTU, REJ, DREQ, DREP, SIDR REQ and SIDR REP.
TEST(CmKernelCapture, EveryKernelMadDecodes) {
  const auto bytes = read_file(XROCE_CM_KERNEL_CAPTURE);
  auto file = wire::pcap::parse(bytes);
  ASSERT_TRUE(file) << wire::pcap::to_string(file.error());
  constexpr std::uint8_t kKernelHostByte = 10;  // the guest is 198.18.102.10, xroce .2
  std::map<std::string, int> from_kernel, from_xroce;
  for (const auto& record : file->records) {
    auto frame = wire::decode_frame(record.data);
    ASSERT_TRUE(frame) << "a frame of the capture does not decode";
    ASSERT_TRUE(is_gsi_mad(*frame));
    auto mad = decode_cm_mad(frame->payload);
    ASSERT_TRUE(mad) << to_string(mad.error());
    const MadPeer peer = peer_of(*frame);
    const bool by_kernel = peer.remote_gid[15] == kKernelHostByte;
    (by_kernel ? from_kernel : from_xroce)[message_name(mad->message)]++;
  }
  for (const char* name : {"REQ", "REP", "RTU", "REJ", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP"}) {
    EXPECT_GT(from_kernel[name], 0) << name;
    EXPECT_GT(from_xroce[name], 0) << name;
  }
}

}  // namespace
}  // namespace xroce::cm
