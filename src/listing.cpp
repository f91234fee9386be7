// prop_runner --list: the registry as text and as JSON (kprop/listing.h).
#include "kprop/listing.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "kprop/family.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace kprop {

std::string list_text() {
  std::string out = "Spec keys (every spec):\n" + describe_spec_keys();
  out +=
      "\nHealth checks (a run that fails one exits 2; run: {suppress_health_check: [NAME]} turns it off):\n";
  for (const auto& h : health_checks()) out += fmt::format("  {:<12} {}\n", h.name, h.description);
  for (const Family* f : Registry::instance().families()) {
    out += fmt::format("\nfamily {} — {}\n  domain:\n{}", f->name(), f->description(),
                       describe_schema(f->domain_schema(), 4));
    out += "  implementations:\n";
    for (const auto& i : f->implementations())
      out +=
          fmt::format("    {:<26} {:<9} {:<4} {}\n", i.name, impl_kind_name(i.kind), i.device, i.description);
    if (f->external_ops().empty()) {
      out += "  external targets: none yet\n";
    } else {
      out += "  external targets (plugin:PATH.so, exec:COMMAND; include/kprop/abi.h, docs/EXTERNAL.md):\n";
      for (const auto& op : f->external_ops())
        out += fmt::format("    op {:<23} entry point {}\n", op.op, op.symbol);
    }
    out += "  invariants:\n";
    for (const auto& inv : f->invariants()) {
      out += fmt::format("    {:<26} {}\n", inv.name, inv.description);
      out += describe_schema(inv.params, 6);
    }
    // Named tensors: what `expect:` / `when:` expressions may read.
    if (f->tensor_infos().empty()) {
      out += "  tensors: none yet (no expression invariants)\n";
    } else {
      out += "  tensors (for invariants {name, expect: EXPR, when: EXPR}; docs/SPEC.md):\n";
      for (const auto& t : f->tensor_infos())
        out += fmt::format("    {:<18} {:<20} {:<4} {}\n", t.name, expr::shape_text(t.shape),
                           expr::dtype_name(t.dtype), t.meaning);
    }
    // Metamorphic transforms: `transform: NAME` in an expression invariant.
    if (f->transforms().empty()) {
      out += "  transforms: none yet\n";
    } else {
      out += "  transforms (for invariants {name, transform: NAME, expect: EXPR}; docs/SPEC.md):\n";
      for (const auto& t : f->transforms()) {
        out += fmt::format("    {:<26} {}\n", t.name, t.description);
        out += describe_schema(t.params, 6);
        for (const auto& x : t.tensors)
          out += fmt::format("      {:<24} {:<20} {:<4} {}\n", x.name, expr::shape_text(x.shape),
                             expr::dtype_name(x.dtype), x.meaning);
      }
    }
  }
  out +=
      "\nExpression functions (invariants {name, expect: EXPR, when: EXPR}):\n" + expr::describe_functions();
  return out;
}

namespace {

using nlohmann::json;

json value_json(const Value& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, IntRange> || std::is_same_v<T, RealRange>)
          return json::array({x.lo, x.hi});
        else
          return json(x);
      },
      v);
}

json schema_json(const Schema& schema) {
  json out = json::array();
  for (const auto& f : schema) {
    json j = {{"key", f.key}, {"kind", kind_name(f.kind)}, {"doc", f.doc}};
    if (f.kind == FieldKind::map) {
      j["children"] = schema_json(f.children);
    } else {
      j["default"] = value_json(f.fallback);
      if (std::isfinite(f.min)) j["min"] = f.min;
      if (std::isfinite(f.max)) j["max"] = f.max;
      if (!f.allowed.empty()) j["allowed"] = f.allowed;
    }
    out.push_back(std::move(j));
  }
  return out;
}

json tensors_json(const expr::TensorInfos& infos) {
  json out = json::array();
  for (const auto& t : infos)
    out.push_back(
        {{"name", t.name}, {"shape", t.shape}, {"dtype", expr::dtype_name(t.dtype)}, {"meaning", t.meaning}});
  return out;
}

}  // namespace

std::string list_json() {
  json families = json::array();
  for (const Family* f : Registry::instance().families()) {
    json impls = json::array(), invariants = json::array(), ops = json::array(), transforms = json::array();
    for (const auto& i : f->implementations())
      impls.push_back({{"name", i.name},
                       {"kind", impl_kind_name(i.kind)},
                       {"device", i.device},
                       {"deterministic", i.deterministic},
                       {"description", i.description}});
    for (const auto& i : f->invariants())
      invariants.push_back(
          {{"name", i.name}, {"description", i.description}, {"params", schema_json(i.params)}});
    for (const auto& op : f->external_ops()) ops.push_back({{"op", op.op}, {"symbol", op.symbol}});
    for (const auto& t : f->transforms())
      transforms.push_back({{"name", t.name},
                            {"description", t.description},
                            {"params", schema_json(t.params)},
                            {"tensors", tensors_json(t.tensors)}});
    families.push_back({{"name", f->name()},
                        {"description", f->description()},
                        {"domain", schema_json(f->domain_schema())},
                        {"implementations", std::move(impls)},
                        {"external_ops", std::move(ops)},
                        {"invariants", std::move(invariants)},
                        {"tensors", tensors_json(f->tensor_infos())},
                        {"transforms", std::move(transforms)}});
  }
  json checks = json::array();
  for (const auto& h : health_checks()) checks.push_back({{"name", h.name}, {"description", h.description}});
  json functions = json::array();
  for (const auto& [name, doc] : expr::function_docs()) functions.push_back({{"name", name}, {"doc", doc}});
  const json out = {{"spec_keys", describe_spec_keys()},
                    {"health_checks", std::move(checks)},
                    {"families", std::move(families)},
                    {"functions", std::move(functions)}};
  return out.dump(2) + "\n";
}

}  // namespace kprop
