// The op family's in-process implementations: the declared reference
// expressions, in fp64 (`reference`) and in the case's own precision
// (`naive`, the same-precision baseline of the dtype-aware tolerance).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/op/op.h"

namespace kprop::op {

const char* dtype_name(DType dtype) {
  return dtype == DType::f32 ? "f32" : "f64";
}

double round_to(DType dtype, double v) {
  return dtype == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v;
}

double unit_roundoff(DType dtype) {
  return dtype == DType::f32 ? 0x1.0p-24 : 0x1.0p-53;
}

const char* value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::normal:
      return "normal";
    case ValueKind::uniform:
      return "uniform";
    case ValueKind::integer:
      return "integer";
    case ValueKind::large:
      return "large";
    case ValueKind::small:
      return "small";
    case ValueKind::constant_rows:
      return "constant_rows";
  }
  return "?";
}

bool DimDecl::valid(int64_t v) const {
  if (v < lo || v > hi || v % multiple_of != 0) return false;
  if (one_of.empty()) return true;
  for (int64_t o : one_of)
    if (o == v) return true;
  return false;
}

std::vector<int64_t> DimDecl::values_below(int64_t v) const {
  std::vector<int64_t> out;
  if (!one_of.empty()) {
    for (int64_t o : one_of)
      if (o < v && valid(o)) out.push_back(o);
    std::sort(out.begin(), out.end());
    return out;
  }
  const int64_t first = (lo + multiple_of - 1) / multiple_of * multiple_of;
  for (int64_t w = first; w < v && w <= hi; w += multiple_of) out.push_back(w);
  return out;
}

int64_t DimDecl::smallest() const {
  const auto below = values_below(hi + 1);
  if (below.empty()) throw std::logic_error("op: dim " + name + " has no valid value");
  return below.front();
}

bool AttrDecl::valid(double v) const {
  if (integer && v != std::floor(v)) return false;
  if (one_of.empty()) return v >= lo && v <= hi;
  for (double o : one_of)
    if (o == v) return true;
  return false;
}

int Decl::dim_index(const std::string& n) const {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i].name == n) return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> Decl::extents(const std::vector<std::string>& shape,
                                   const std::vector<int64_t>& d) const {
  std::vector<int64_t> out;
  for (const auto& s : shape) {
    const int i = dim_index(s);
    out.push_back(i >= 0 ? d[static_cast<size_t>(i)] : std::stoll(s));
  }
  return out;
}

DType Case::output_dtype(size_t output) const {
  const auto& o = decl->outputs.at(output);
  return o.dtype ? *o.dtype : dtype;
}

void put_inputs(const Case& c, expr::TensorMap& out, bool rounded) {
  const Decl& d = *c.decl;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    out.put(d.inputs[i].name, expr::Tensor::of(d.extents(d.inputs[i].shape, c.dims), c.inputs[i]));
  for (size_t i = 0; i < d.dims.size(); ++i)
    out.put(d.dims[i].name, expr::Tensor::scalar(static_cast<double>(c.dims[i]), expr::DType::integer));
  for (size_t i = 0; i < d.attrs.size(); ++i)
    out.put(d.attrs[i].name,
            d.attrs[i].integer ? expr::Tensor::scalar(c.attrs[i], expr::DType::integer)
                               : expr::Tensor::scalar(rounded ? round_to(c.dtype, c.attrs[i]) : c.attrs[i]));
}

namespace {
expr::TensorMap inputs_map(const Case& c, bool rounded) {
  expr::TensorMap m;
  for (const auto& i : c.decl->inputs) m.want(i.name);
  for (const auto& i : c.decl->dims) m.want(i.name);
  for (const auto& i : c.decl->attrs) m.want(i.name);
  put_inputs(c, m, rounded);
  return m;
}
double to_f32(double v) {
  return static_cast<double>(static_cast<float>(v));
}
double to_f64(double v) {
  return v;
}
}  // namespace

double floor_of(const Case& c, size_t output, const std::vector<double>& ref) {
  double m = 0;
  for (double x : ref)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  int64_t n = 2;
  for (int64_t d : c.dims) n = std::max(n, d);
  // f64 outputs: the fp64 reference is itself a same-precision computation
  // whose sequential sums err by up to (n - 1) u: that error counts too.
  const DType dt = c.output_dtype(output);
  const double steps =
      dt == DType::f64 ? 2.0 * static_cast<double>(n) : 2 * std::ceil(std::log2(static_cast<double>(n)));
  return (8 + steps) * unit_roundoff(dt) * m;
}

Result reference(const Case& c) {
  if (c.decl->external_reference) return c.decl->external_reference->call(c, true);
  const expr::TensorMap m = inputs_map(c, false);
  Result r;
  for (const auto& o : c.decl->outputs) r.outputs.push_back(o.reference->evaluate(m).data);
  return r;
}

Result naive(const Case& c) {
  if (c.decl->external_reference) return c.decl->external_reference->call(c, false);
  const expr::TensorMap m = inputs_map(c, true);
  Result r;
  for (size_t i = 0; i < c.decl->outputs.size(); ++i)
    r.outputs.push_back(c.decl->outputs[i]
                            .reference->evaluate_rounded(m, c.output_dtype(i) == DType::f32 ? to_f32 : to_f64)
                            .data);
  return r;
}

}  // namespace kprop::op
