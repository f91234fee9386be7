// The `op` family: a kernel declared in the spec (kernels/op/op.h). One
// OpFamily per spec, built by the loader from the spec's `op:` section
// (kprop::DeclaredFamily); it reuses FamilyDef for trials, named tensors,
// transforms and external targets, and overrides what depends on the
// declaration (generation, decoding, tensor names, transform parameters).
#pragma once

#include <memory>

#include "kernels/op/op.h"
#include "kprop/family.h"
#include "kprop/spec.h"

namespace kprop::op {

// The static side FamilyDef needs. Functions that depend on the
// declaration read it from the case (Case::decl); those that cannot
// (build, from_yaml, max_case_bytes, tensor_infos) are overridden by OpFamily
// and unused here; domain_schema is empty (the domain is the `op:` section).
struct Traits {
  KPROP_FAMILY_TRAITS(
      op::Case, op::Result, "op",
      "a kernel declared in the spec: dims, attrs, inputs, outputs and reference expressions (op:)");
  static uint64_t content_hash(const Case& c);  // without the YAML tree (FamilyDef::content_hash)
  KPROP_FAMILY_TENSORS();
  // scale, shift, then permute_dim0, slice_dim0, .. permute_dim15, slice_dim15
  // (a permutation / a contiguous run of indices along decl dim k);
  // OpFamily::transforms() gives the same order with per-declaration names and params.
  KPROP_FAMILY_TRANSFORMS();
};

constexpr size_t kMaxDims = 16;

class OpFamily final : public FamilyDef<Traits> {
 public:
  explicit OpFamily(std::shared_ptr<const Decl> decl);
  const Decl& decl() const { return *decl_; }
  // Most steps take one element of an input toward 0, 1 or fewer digits.
  bool shrink_resumes() const override { return true; }

  // Cases come from the declaration, not the (empty) domain.
  AnyCase build(Draw& draw, const Values&) const override { return box(build_case(draw)); }
  AnyCase from_yaml(const YAML::Node& node) const override;
  CaseSize max_case_bytes(const Values& domain) const override;
  std::vector<std::pair<std::string, std::string>> domain_lines(const Values& domain) const override;
  std::vector<std::string> domain_rules() const override;
  const expr::TensorInfos& tensor_infos() const override { return infos_; }
  const std::vector<TransformInfo>& transforms() const override { return transforms_; }
  // `reference` with op.reference: exec:/plugin: is that program.
  std::string reference_shown(const std::string& name) const override;

  Case build_case(Draw& draw) const;

 private:
  std::shared_ptr<const Decl> decl_;
  expr::TensorInfos infos_;
  std::vector<TransformInfo> transforms_;
};

// Parses and checks an `op:` section (errors: InputError at file:line:col).
std::shared_ptr<const Decl> parse_decl(const YAML::Node& section, const DeclaredFamilyContext& context);

// Case surgery shared by shrinking, invariants and transforms: keep the
// indices `keep` (in order) of dim `dim` in every input that has it. Index
// tensors and masks stay valid: ids bounded by `dim` are remapped (an id
// pointing at kept index keep[p] becomes p, one pointing at a dropped index
// 0), permutations re-ranked, causal masks rebuilt, padding masks made a
// valid prefix again (normalize_structured). With `changed`: "" when the
// case needed none of that (every index tensor and mask, gathered, is still
// valid for its kind and no id pointed at a dropped index: the result is
// the case's own indices, faithfully), else why not.
Case keep_indices(const Case& c, size_t dim, const std::vector<int64_t>& keep,
                  std::string* changed = nullptr);
// Makes every index tensor and mask of `c` valid for its kind again (a
// no-op on a valid case).
void normalize_structured(Case& c);
// "" when every index tensor and mask satisfies its kind, else why not
// (check_input: input i alone; its values need only be decoded and dims set).
std::string check_structured(const Case& c);
std::string check_input(const Case& c, size_t i);
// Gathers indices `keep` along every axis of `shape` named dim `dim`.
std::vector<double> gather(const std::vector<double>& data, const std::vector<int64_t>& extents,
                           const std::vector<std::string>& shape, const std::string& dim,
                           const std::vector<int64_t>& keep);

void register_invariants(OpFamily& family);
void register_external(OpFamily& family);
// The plugin entry point of op `op_name`: kprop_op_ + the name, every
// character other than a letter, digit or '_' written as '_'.
std::string plugin_symbol(const std::string& op_name);
// A program the spec names: `target` (exec:COMMAND | plugin:PATH) started,
// on its first call, from folder `dir` and asked for op `op_name`; `role`
// ("reference", "mutant NAME") and `where` (the spec's file:line:col) name
// it in its failures.
std::shared_ptr<const ExternalReference> external_reference(const std::string& target, const std::string& dir,
                                                            const std::string& op_name,
                                                            const std::string& where,
                                                            const std::string& role = "reference");

}  // namespace kprop::op
