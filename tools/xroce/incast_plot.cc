// The SVG of an incast run: top panel each flow's measured rate through the bottleneck, bottom
// panel the bottleneck queue depth, both over simulated time, with the marking thresholds.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>

#include "incast_plot.h"

namespace xroce::cli {

using cc::sim::FluidResult;
using cc::sim::IncastConfig;
using cc::sim::IncastResult;

namespace {

constexpr double kWidth = 960;
constexpr double kPanelHeight = 300;
constexpr double kLeft = 70;
constexpr double kRight = 150;  // room for the legend
constexpr double kTop = 40;
constexpr double kGap = 60;
constexpr std::size_t kMaxPoints = 800;  // per polyline, keeps the file small
constexpr std::array<const char*, 10> kColours = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                                  "#bcbd22", "#17becf"};

std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A "nice" tick step for a range: 1, 2 or 5 times a power of ten, about 5 ticks.
double tick_step(double range) {
  if (range <= 0) return 1;
  const double raw = range / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

struct Panel {
  double top;
  double x_max;  // µs
  double y_max;
  double x(double us) const { return kLeft + us / x_max * (kWidth - kLeft - kRight); }
  double y(double v) const { return top + kPanelHeight - v / y_max * kPanelHeight; }
};

void axes(std::string& out, const Panel& p, const std::string& y_label) {
  const double x0 = kLeft;
  const double x1 = kWidth - kRight;
  const double y0 = p.top + kPanelHeight;
  out += "<rect x='" + fmt_num(x0) + "' y='" + fmt_num(p.top) + "' width='" + fmt_num(x1 - x0) +
         "' height='" + fmt_num(kPanelHeight) + "' fill='none' stroke='black'/>\n";
  const double xs = tick_step(p.x_max);
  for (double t = 0; t <= p.x_max * 1.0001; t += xs) {
    out += "<line x1='" + fmt_num(p.x(t)) + "' y1='" + fmt_num(y0) + "' x2='" + fmt_num(p.x(t)) +
           "' y2='" + fmt_num(y0 + 5) + "' stroke='black'/>";
    out += "<text x='" + fmt_num(p.x(t)) + "' y='" + fmt_num(y0 + 18) +
           "' font-size='11' text-anchor='middle'>" + fmt_num(t / 1000) + "</text>\n";
  }
  const double ys = tick_step(p.y_max);
  for (double v = 0; v <= p.y_max * 1.0001; v += ys) {
    out += "<line x1='" + fmt_num(x0 - 5) + "' y1='" + fmt_num(p.y(v)) + "' x2='" + fmt_num(x1) +
           "' y2='" + fmt_num(p.y(v)) + "' stroke='#ddd'/>";
    out += "<text x='" + fmt_num(x0 - 8) + "' y='" + fmt_num(p.y(v) + 4) +
           "' font-size='11' text-anchor='end'>" + fmt_num(v) + "</text>\n";
  }
  out += "<text x='" + fmt_num((x0 + x1) / 2) + "' y='" + fmt_num(y0 + 34) +
         "' font-size='12' text-anchor='middle'>time (ms)</text>\n";
  out += "<text transform='translate(18," + fmt_num(p.top + kPanelHeight / 2) +
         ") rotate(-90)' font-size='12' text-anchor='middle'>" + y_label + "</text>\n";
}

void polyline(std::string& out, const Panel& p, const std::vector<std::pair<double, double>>& pts,
              const char* colour, const char* dash = nullptr) {
  out += "<polyline fill='none' stroke-width='" + std::string(dash ? "2" : "1.2") + "' stroke='" +
         std::string(colour) + "'";
  if (dash) out += " stroke-dasharray='" + std::string(dash) + "'";
  out += " points='";
  for (const auto& [t, v] : pts)
    out += fmt_num(p.x(t)) + "," + fmt_num(p.y(std::min(v, p.y_max))) + " ";
  out += "'/>\n";
}

// Averages a per-bin series down to at most kMaxPoints points (time at each group's middle).
std::vector<std::pair<double, double>> downsample(const std::vector<double>& v, double bin_us) {
  const std::size_t group = std::max<std::size_t>(1, (v.size() + kMaxPoints - 1) / kMaxPoints);
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < v.size(); i += group) {
    const std::size_t n = std::min(group, v.size() - i);
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j)
      sum += v[i + j];
    out.emplace_back((static_cast<double>(i) + static_cast<double>(n) / 2) * bin_us,
                     sum / static_cast<double>(n));
  }
  return out;
}

// The fluid model's R_C and queue, dashed over the measured ones, with a legend entry.
void fluid_overlay(std::string& out, const Panel& rates, const Panel& queue,
                   const FluidResult& fluid) {
  constexpr const char* kFluidColour = "black";
  constexpr const char* kFluidDash = "8,3";
  const std::size_t step = std::max<std::size_t>(1, fluid.samples.size() / kMaxPoints);
  std::vector<std::pair<double, double>> rc;
  std::vector<std::pair<double, double>> q;
  for (std::size_t i = 0; i < fluid.samples.size(); i += step) {
    rc.emplace_back(fluid.samples[i].t_us, fluid.samples[i].rc_gbps);
    q.emplace_back(fluid.samples[i].t_us, fluid.samples[i].queue_bytes / 1000);
  }
  polyline(out, rates, rc, kFluidColour, kFluidDash);
  polyline(out, queue, q, kFluidColour, kFluidDash);
  const double lx = kWidth - kRight + 12;
  for (const Panel* p : {&rates, &queue}) {
    const double ly = p->top + kPanelHeight - (p == &rates ? 36 : 4);
    out += "<line x1='" + fmt_num(lx) + "' y1='" + fmt_num(ly - 4) + "' x2='" + fmt_num(lx + 20) +
           "' y2='" + fmt_num(ly - 4) + "' stroke='black' stroke-width='2' stroke-dasharray='" +
           kFluidDash + "'/>";
    out += "<text x='" + fmt_num(lx + 26) + "' y='" + fmt_num(ly) +
           "' font-size='11'>fluid model</text>\n";
  }
}

}  // namespace

std::string plot_incast_svg(const IncastResult& r, const FluidResult* fluid) {
  const IncastConfig& c = r.config;
  const double bin_us = static_cast<double>(r.bin_ns) / 1000;
  const double x_max = static_cast<double>(c.duration_us);
  Panel rates{kTop, x_max, c.rate_gbps * 1.05};
  double q_max = static_cast<double>(c.kmax_bytes) * 1.5;
  for (const auto& [t, b] : r.queue_series)
    q_max = std::max(q_max, static_cast<double>(b));
  Panel queue{kTop + kPanelHeight + kGap, x_max, q_max / 1000 * 1.05};

  std::string out;
  const double height = kTop + 2 * kPanelHeight + kGap + 50;
  out += "<svg xmlns='http://www.w3.org/2000/svg' width='" + fmt_num(kWidth) + "' height='" +
         fmt_num(height) + "' font-family='sans-serif'>\n";
  out += "<rect width='100%' height='100%' fill='white'/>\n";
  // Two title lines: the scenario (the profile may carry --cc-set overrides), then the results.
  char scenario[512];
  std::snprintf(scenario, sizeof scenario, "incast %u:1 at %g Gb/s, cc %s (%s)", c.senders,
                c.rate_gbps, c.cc ? "dcqcn" : "none", c.profile.c_str());
  char results[256];
  std::snprintf(results, sizeof results,
                "Jain %.3f, utilisation %.1f%%, queue p50 %.1f KB, p99 %.1f KB (window from "
                "%.4g ms)",
                r.jain, r.utilization * 100, static_cast<double>(r.queue.p50_bytes) / 1000,
                static_cast<double>(r.queue.p99_bytes) / 1000, r.window_start_us / 1000);
  out += "<text x='" + fmt_num(kWidth / 2) + "' y='16' font-size='12' text-anchor='middle'>" +
         scenario + "</text>\n";
  out += "<text x='" + fmt_num(kWidth / 2) + "' y='32' font-size='12' text-anchor='middle'>" +
         results + "</text>\n";
  axes(out, rates, "rate through the bottleneck (Gb/s)");
  axes(out, queue, "bottleneck queue (KB)");
  // Window start, fair share, marking thresholds.
  out += "<line x1='" + fmt_num(rates.x(r.window_start_us)) + "' y1='" + fmt_num(rates.top) +
         "' x2='" + fmt_num(rates.x(r.window_start_us)) + "' y2='" +
         fmt_num(rates.top + kPanelHeight) + "' stroke='black' stroke-dasharray='2,4'/>\n";
  out += "<line x1='" + fmt_num(kLeft) + "' y1='" + fmt_num(rates.y(r.fair_share_gbps)) + "' x2='" +
         fmt_num(kWidth - kRight) + "' y2='" + fmt_num(rates.y(r.fair_share_gbps)) +
         "' stroke='black' stroke-dasharray='6,4'/>\n";
  for (const double k : {static_cast<double>(c.kmin_bytes), static_cast<double>(c.kmax_bytes)}) {
    out += "<line x1='" + fmt_num(kLeft) + "' y1='" + fmt_num(queue.y(k / 1000)) + "' x2='" +
           fmt_num(kWidth - kRight) + "' y2='" + fmt_num(queue.y(k / 1000)) +
           "' stroke='#d62728' stroke-dasharray='6,4'/>\n";
  }
  for (std::size_t i = 0; i < r.flows.size(); ++i) {
    const char* colour = kColours[i % kColours.size()];
    polyline(out, rates, downsample(r.flows[i].rate_series_gbps, bin_us), colour);
    if (i < 16) {  // legend (the first 16 flows)
      const double ly = kTop + 10 + static_cast<double>(i) * 16;
      const double lx = kWidth - kRight + 12;
      out += "<line x1='" + fmt_num(lx) + "' y1='" + fmt_num(ly) + "' x2='" + fmt_num(lx + 20) +
             "' y2='" + fmt_num(ly) + "' stroke='" + colour + "' stroke-width='2'/>";
      out += "<text x='" + fmt_num(lx + 26) + "' y='" + fmt_num(ly + 4) + "' font-size='11'>flow " +
             std::to_string(i) + "</text>\n";
    }
  }
  std::vector<double> depth_kb;
  std::vector<std::pair<double, double>> pts;
  const std::size_t step = std::max<std::size_t>(1, r.queue_series.size() / (2 * kMaxPoints));
  for (std::size_t i = 0; i < r.queue_series.size(); i += step)
    pts.emplace_back(static_cast<double>(r.queue_series[i].first) / 1000,
                     static_cast<double>(r.queue_series[i].second) / 1000);
  polyline(out, queue, pts, "#333");
  if (fluid != nullptr) fluid_overlay(out, rates, queue, *fluid);
  const double lx = kWidth - kRight + 12;
  out += "<text x='" + fmt_num(lx) + "' y='" + fmt_num(queue.top + 14) +
         "' font-size='11'>queue depth</text>\n";
  out += "<text x='" + fmt_num(lx) + "' y='" + fmt_num(queue.top + 30) +
         "' font-size='11' fill='#d62728'>Kmin, Kmax</text>\n";
  out += "<text x='" + fmt_num(lx) + "' y='" + fmt_num(rates.top + kPanelHeight - 20) +
         "' font-size='11'>- - fair share</text>\n";
  out += "<text x='" + fmt_num(lx) + "' y='" + fmt_num(rates.top + kPanelHeight - 4) +
         "' font-size='11'>··· window start</text>\n";
  out += "</svg>\n";
  return out;
}

}  // namespace xroce::cli
