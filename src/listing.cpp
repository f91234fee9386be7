// prop_runner --list: the registry as text and as JSON (kprop/listing.h).
#include "kprop/listing.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "kprop/family.h"
#include "kprop/output_reads.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace kprop {

namespace {

std::string pad(int n) {
  return std::string(static_cast<size_t>(n), ' ');
}

// A family's invariants, named tensors and transforms, their headers at
// `indent` (2 for a registered family).
std::string invariants_tensors_transforms_text(const Family& f, int indent) {
  const std::string h = pad(indent), i = pad(indent + 2), j = pad(indent + 4);
  std::string out = h + "invariants:\n";
  for (const auto& inv : f.invariants()) {
    out += fmt::format("{}{:<26} {}\n", i, inv.name, inv.description);
    if (inv.reads)
      out += fmt::format("{}reads: {}\n", j, inv.reads->empty() ? "no output" : join(*inv.reads));
    for (const auto& [field, values] : inv.observes)
      out += fmt::format(
          "{}observes: {} [{}] only (a run draws from there once no other invariant needs "
          "the rest)\n",
          j, field, join(values));
    out += describe_schema(inv.params, indent + 4);
  }
  // Named tensors: what `expect:` / `when:` expressions may read.
  if (f.tensor_infos().empty()) {
    out += h + "tensors: none yet (no expression invariants)\n";
  } else {
    out += h + "tensors (for invariants {name, expect: EXPR, when: EXPR}; docs/SPEC.md):\n";
    for (const auto& t : f.tensor_infos())
      out += fmt::format("{}{:<18} {:<20} {:<4} {}\n", i, t.name, expr::shape_text(t.shape),
                         expr::dtype_name(t.dtype), t.meaning);
  }
  // Metamorphic transforms: `transform: NAME` in an expression invariant.
  if (f.transforms().empty()) {
    out += h + "transforms: none yet\n";
  } else {
    out += h + "transforms (for invariants {name, transform: NAME, expect: EXPR}; docs/SPEC.md):\n";
    for (const auto& t : f.transforms()) {
      out += fmt::format("{}{:<26} {}\n", i, t.name, t.description);
      out += describe_schema(t.params, indent + 4);
      for (const auto& x : t.published())
        out += fmt::format("{}{:<24} {:<20} {:<4} {}\n", j, x.name, expr::shape_text(x.shape),
                           expr::dtype_name(x.dtype), x.meaning);
    }
  }
  return out;
}

// A declared family built from its example section (what every
// declaration gets: invariants, tensors by kind, transforms).
std::shared_ptr<const Family> build_example(const DeclaredFamily& d) {
  const YAML::Node section = YAML::Load(d.example);
  const DeclaredFamilyContext context{"example", [](const YAML::Node& n, size_t) {
                                        return Mark{"<example>", n.Mark().line + 1, n.Mark().column + 1};
                                      }};
  return d.build(section, context);
}

std::string indented(const std::string& text, int indent) {
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    out += line.empty() ? "\n" : pad(indent) + line + "\n";
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

// Families a spec declares itself (`family: op` + an `op:` section).
std::string declared_text() {
  if (declared_families().empty()) return "";
  std::string out =
      "\nDeclared families (family: NAME plus a NAME: section that declares the kernel; docs/SPEC.md "
      "\"Ops declared in the spec\"):\n";
  for (const auto& d : declared_families()) {
    out += fmt::format("  {} — {}\n", d.family, d.description);
    out += fmt::format("    section {}:\n", d.key);
    for (const auto& k : d.keys) out += fmt::format("      {}: {}  — {}\n", k.key, k.form, k.doc);
    if (d.example.empty()) continue;
    out += fmt::format("    example (what the lists below are built from):\n      {}:\n", d.key);
    out += indented(d.example, 8);
    const auto example = build_example(d);
    out += fmt::format("    implementations (in process; plus any exec:/plugin: target):\n");
    for (const auto& i : example->implementations())
      out += fmt::format("      {:<24} {:<9} {}\n", i.name, impl_kind_name(i.kind), i.description);
    out += invariants_tensors_transforms_text(*example, 4);
  }
  return out;
}

}  // namespace

// The family's mutants as --mutants runs them: name, the profile only
// whose cases reach it ("" for none), description.
struct ListedMutant {
  std::string name, profile, description;
};
static std::vector<ListedMutant> listed_mutants(const Spec& spec) {
  std::vector<ListedMutant> out;
  for (const auto& impl : spec.family->implementations()) {
    if (impl.kind != ImplKind::mutant) continue;
    const auto own = spec.mutant_profiles.find(impl.name);
    out.push_back(
        {impl.name, own == spec.mutant_profiles.end() ? "" : own->second->profile, impl.description});
  }
  return out;
}

static std::string spec_outputs_text(const Spec& spec) {
  // The domain the spec draws from, after its profile and --domain: the keys
  // a --domain override names (prop_runner --list describes each).
  std::string out = fmt::format(
      "spec {} (family {}): domain (--domain '{{KEY: VALUE}}' overrides a key, '{{MAP: {{KEY: VALUE}}}}' one "
      "under a map)\n",
      spec.name, spec.family->name());
  const auto lines = spec.family->domain_lines(spec.domain);
  size_t key_width = 0;
  for (const auto& [key, value] : lines) key_width = std::max(key_width, key.size());
  for (const auto& [key, value] : lines)
    out += value.empty() ? fmt::format("  {}\n", key) : fmt::format("  {:<{}}  {}\n", key, key_width, value);
  const auto rules = spec.family->domain_rules();
  if (!rules.empty())
    out += fmt::format("  kept on every draw, whatever --domain says: {}\n", fmt::join(rules, "; "));
  const CaseSize largest = largest_case(spec);
  out += fmt::format("memory: the largest case needs ~{:.0f} MB ({}), of run.max_case_mb = {} (per job)\n",
                     std::ceil(largest.bytes / (1024.0 * 1024.0)), largest.dims, spec.run.max_case_mb);
  out += "each output of the target and the invariants that read it\n";
  size_t width = 6;
  const auto table = output_readers(spec);
  for (const auto& r : table) width = std::max(width, r.op.size() + 1 + r.output.size());
  for (const auto& r : table)
    out += fmt::format("  {:<{}}  {}\n", r.op + "." + r.output, width,
                       r.read_by.empty() ? "UNCHECKED" : join(r.read_by));
  std::vector<std::string> undeclared;
  for (const auto& use : spec.invariants)
    if (!invariant_reads(spec, use)) undeclared.push_back(use.name);
  if (!undeclared.empty()) out += "  reads not declared by: " + join(undeclared) + "\n";
  const auto unchecked = unchecked_outputs(spec);
  out += "  unchecked outputs: " + (unchecked.empty() ? std::string("none") : join(unchecked)) + "\n";
  const auto mutants = listed_mutants(spec);
  if (!mutants.empty()) out += "mutants (--mutants runs each, [P] under profile P; --target NAME runs one)\n";
  size_t name_width = 0;
  for (const auto& m : mutants)
    name_width = std::max(name_width, m.name.size() + (m.profile.empty() ? 0 : m.profile.size() + 3));
  for (const auto& m : mutants)
    out += fmt::format("  {:<{}}  {}\n", m.profile.empty() ? m.name : m.name + " [" + m.profile + "]",
                       name_width, printable(m.description, false));
  return out;
}

std::string list_text(const Spec* spec) {
  if (spec) return spec_outputs_text(*spec);
  std::string out = "Spec keys (every spec):\n" + describe_spec_keys();
  out +=
      "\nHealth checks (a run that fails one exits 2; run: {suppress_health_check: [NAME]} turns it off):\n";
  for (const auto& h : health_checks()) out += fmt::format("  {:<16} {}\n", h.name, h.description);
  out += "  and, which no spec can turn off:\n";
  for (const auto& h : unsuppressible_health_checks())
    out += fmt::format("  {:<16} {}\n", h.name, h.description);
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
        out += fmt::format("    op {:<23} entry point {}, outputs {}\n", op.op, op.symbol, join(op.outputs));
    }
    out += invariants_tensors_transforms_text(*f, 2);
  }
  out += declared_text();
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
        if constexpr (std::is_same_v<T, IntRange>) {
          // A constrained range as the text shows it ({range, multiple_of,
          // offsets} or {one_of}): [lo, hi] alone claimed every value in it.
          if (!x.one_of.empty()) return json{{"one_of", x.one_of}};
          if (x.multiple_of > 1) {
            json j = {{"range", json::array({x.lo, x.hi})}, {"multiple_of", x.multiple_of}};
            if (!x.offsets.empty()) j["offsets"] = x.offsets;
            return j;
          }
          return json::array({x.lo, x.hi});
        } else if constexpr (std::is_same_v<T, RealRange>) {
          return json::array({x.lo, x.hi});
        } else {
          return json(x);
        }
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
    if (!f.aliases.empty()) j["old_names"] = f.aliases;
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

json family_json(const Family& f) {
  json impls = json::array(), invariants = json::array(), ops = json::array(), transforms = json::array();
  for (const auto& i : f.implementations())
    impls.push_back({{"name", i.name},
                     {"kind", impl_kind_name(i.kind)},
                     {"device", i.device},
                     {"deterministic", i.deterministic},
                     {"description", i.description}});
  for (const auto& i : f.invariants()) {
    json inv = {{"name", i.name}, {"description", i.description}, {"params", schema_json(i.params)}};
    if (i.reads) inv["reads"] = *i.reads;
    if (!i.observes.empty()) inv["observes"] = i.observes;
    invariants.push_back(std::move(inv));
  }
  for (const auto& op : f.external_ops())
    ops.push_back({{"op", op.op}, {"symbol", op.symbol}, {"outputs", op.outputs}});
  for (const auto& t : f.transforms())
    transforms.push_back({{"name", t.name},
                          {"description", t.description},
                          {"params", schema_json(t.params)},
                          {"tensors", tensors_json(t.published())}});
  return json({{"name", f.name()},
               {"description", f.description()},
               {"domain", schema_json(f.domain_schema())},
               {"implementations", std::move(impls)},
               {"external_ops", std::move(ops)},
               {"invariants", std::move(invariants)},
               {"tensors", tensors_json(f.tensor_infos())},
               {"transforms", std::move(transforms)}});
}

}  // namespace

std::string list_json(const Spec* spec) {
  if (spec) {
    json outputs = json::array();
    for (const auto& r : output_readers(*spec))
      outputs.push_back({{"op", r.op}, {"output", r.output}, {"read_by", r.read_by}});
    json undeclared = json::array();
    for (const auto& use : spec->invariants)
      if (!invariant_reads(*spec, use)) undeclared.push_back(use.name);
    // As --domain takes it: a map's keys nested under it (an op: dtypes and dims, as text).
    json domain = json::object();
    for (const auto& [key, value] : spec->domain.all()) {
      json* at = &domain;
      size_t start = 0;
      for (size_t dot = key.find('.'); dot != std::string::npos; start = dot + 1, dot = key.find('.', start))
        at = &(*at)[key.substr(start, dot - start)];
      (*at)[key.substr(start)] = value_json(value);
    }
    if (spec->domain.all().empty())
      for (const auto& [key, value] : spec->family->domain_lines(spec->domain)) domain[key] = value;
    const CaseSize largest = largest_case(*spec);
    json mutants = json::array();
    for (const auto& m : listed_mutants(*spec))
      mutants.push_back({{"name", m.name}, {"profile", m.profile}, {"description", m.description}});
    json listed = {{"spec", spec->name},
                   {"family", spec->family->name()},
                   {"domain", std::move(domain)},
                   {"domain_rules", spec->family->domain_rules()},
                   {"largest_case_mb", largest.bytes / (1024.0 * 1024.0)},
                   {"largest_case", largest.dims},
                   {"max_case_mb", spec->run.max_case_mb},
                   {"outputs", std::move(outputs)},
                   {"reads_not_declared", std::move(undeclared)},
                   {"unchecked_outputs", unchecked_outputs(*spec)},
                   {"mutants", mutants}};
    if (!spec->profile.empty()) listed["profile"] = spec->profile;  // the domain is that profile's
    return listed.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  json families = json::array();
  for (const Family* f : Registry::instance().families()) families.push_back(family_json(*f));
  json declared = json::array();
  for (const auto& d : declared_families()) {
    json keys = json::array();
    for (const auto& k : d.keys) keys.push_back({{"key", k.key}, {"form", k.form}, {"doc", k.doc}});
    json entry = {{"name", d.family}, {"section", d.key}, {"description", d.description}, {"keys", keys}};
    if (!d.example.empty()) {
      const auto example = build_example(d);
      entry["example"] = d.example;
      entry["example_family"] = family_json(*example);
    }
    declared.push_back(std::move(entry));
  }
  json checks = json::array();
  for (const auto& h : health_checks())
    checks.push_back({{"name", h.name}, {"description", h.description}, {"suppressible", true}});
  for (const auto& h : unsuppressible_health_checks())
    checks.push_back({{"name", h.name}, {"description", h.description}, {"suppressible", false}});
  json functions = json::array();
  for (const auto& [name, doc] : expr::function_docs()) functions.push_back({{"name", name}, {"doc", doc}});
  const json out = {{"spec_keys", describe_spec_keys()},
                    {"health_checks", std::move(checks)},
                    {"families", std::move(families)},
                    {"declared_families", std::move(declared)},
                    {"functions", std::move(functions)}};
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace kprop
