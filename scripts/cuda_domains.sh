# Sourced by gpu_check.sh and cuda_sanitize.sh: the --domain a spec's `cuda`
# run narrows to, so that it draws only cases the cuda target takes.
#
# attention's CUDA backward takes f32 and f64 cases only; the forward takes
# f16/bf16 only at D = 64 or 128, which the default domain (D up to 24) never
# draws. Unnarrowed, nearly half the cases are declined, and the invariants
# that observe only f16/bf16 stores (o_rounded_to_nearest,
# dv_rounded_to_nearest, dq_dk_rounded_to_nearest) check nothing: the run
# fails its `discarded` health check. Narrowed, those invariants are reported
# n/a with the reason, never passed. The forward's f16/bf16 cases are checked
# by its `gpu` profile run (gpu_check.sh), where the tensor-core kernel takes
# them and o_rounded_to_nearest observes them.
#
#   cuda_domain SPEC_NAME  -> the --domain text, or nothing (the spec's own)
cuda_domain() {
  case "$1" in
    attention_fwd | attention_bwd) echo "{dtypes: [f32, f64]}" ;;
  esac
}
