// A declared op for kernels built elsewhere: each case is one request named
// after the op (op.name, default the spec's name) carrying every input as a
// named tensor in its dtype, the attrs as JSON and the declared outputs, for
// exec: workers (python/kprop_worker.py serve({name: fn})).
#include <fmt/format.h>

#include "properties/op/family.h"

namespace kprop::op {
namespace {

int32_t abi_dtype(DType dt) {
  return dt == DType::f32 ? KPROP_F32 : KPROP_F64;
}

Result drive(const Case& c, external::Transport& target) {
  const Decl& d = *c.decl;
  external::Message m;
  m.op = d.name;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    m.input(external::Tensor::of(d.inputs[i].name, abi_dtype(c.dtypes[i]),
                                 d.extents(d.inputs[i].shape, c.dims), c.inputs[i]));
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
