// `xroce validate`'s pure parts (tools/xroce/validate_core.h), on outputs taken from the real
// programs (ibv_devinfo -v of rxe in the interop VM and of xroce; perftest 4.5's reports).
#include "validate_core.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace xroce::cli::validate {
namespace {

TEST(ValidateSizes, LargestRocePacketIsAWriteOnlyWithImmediate) {
  // 12 BTH + 16 RETH + 4 ImmDt + 4 ICRC + 8 UDP + 20 IPv4 = 64 bytes around the payload.
  EXPECT_EQ(largest_roce_ip_packet(1024, false), 1088);
  EXPECT_EQ(largest_roce_ip_packet(4096, false), 4160);
  EXPECT_EQ(largest_roce_ip_packet(4096, true), 4180);
  // A 1500-byte path fits RoCE MTU 1024, a 9000-byte path 4096 (as rxe and RNICs choose).
  EXPECT_EQ(roce_mtu_for_ip_packet(1500, false), 1024);
  EXPECT_EQ(roce_mtu_for_ip_packet(9000, false), 4096);
  EXPECT_EQ(roce_mtu_for_ip_packet(4159, false), 2048);
  EXPECT_EQ(roce_mtu_for_ip_packet(300, false), 0);
  EXPECT_TRUE(is_roce_mtu(2048));
  EXPECT_FALSE(is_roce_mtu(1500));
}

constexpr const char* kDevinfo = R"(hca_id:	rxe0
	transport:			InfiniBand (0)
	fw_ver:				0.0.0
	node_guid:			5054:00ff:fe12:3456
	phys_port_cnt:			1
		port:	1
			state:			PORT_ACTIVE (4)
			max_mtu:		4096 (5)
			active_mtu:		1024 (3)
			sm_lid:			0
			link_layer:		Ethernet
			GID[  0]:		fe80::5054:ff:fe12:3456, RoCE v2
			GID[  1]:		::ffff:198.18.7.10, RoCE v2
			GID[  2]:		2001:2:0:7::10, RoCE v2

hca_id:	xr0
	transport:			InfiniBand (0)
		port:	1
			state:			PORT_DOWN (1)
			max_mtu:		4096 (5)
			active_mtu:		4096 (5)
			link_layer:		Ethernet
			GID[  0]:		::ffff:198.18.7.2, RoCE v2
)";

TEST(ValidateDevinfo, ReadsPortStateMtusAndGids) {
  const auto devices = parse_ibv_devinfo(kDevinfo);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].name, "rxe0");
  EXPECT_EQ(devices[0].port_state, "PORT_ACTIVE");
  EXPECT_EQ(devices[0].active_mtu, 1024);
  EXPECT_EQ(devices[0].max_mtu, 4096);
  EXPECT_EQ(devices[0].link_layer, "Ethernet");
  ASSERT_EQ(devices[0].gids.size(), 3u);
  EXPECT_EQ(devices[0].gids[1].gid, "::ffff:198.18.7.10");
  EXPECT_EQ(devices[0].gids[1].type, "RoCE v2");
  EXPECT_EQ(devices[1].port_state, "PORT_DOWN");
  EXPECT_EQ(parse_ibv_devinfo("No IB devices found\n").size(), 0u);
}

TEST(ValidateDevinfo, FindsTheRoceV2GidOfAnAddress) {
  const auto devices = parse_ibv_devinfo(kDevinfo);
  EXPECT_EQ(roce_v2_gid_index(devices[0], "198.18.7.10"), 1);
  EXPECT_EQ(roce_v2_gid_index(devices[0], "2001:2:0:7:0:0:0:10"), 2);  // any IPv6 spelling
  EXPECT_EQ(roce_v2_gid_index(devices[0], "198.18.7.11"), std::nullopt);
  EXPECT_EQ(roce_v2_gid_index(devices[1], "198.18.7.2"), 0);
  EXPECT_EQ(roce_v2_gid_index(devices[1], "not an address"), std::nullopt);
}

// The test programs' own TCP exchange listens on IPv4 only: an IPv6 peer is reached there at
// its device's IPv4 address (its QPs still use the IPv6 GIDs); a device without one has none.
TEST(ValidateDevinfo, TheProgramsExchangeGoesToAnIpv4AddressOfThePeer) {
  const auto devices = parse_ibv_devinfo(kDevinfo);
  EXPECT_EQ(exchange_address("198.18.7.10", devices[0]), "198.18.7.10");
  EXPECT_EQ(exchange_address("2001:2:0:7::10", devices[0]), "198.18.7.10");
  VerbsDevice v6_only = devices[0];
  v6_only.gids.erase(v6_only.gids.begin() + 1);
  EXPECT_EQ(exchange_address("2001:2:0:7::10", v6_only), std::nullopt);
}

TEST(ValidatePerftest, ParsesBandwidthAndLatencyReports) {
  const std::string bw = R"(
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      500              2.61               2.43   		   0.004634
---------------------------------------------------------------------------------------
)";
  const auto b = parse_perftest(bw, false);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->bytes, 65536u);
  EXPECT_EQ(b->iterations, 500u);
  EXPECT_DOUBLE_EQ(b->bw_peak_gbps, 2.61);
  EXPECT_DOUBLE_EQ(b->bw_avg_gbps, 2.43);
  EXPECT_DOUBLE_EQ(b->msg_rate_mpps, 0.004634);
  const std::string lat = R"(
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       500          31.42          204.11       44.06    	       47.92       	11.83  		90.31   		204.11 
---------------------------------------------------------------------------------------
)";
  const auto l = parse_perftest(lat, true);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, 8u);
  EXPECT_DOUBLE_EQ(l->lat_min_us, 31.42);
  EXPECT_DOUBLE_EQ(l->lat_typical_us, 44.06);
  EXPECT_DOUBLE_EQ(l->lat_avg_us, 47.92);
  EXPECT_DOUBLE_EQ(l->lat_p99_us, 90.31);
  EXPECT_FALSE(parse_perftest("Couldn't connect to 198.18.7.2:18515\n", false).has_value());
}

TEST(ValidatePerftest, FailureLineIsTheOneThatSaysWhy) {
  const std::string failed = R"(
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
Completion with error at client
 Failed status 12: wr_id 0 syndrom 0x81
scnt=128, ccnt=0
)";
  EXPECT_EQ(failure_line(failed), "Completion with error at client");
  EXPECT_EQ(failure_line("a\nlast words  \n\n"), "last words");
  EXPECT_EQ(failure_line(""), "");
}

TEST(ValidateServe, ComposesOnlyKnownProgramsWithBoundedNumbers) {
  const auto devices = parse_ibv_devinfo(kDevinfo);
  nlohmann::json req = {{"op", "perftest"}, {"test", "write_bw"}, {"device", "rxe0"},
                        {"gid_index", 1},   {"mtu", 1024},        {"port", 18515},
                        {"iterations", 100}};
  std::string error;
  auto argv = server_argv_for(req, devices, error);
  ASSERT_TRUE(argv.has_value()) << error;
  EXPECT_EQ((*argv)[0], "ib_write_bw");
  EXPECT_NE(std::find(argv->begin(), argv->end(), "--report_gbits"), argv->end());
  EXPECT_EQ(argv->back(), "65536");  // no peer address: a server

  const auto rejected = [&](nlohmann::json r, const std::string& why) {
    std::string e;
    EXPECT_FALSE(server_argv_for(r, devices, e).has_value()) << r.dump();
    EXPECT_NE(e.find(why), std::string::npos) << e;
  };
  auto bad = req;
  bad["test"] = "sh -c reboot";
  rejected(bad, "unknown test");
  bad = req;
  bad["device"] = "mlx5_0";
  rejected(bad, "no device 'mlx5_0'");
  bad = req;
  bad["mtu"] = 1500;
  rejected(bad, "mtu must be");
  bad = req;
  bad["port"] = 22;
  rejected(bad, "port must be");
  bad = req;
  bad["iterations"] = 10'000'000;
  rejected(bad, "iterations must be");
  bad = req;
  bad["op"] = "exec";
  rejected(bad, "unknown op");
  bad = req;
  bad["qp_timeout"] = 40;
  rejected(bad, "qp_timeout must be");
  auto slow = req;
  slow["qp_timeout"] = 18;
  argv = server_argv_for(slow, devices, error);
  ASSERT_TRUE(argv.has_value()) << error;
  const auto u = std::find(argv->begin(), argv->end(), "-u");
  ASSERT_NE(u, argv->end());
  EXPECT_EQ(*(u + 1), "18");

  nlohmann::json pp = req;
  pp["op"] = "pingpong";
  pp["size"] = 16384;
  argv = server_argv_for(pp, devices, error);
  ASSERT_TRUE(argv.has_value()) << error;
  EXPECT_EQ((*argv)[0], "ibv_rc_pingpong");
  EXPECT_EQ(argv->back(), "-c");
  pp["size"] = 1 << 30;
  rejected(pp, "size must be");
}

TEST(ValidateReport, TableJsonAndSvgNameEveryCheckAndResult) {
  Report r;
  r.peer = "198.18.7.10";
  r.local_device = "xr0";
  r.peer_device = "rxe0";
  r.roce_mtu = 1024;
  r.checks = {{"gid", Check::Outcome::kPass, "ok"},
              {"ecn", Check::Outcome::kFail, "ECT(0) sent to the peer arrived as Not-ECT"}};
  PerftestResult bw;
  bw.bytes = 65536;
  bw.iterations = 500;
  bw.bw_avg_gbps = 2.5;
  PerftestResult lat;
  lat.bytes = 8;
  lat.lat_typical_us = 40;
  r.perftest = {{"write_bw", false, true, bw, ""},
                {"write_lat", true, true, lat, ""},
                {"read_bw", false, false, {}, "ib_read_bw exited 1"}};
  EXPECT_FALSE(r.passed());
  const std::string table = r.table();
  EXPECT_NE(table.find("ecn        FAIL   ECT(0) sent to the peer arrived as Not-ECT"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("read_bw        FAIL: ib_read_bw exited 1"), std::string::npos) << table;
  EXPECT_NE(table.find("FAILED"), std::string::npos);
  const auto j = r.to_json();
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["checks"][1]["result"], "FAIL");
  EXPECT_EQ(j["perftest"][0]["bw_avg_gbps"], 2.5);
  EXPECT_EQ(j["perftest"][1]["t_typical_us"], 40.0);
  const std::string svg = r.svg();
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("write_bw"), std::string::npos);
  EXPECT_NE(svg.find("2.50 Gb/s"), std::string::npos);
  EXPECT_NE(svg.find("40.00 us"), std::string::npos);
  EXPECT_NE(svg.find("arrived as Not-ECT"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  r.checks[1].outcome = Check::Outcome::kPass;
  EXPECT_TRUE(r.passed());
}

}  // namespace
}  // namespace xroce::cli::validate
