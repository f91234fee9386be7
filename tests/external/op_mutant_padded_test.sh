#!/usr/bin/env bash
# op_mutant_padded_test.sh PROP_RUNNER OP_COPY_SPEC PLUGIN: PLUGIN reads x as
# if contiguous. (1) As --target plugin: it passes contiguous tensors and,
# under --profile padded, fails copies_x (exit 1): the padding it copies is
# not the outputs' poison (it was reported as an output never written, exit
# 3). (2) Listed in the spec's op.mutants under the padded profile, it gets
# padded tensors too: --mutants kills it (it read UNREACHED [padded], as a
# mutant is opened by the declaration, which never padded), and
# --profile padded --target NAME fails (it PASSED).
runner="$1" spec="$2" plugin="$3"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "op_mutant_padded_test: $*"; exit 1; }
run() {  # expected exit, then prop_runner's arguments
  local want="$1"
  shift
  out=$(cd "$dir" && "$runner" --seed 1 --no-corpus "$@" 2>&1)
  rc=$?
  printf '%s\n' "$out"
  [ "$rc" -eq "$want" ] || fail "exit $rc, expected $want: $*"
}
run 0 --spec "$spec" --target "plugin:$plugin"
run 1 --spec "$spec" --profile padded --target "plugin:$plugin"
printf '%s' "$out" | grep -q "Counterexample: copies_x broken" || fail "padded: copies_x not broken"
printf '%s' "$out" | grep -q "never written" && fail "padded: read as an output never written"
# The spec with the plugin as a mutant of the padded profile.
sed -e "s|^  reference: {y: x}|  reference: {y: x}\n  mutants: {reads_contiguous: \"plugin:$plugin\"}|" \
    -e "s|^    run: {padded_tensors: true}|    run: {padded_tensors: true}\n    mutants: [reads_contiguous]|" \
    "$spec" > "$dir/copy.yaml"
grep -q "mutants: \[reads_contiguous\]" "$dir/copy.yaml" || fail "the spec was not rewritten"
run 0 --spec "$dir/copy.yaml" --mutants
printf '%s' "$out" | grep -Eq "^  reads_contiguous +killed +copies_x \[padded\]" || fail "--mutants: not killed under padded"
run 1 --spec "$dir/copy.yaml" --profile padded --target reads_contiguous
printf '%s' "$out" | grep -q "Counterexample: copies_x broken" || fail "--target reads_contiguous: copies_x not broken"
run 0 --spec "$dir/copy.yaml" --target reads_contiguous
# (3) --padded-tensors reaches a mutant listed under a profile that does not
# pad (it runs under that profile's spec: it read UNREACHED [wide]).
sed -e "s|^  reference: {y: x}|  reference: {y: x}\n  mutants: {reads_contiguous: \"plugin:$plugin\"}|" \
    -e "s|^    run: {padded_tensors: true}|    run: {padded_tensors: true}\n  wide:\n    domain: {T: [2, 8]}\n    mutants: [reads_contiguous]|" \
    "$spec" > "$dir/copy_wide.yaml"
grep -q "mutants: \[reads_contiguous\]" "$dir/copy_wide.yaml" || fail "the wide spec was not rewritten"
run 1 --spec "$dir/copy_wide.yaml" --mutants
run 0 --spec "$dir/copy_wide.yaml" --mutants --padded-tensors
printf '%s' "$out" | grep -Eq "^  reads_contiguous +killed +copies_x \[wide\]" || fail "--padded-tensors: not killed under wide"
echo "op_mutant_padded_test: ok"
