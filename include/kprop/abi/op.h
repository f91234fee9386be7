/* op: kernels whose contract is declared in the spec (`family: op`, an `op:`
 * section; docs/SPEC.md "Ops declared in the spec"). Included by kprop/abi.h, or on its own.
 *
 * The tensors and attrs are the ones the spec declares, so there is no
 * per-op struct: one generic entry point per op, named after op.name (the
 * spec's name by default) with every character other than a letter, digit or
 * '_' written as '_':
 *
 *   KPROP_EXPORT int kprop_op_rmsnorm(const kprop_op_args* args, char* error, size_t error_size);
 *
 * Inputs arrive in the declaration's order with its names, dtypes and shapes
 * (dims resolved); outputs are allocated by kprop with the declared dtype and
 * shape and poisoned (NaN or garbage until the kernel writes them). Look them
 * up by name with kprop_op_input / kprop_op_output, and attrs with
 * kprop_op_attr_value (numbers; integer attrs hold exact integers) or
 * kprop_op_attr_text (named choices, e.g. "gelu"). The same attrs
 * come as a JSON object in attrs_json for kernels that already parse JSON.
 * Every pointer in args lives for the duration of the call only.
 */
#ifndef KPROP_ABI_OP_H
#define KPROP_ABI_OP_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kprop_named_tensor {
  const char* name;
  kprop_tensor tensor;
} kprop_named_tensor;

typedef struct kprop_op_attr {
  const char* name;
  double value;       /* an integer attr holds an exact integer; 0 for a named choice */
  int32_t is_integer; /* 1 for an attr declared `int: true` */
  int32_t reserved;
  const char* text; /* a named choice ({one_of: [gelu, tanh]}): its name; NULL for numbers */
} kprop_op_attr;

typedef struct kprop_op_args {
  const char* op; /* op.name */
  int32_t n_inputs;
  int32_t n_outputs;
  int32_t n_attrs;
  int32_t reserved;
  const kprop_named_tensor* inputs;
  const kprop_named_tensor* outputs; /* write through outputs[i].tensor.data */
  const kprop_op_attr* attrs;
  const char* attrs_json; /* the attrs again, as a JSON object */
} kprop_op_args;
typedef int (*kprop_op_fn)(const kprop_op_args* args, char* error, size_t error_size);

/* The input / output named `name`, or NULL when the op has none. */
static inline const kprop_tensor* kprop_op_input(const kprop_op_args* a, const char* name) {
  for (int32_t i = 0; i < a->n_inputs; ++i)
    if (strcmp(a->inputs[i].name, name) == 0) return &a->inputs[i].tensor;
  return NULL;
}
static inline const kprop_tensor* kprop_op_output(const kprop_op_args* a, const char* name) {
  for (int32_t i = 0; i < a->n_outputs; ++i)
    if (strcmp(a->outputs[i].name, name) == 0) return &a->outputs[i].tensor;
  return NULL;
}
/* The named choice of attr `name`, or NULL when the op has no such attr or
 * it is a number. */
static inline const char* kprop_op_attr_text(const kprop_op_args* a, const char* name) {
  for (int32_t i = 0; i < a->n_attrs; ++i)
    if (strcmp(a->attrs[i].name, name) == 0) return a->attrs[i].text;
  return NULL;
}
/* 1 and *value set when the op has a numeric attr `name`, else 0. */
static inline int kprop_op_attr_value(const kprop_op_args* a, const char* name, double* value) {
  for (int32_t i = 0; i < a->n_attrs; ++i)
    if (strcmp(a->attrs[i].name, name) == 0 && !a->attrs[i].text) {
      *value = a->attrs[i].value;
      return 1;
    }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_OP_H */
