// A declared op for kernels built elsewhere: each case is one request named
// after the op (op.name, default the spec's name) carrying every input as a
// named tensor in its dtype, the attrs as JSON and the declared outputs, for
// exec: workers (python/kprop_worker.py serve({name: fn})).
#include <fmt/format.h>

#include "properties/op/family.h"

namespace kprop::op {
namespace {

// Index tensors travel as KPROP_I32 / KPROP_I64, masks as KPROP_U8 (0 / 1).
int32_t abi_dtype(DType dt) {
  switch (dt) {
    case DType::f32:
      return KPROP_F32;
    case DType::f64:
      return KPROP_F64;
    case DType::i32:
      return KPROP_I32;
    case DType::i64:
      return KPROP_I64;
    case DType::boolean:
      return KPROP_U8;
  }
  return KPROP_F64;
}

external::Tensor input_tensor(const std::string& name, DType dt, std::vector<int64_t> shape,
                              const std::vector<double>& values) {
  if (is_float(dt)) return external::Tensor::of(name, abi_dtype(dt), std::move(shape), values);
  const std::vector<int64_t> ints(values.begin(), values.end());
  return external::Tensor::of_ints(name, abi_dtype(dt), std::move(shape), ints);
}

Result drive(const Case& c, external::Transport& target) {
  const Decl& d = *c.decl;
  external::Message m;
  m.op = d.name;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    m.input(input_tensor(d.inputs[i].name, c.dtypes[i], d.extents(d.inputs[i].shape, c.dims), c.inputs[i]));
  for (size_t a = 0; a < d.attrs.size(); ++a) {
    if (d.attrs[a].integer)
      m.attrs[d.attrs[a].name] = static_cast<int64_t>(c.attrs[a]);
    else
      m.attrs[d.attrs[a].name] = c.attrs[a];
  }
  for (size_t i = 0; i < d.outputs.size(); ++i)
    m.output(d.outputs[i].name, abi_dtype(c.output_dtype(i)), d.extents(d.outputs[i].shape, c.dims));
  const external::Message reply = target.call(m);
  Result r;
  for (const auto& o : d.outputs) r.outputs.push_back(reply.tensor(o.name).to_doubles());
  return r;
}

}  // namespace

void register_external(OpFamily& f) {
  const std::string name = f.decl().name;
  // Plugins: a generic named-tensor ABI entry is not there yet (issue 19);
  // a plugin target is refused when it is called.
  f.external(
      {{name, "kprop_op_" + name,
        [name](void*, const external::Message&, external::Message&) {
          throw external::TargetFailure(
              "error",
              fmt::format("op {}: plugin targets for declared ops are not supported yet; use exec:", name));
        }}},
      drive);
}

}  // namespace kprop::op
