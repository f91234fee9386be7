#include <algorithm>
#include <memory>

#include "kprop/enum_names.h"
#include "kprop/family.h"
#include "kprop/search.h"

namespace kprop {

Verdict both(Verdict a, Verdict b) {
  if (a.outcome != Outcome::pass) return a;
  if (b.outcome != Outcome::pass) return b;
  // The larger ratio, and each output's ratio (kprop/search.h, for_output).
  double ratio = -1;
  std::vector<Measured> outputs;
  for (const Verdict* v : {&a, &b})
    for (const Measured& m : v->measured)
      if (m.name == kErrorRatio) {
        ratio = std::max(ratio, m.value);
      } else if (m.name.rfind(kErrorRatioOf, 0) == 0) {
        auto same =
            std::find_if(outputs.begin(), outputs.end(), [&](const Measured& o) { return o.name == m.name; });
        if (same == outputs.end())
          outputs.push_back(m);
        else
          same->value = std::max(same->value, m.value);
      }
  if (ratio < 0) return Verdict::pass();
  outputs.insert(outputs.begin(), {kErrorRatio, ratio});
  return Verdict::pass(std::move(outputs));
}

// ---- what derives from Family::build
// `this` outlives the generator: families are registered for the program's
// life or owned by the Spec that runs them.
std::vector<std::pair<std::string, std::string>> Family::domain_lines(const Values& domain) const {
  std::vector<std::pair<std::string, std::string>> lines;
  const auto walk = [&](const auto& self, const Schema& schema, const std::string& prefix,
                        const std::string& pad) -> void {
    for (const Field& f : schema) {
      if (f.kind == FieldKind::map) {
        lines.push_back({pad + f.key + ":", ""});
        self(self, f.children, prefix + f.key + ".", pad + "  ");
      } else if (domain.has(prefix + f.key)) {
        lines.push_back({pad + f.key, format_value(domain.all().at(prefix + f.key))});
      }
    }
  };
  walk(walk, domain_schema(), "", "");
  return lines;
}

rc::Gen<AnyCase> Family::generator(const Values& domain, Hollow hollow) const {
  // Shared, not captured by value: RapidCheck copies the generator's
  // callable for every case it draws, and a domain's map of values is dozens
  // of allocations (attention: ~3% of a whole run's CPU went to the copies).
  return rc::gen::exec([this, shared = std::make_shared<const Values>(domain),
                        hollow = std::make_shared<const Hollow>(std::move(hollow))] {
    RapidCheckDraw draw;
    return *hollow ? build_hollow(draw, *shared, *hollow) : build(draw, *shared);
  });
}

AnyCase Family::from_bytes(const uint8_t* data, size_t size, const Values& domain) const {
  // The first byte is the size (BytesDraw): an empty input is the smallest case.
  ByteReader reader(data, size);
  const uint8_t case_size = reader.byte();
  BytesDraw draw(reader, case_size);
  return build(draw, domain);
}

std::vector<uint8_t> Family::seed_bytes(const Values& domain, uint64_t seed, int size) const {
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  rc::gen::exec([this, domain, bytes] {
    bytes->assign(1, BytesDraw::kFullSize);  // the size byte; RapidCheck may run the body more than once
    RapidCheckDraw draw(bytes.get());
    return build(draw, domain);
  })(rc::Random(seed), size)
      .value();
  return *bytes;
}

const char* impl_kind_name(ImplKind kind) {
  static constexpr const char* kNames[] = {"reference", "optimized", "mutant", "external"};
  static_assert(std::size(kNames) == size_t(ImplKind::external) + 1);
  return enum_name(kind, kNames);
}

Impl Family::registered(size_t index) const {
  return {static_cast<int>(index), nullptr, implementations().at(index)};
}

Impl Family::external_impl(const std::string& name, std::shared_ptr<external::Transport> transport) const {
  if (external_ops().empty())
    throw InputError({}, std::string("family ") + this->name() + " has no external interface, so '" + name +
                             "' cannot be tested");
  return {-1,
          std::move(transport),
          {name, ImplKind::external, "kernel built elsewhere, through kprop's C ABI / worker protocol"}};
}

int Family::find_implementation(const std::string& name) const {
  const auto& impls = implementations();
  for (size_t i = 0; i < impls.size(); ++i)
    if (impls[i].name == name) return static_cast<int>(i);
  return -1;
}

int Family::find_invariant(const std::string& name) const {
  const auto& invs = invariants();
  for (size_t i = 0; i < invs.size(); ++i)
    if (invs[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<std::string> Family::implementation_names() const {
  std::vector<std::string> out;
  for (const auto& i : implementations()) out.push_back(i.name);
  return out;
}

std::vector<std::string> Family::invariant_names() const {
  std::vector<std::string> out;
  for (const auto& i : invariants()) out.push_back(i.name);
  return out;
}

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add(std::unique_ptr<Family> family) {
  families_.push_back(std::move(family));
}

const Family* Registry::find(const std::string& name) const {
  for (const auto& f : families_)
    if (f->name() == name) return f.get();
  return nullptr;
}

std::vector<const Family*> Registry::families() const {
  std::vector<const Family*> out;
  for (const auto& f : families_) out.push_back(f.get());
  std::sort(out.begin(), out.end(),
            [](const Family* a, const Family* b) { return std::string(a->name()) < b->name(); });
  return out;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto* f : families()) out.push_back(f->name());
  return out;
}

}  // namespace kprop
