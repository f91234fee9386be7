#include "properties/attention/bounds.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kprop/tolerance.h"

namespace kprop::attention {

double epsilon(DType dtype) {
  return dtype == DType::f64 ? std::numeric_limits<double>::epsilon()
                             : double(std::numeric_limits<float>::epsilon());
}

double storage_roundoff(DType dtype) {
  return is_half(dtype) ? unit_roundoff(dtype) : 0;
}

namespace {
// Every real-valued field of ErrorScales.
constexpr double ErrorScales::*kFields[] = {
    &ErrorScales::o,       &ErrorScales::lse,     &ErrorScales::dq,     &ErrorScales::dk,
    &ErrorScales::dv,      &ErrorScales::d,       &ErrorScales::dk_sum, &ErrorScales::dv_sum,
    &ErrorScales::sdq,     &ErrorScales::sdk,     &ErrorScales::sdv,    &ErrorScales::sd,
    &ErrorScales::sdk_sum, &ErrorScales::sdv_sum, &ErrorScales::ds_max, &ErrorScales::dp_abs_max,
    &ErrorScales::vmax};

double max_abs(const std::vector<double>& t) {
  double m = 0;
  for (double x : t) m = std::max(m, std::fabs(x));
  return m;
}

// The case's largest |q|, |k|, |dO|, for the τ terms of every group's floors.
struct Largest {
  double q = 0, k = 0, d_out = 0;
};

// The floors of one group (or of the case's maxima).
ErrorScales group_floors(const Case& c, const ErrorScales& e, bool backward, double floor_ulps,
                         const Largest& m) {
  const double a = floor_ulps * epsilon(c.dtype);
  ErrorScales f = e;
  for (double ErrorScales::*x :
       {&ErrorScales::o, &ErrorScales::lse, &ErrorScales::dq, &ErrorScales::dk, &ErrorScales::dv,
        &ErrorScales::d, &ErrorScales::dk_sum, &ErrorScales::dv_sum})
    f.*x = a * e.*x;
  if (!is_half(c.dtype)) return f;
  const Shape& s = c.shape;
  const double u = storage_roundoff(c.dtype);
  const double tau = denorm_min(c.dtype) / 2;
  f.o += (2 * u + u * u + e.keys * tau) * e.vmax + tau;  // + τ: O's own store when subnormal
  if (!backward) return f;
  const double scale = effective_scale(c), rows = double(s.nq) * s.group();
  const double second = 1 + 2 * u;  // second-order terms (bounds.h)
  f.d += second * e.sd;
  // The last τ of each: the output's own store when subnormal (per element;
  // the key sums add Nk stored elements). The τ terms take the case's
  // largest |q|, |k|, |dO|: a bound for every group.
  f.dq += second * e.sdq + tau * scale * s.nk * m.k + tau;
  f.dk += second * e.sdk + tau * scale * rows * m.q + tau;
  f.dv += second * e.sdv + tau * rows * m.d_out + tau;
  f.dk_sum += second * e.sdk_sum + tau * scale * rows * s.nk * m.q + s.nk * tau;
  f.dv_sum += second * e.sdv_sum + tau * rows * s.nk * m.d_out + s.nk * tau;
  return f;
}
}  // namespace

bool query_side(double ErrorScales::*field) {
  return field == &ErrorScales::o || field == &ErrorScales::lse || field == &ErrorScales::d ||
         field == &ErrorScales::dq || field == &ErrorScales::sd || field == &ErrorScales::sdq;
}

std::vector<double> Scales::of(double ErrorScales::*field) const {
  const std::vector<ErrorScales>& from = query_side(field) ? q_groups : groups;
  std::vector<double> out;
  out.reserve(from.size());
  for (const ErrorScales& g : from) out.push_back(g.*field);
  if (out.empty()) out.push_back(all.*field);
  return out;
}

Scales forward_scales(const Case& c) {
  return error_scales(c, false);
}
Scales backward_scales(const Case& c) {
  return error_scales(c, true);
}

Scales floors(const Case& c, bool backward, double floor_ulps) {
  return floors(c, error_scales(c, backward), backward, floor_ulps);
}

namespace {
Largest largest(const Case& c, bool backward) {
  if (!is_half(c.dtype) || !backward) return {};  // the τ terms: half backward cases only
  return {max_abs(c.q), max_abs(c.k), max_abs(c.d_out)};
}
}  // namespace

ErrorScales largest_floors(const Case& c, const Scales& e, bool backward, double floor_ulps) {
  return group_floors(c, e.all, backward, floor_ulps, largest(c, backward));
}

Scales floors(const Case& c, const Scales& e, bool backward, double floor_ulps) {
  const Largest m = largest(c, backward);
  Scales f;
  f.all = group_floors(c, e.all, backward, floor_ulps, m);
  for (auto [from, to] : {std::pair{&e.groups, &f.groups}, std::pair{&e.q_groups, &f.q_groups}}) {
    to->reserve(from->size());
    for (const ErrorScales& g : *from) to->push_back(group_floors(c, g, backward, floor_ulps, m));
  }
  return f;
}

Scales error_scales(const Case& c, bool backward) {
  const Shape& s = c.shape;
  Scales out;
  out.groups.resize(size_t(s.batch) * s.heads_kv);
  out.q_groups.resize(size_t(s.batch) * s.heads_q);
  const double scale = effective_scale(c);
  const bool half = is_half(c.dtype);
  const double u = storage_roundoff(c.dtype), tau = half ? denorm_min(c.dtype) / 2 : 0;
  const int g = s.group();
  std::vector<double> smag(size_t(s.nk)), p(size_t(s.nk)), dp(size_t(s.nk)), dpmag(size_t(s.nk));
  std::vector<double> dk_sum(size_t(s.dim)), dv_sum(size_t(s.dim));
  // Per (b, kv head): Σ_i of the row terms per key (for dK, dV) and per d (for the sums).
  std::vector<double> dk_scale(size_t(s.nk) * s.dim), dv_scale(size_t(s.nk) * s.dim);
  // The same sums for the storage roundings (bounds.h), without c_i.
  std::vector<double> sdk_scale(size_t(s.nk) * s.dim), sdv_scale(size_t(s.nk) * s.dim);
  std::vector<double> sdk_sum(size_t(s.dim)), sdv_sum(size_t(s.dim));
  std::vector<double> dq_scale(size_t(s.dim)), sdq_scale(size_t(s.dim));  // per query row
  std::vector<double> v_abs_max(size_t(s.nk));                            // max_d |v_jd| per key
  for (int b = 0; b < s.batch; ++b)
    for (int kvh = 0; kvh < s.heads_kv; ++kvh) {
      ErrorScales& e = out.groups[size_t(b) * s.heads_kv + kvh];
      std::fill(dk_scale.begin(), dk_scale.end(), 0.0);
      std::fill(dv_scale.begin(), dv_scale.end(), 0.0);
      std::fill(dv_sum.begin(), dv_sum.end(), 0.0);
      std::fill(sdk_scale.begin(), sdk_scale.end(), 0.0);
      std::fill(sdv_scale.begin(), sdv_scale.end(), 0.0);
      std::fill(sdv_sum.begin(), sdv_sum.end(), 0.0);
      const double* k = &c.k[((size_t(b) * s.heads_kv + kvh) * s.nk) * s.dim];
      const double* v = &c.v[((size_t(b) * s.heads_kv + kvh) * s.nk) * s.dim];
      for (int j = 0; j < s.nk; ++j) {
        double most = 0;
        for (int d = 0; d < s.dim; ++d) most = std::max(most, std::fabs(v[size_t(j) * s.dim + d]));
        v_abs_max[size_t(j)] = most;
      }
      for (int h = kvh * g; h < (kvh + 1) * g; ++h)
        for (int i = 0; i < s.nq; ++i) {
          ErrorScales& eq = out.q_groups[size_t(b) * s.heads_q + h];
          const size_t row = (size_t(b) * s.heads_q + h) * s.nq + i;
          const double* q = &c.q[row * s.dim];
          // Scores, their magnitudes, the softmax and the visible |v| max.
          double m = -std::numeric_limits<double>::infinity(), smax = 0, vmax = 0;
          int n = 0;
          for (int j = 0; j < s.nk; ++j) {
            if (!visible(c, b, i, j)) {
              p[size_t(j)] = -std::numeric_limits<double>::infinity();
              smag[size_t(j)] = 0;
              continue;
            }
            double dot = 0, mag = 0;
            for (int d = 0; d < s.dim; ++d) {
              dot += q[d] * k[size_t(j) * s.dim + d];
              mag += std::fabs(q[d] * k[size_t(j) * s.dim + d]);
            }
            vmax = std::max(vmax, v_abs_max[size_t(j)]);
            p[size_t(j)] = scale * dot;
            smag[size_t(j)] = scale * mag;
            m = std::max(m, p[size_t(j)]);
            smax = std::max(smax, scale * mag);
            ++n;
          }
          if (n == 0) continue;  // fully masked: exact zeros expected
          eq.vmax = std::max(eq.vmax, vmax);
          eq.keys = std::max(eq.keys, n);
          double l = 0;
          for (double& x : p) l += (x = std::exp(x - m));
          for (double& x : p) x /= l;
          const double lse = m + std::log(l);
          const double ci = 2 + std::sqrt(double(n)) + 2 * smax + std::fabs(lse);
          eq.o = std::max(eq.o, ci * vmax);
          eq.lse = std::max(eq.lse, ci);
          if (!backward) continue;
          const double* d_out = &c.d_out[row * s.dim];
          double do_l1 = 0, d_row = 0, d_mag = 0;
          for (int d = 0; d < s.dim; ++d) do_l1 += std::fabs(d_out[d]);
          for (int j = 0; j < s.nk; ++j) {
            dp[size_t(j)] = dpmag[size_t(j)] = 0;
            // A key of probability 0 (masked, or exp underflowed) adds 0 to
            // both sums (dP is finite) and is skipped below.
            if (p[size_t(j)] == 0) continue;
            for (int d = 0; d < s.dim; ++d) {
              dp[size_t(j)] += d_out[d] * v[size_t(j) * s.dim + d];
              dpmag[size_t(j)] += std::fabs(d_out[d] * v[size_t(j) * s.dim + d]);
            }
            d_row += p[size_t(j)] * dp[size_t(j)];
            d_mag += p[size_t(j)] * dpmag[size_t(j)];
          }
          eq.d = std::max(eq.d, ci * do_l1 * vmax + d_mag);
          // The stored O the backward reads (the forward's own output) is
          // off by at most the forward's storage term, and D = rowsum(dO ⊙ O)
          // by |dO|₁ times that (bounds.h).
          const double o_err = (2 * u + u * u + n * tau) * vmax + tau, d_err = do_l1 * o_err;
          eq.sd = std::max(eq.sd, d_err);
          std::fill(dq_scale.begin(), dq_scale.end(), 0.0);
          std::fill(sdq_scale.begin(), sdq_scale.end(), 0.0);
          for (int j = 0; j < s.nk; ++j) {
            if (p[size_t(j)] == 0) continue;
            const double err =
                p[size_t(j)] * (ci * std::fabs(dp[size_t(j)] - d_row) + dpmag[size_t(j)] + ci * do_l1 * vmax);
            const double serr = p[size_t(j)] * (2 * u * std::fabs(dp[size_t(j)] - d_row) + d_err);
            e.ds_max = std::max(e.ds_max, p[size_t(j)] * std::fabs(dp[size_t(j)] - d_row));
            e.dp_abs_max = std::max(e.dp_abs_max, dpmag[size_t(j)]);
            for (int d = 0; d < s.dim; ++d) {
              const double kjd = std::fabs(k[size_t(j) * s.dim + d]), qd = std::fabs(q[d]);
              dq_scale[size_t(d)] += err * kjd;
              dk_scale[size_t(j) * s.dim + d] += err * qd;
              dv_scale[size_t(j) * s.dim + d] += p[size_t(j)] * ci * std::fabs(d_out[d]);
              if (!half) continue;  // the storage sums are 0 for f32/f64
              sdq_scale[size_t(d)] += serr * kjd;
              sdk_scale[size_t(j) * s.dim + d] += serr * qd;
              sdv_scale[size_t(j) * s.dim + d] += 2 * u * p[size_t(j)] * std::fabs(d_out[d]);
            }
          }
          for (int d = 0; d < s.dim; ++d) {
            eq.dq = std::max(eq.dq, scale * dq_scale[size_t(d)]);
            eq.sdq = std::max(eq.sdq, scale * sdq_scale[size_t(d)]);
            dv_sum[size_t(d)] += std::fabs(d_out[d]);
          }
        }
      if (!backward) continue;
      std::fill(dk_sum.begin(), dk_sum.end(), 0.0);
      std::fill(sdk_sum.begin(), sdk_sum.end(), 0.0);
      for (int j = 0; j < s.nk; ++j)
        for (int d = 0; d < s.dim; ++d) {
          const size_t at = size_t(j) * s.dim + d;
          e.dk = std::max(e.dk, scale * dk_scale[at]);
          e.dv = std::max(e.dv, dv_scale[at]);
          dk_sum[size_t(d)] += scale * dk_scale[at];
          dv_sum[size_t(d)] += dv_scale[at];
          e.sdk = std::max(e.sdk, scale * sdk_scale[at]);
          e.sdv = std::max(e.sdv, sdv_scale[at]);
          sdk_sum[size_t(d)] += scale * sdk_scale[at];
          sdv_sum[size_t(d)] += sdv_scale[at];
        }
      for (int d = 0; d < s.dim; ++d) {
        e.dk_sum = std::max(e.dk_sum, dk_sum[size_t(d)]);
        e.dv_sum = std::max(e.dv_sum, dv_sum[size_t(d)]);
        e.sdk_sum = std::max(e.sdk_sum, sdk_sum[size_t(d)]);
        e.sdv_sum = std::max(e.sdv_sum, sdv_sum[size_t(d)]);
      }
    }
  for (const auto* list : {&out.groups, &out.q_groups})
    for (const ErrorScales& e : *list) {
      for (double ErrorScales::*x : kFields) out.all.*x = std::max(out.all.*x, e.*x);
      out.all.keys = std::max(out.all.keys, e.keys);
    }
  return out;
}

double max_error(std::span<const double> reference, std::span<const double> x) {
  double worst = 0;
  for (size_t i = 0; i < reference.size() && i < x.size(); ++i)
    if (std::isfinite(reference[i])) worst = std::max(worst, std::fabs(x[i] - reference[i]));
  return worst;
}

std::string element_name(size_t index, const std::vector<int>& dims) {
  std::vector<size_t> at(dims.size());
  for (size_t a = dims.size(); a-- > 0;) {
    at[a] = index % size_t(dims[a]);
    index /= size_t(dims[a]);
  }
  return fmt::format("[{}]", fmt::join(at, ","));
}

Verdict compare_tensor(const std::string& name, const std::vector<int>& dims,
                       std::span<const double> reference, std::span<const double> target,
                       std::span<const double> naive, double k, std::span<const double> floors) {
  const ToleranceReport r = compare_with_baseline(reference, target, naive, k, floors);
  if (r.ok) return Verdict::pass({{kErrorRatio, error_ratio(r)}});
  const size_t at = r.worst_index;
  const bool in_range = at < target.size() && at < reference.size();
  return Verdict::fail(
      fmt::format("{}{}: {}{}", name, in_range ? element_name(at, dims) : "",
                  in_range ? fmt::format("{} vs reference {}; ", target[at], reference[at]) : "", r.message),
      {{"index", double(at)},
       {"target", in_range ? target[at] : std::nan("")},
       {"reference", in_range ? reference[at] : std::nan("")},
       {"target_error", r.target_error},
       {"naive_error", r.baseline_error},
       {"allowed", r.allowed}});
}

}  // namespace kprop::attention
