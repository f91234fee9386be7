/* dflash: draft-tree verification, one cycle of speculative decoding
 * (docs/FAMILIES.md; kernels/dflash/dflash.h). Included by kprop/abi.h, or on its own.
 *
 * The kernel under test is the verification pipeline, not the model: kprop
 * keeps its own tiny target LM. A cycle is two ops, as a serving engine splits
 * them around the target model's forward pass:
 *
 *   1. "dflash.tree_inputs": the draft tree -> position ids and attention mask;
 *   2. kprop runs its model on context ++ tree tokens with exactly that mask
 *      and those position ids (the context part stays causal, kprop's own)
 *      and keeps the logits rows of the context's last token and every node;
 *   3. "dflash.verify": the tree and those logits -> the accepted root path
 *      and the bonus token. kprop emits tokens[accepted] ++ [bonus] and
 *      appends them to the context of the next cycle.
 *
 * Draft tree of N nodes in topological order: tokens t[i], parents p[i] in
 * {-1} ∪ [0, i-1] (-1: a root), depth d(i) = 1 for a root and d(p[i]) + 1
 * otherwise; sibling tokens are distinct. N may be 0 (a shrunk case): the
 * verify op then still emits the bonus token from row 0.
 *
 * Integer outputs are pre-filled with 0x5A bytes (1515870810 in i32): an
 * `accepted` entry or a `bonus` the kernel never writes, the -1 tail
 * included, is no node or token, and the call fails as an error. */
#ifndef KPROP_ABI_DFLASH_H
#define KPROP_ABI_DFLASH_H

/* The tensor, status and dtype types; this header is complete on its own. */
#include "kprop/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Op "dflash.tree_inputs", entry point kprop_dflash_tree_inputs.
 * Node i has position id P + d(i) - 1 and attends to the whole context
 * (columns 0..P-1), its ancestors and itself (column P + j for tree node j):
 *   mask[i][j]     = 1                              for j < P
 *   mask[i][P + j] = 1 iff j is i or an ancestor of i, else 0.
 * Every mask entry is written as 0 or 1. */
typedef struct kprop_dflash_tree_inputs_args {
  kprop_tensor tokens;    /* [N] i32 draft tokens (for kernels that need them; not needed for the outputs) */
  kprop_tensor parents;   /* [N] i32, -1 for a root */
  int32_t context_length; /* P >= 1: tokens already in the sequence before the tree */
  int32_t reserved;
  kprop_tensor position_ids; /* out: [N] i32 */
  kprop_tensor mask;         /* out: [N, P + N] u8, row i = what node i attends to */
} kprop_dflash_tree_inputs_args;
typedef int (*kprop_dflash_tree_inputs_fn)(const kprop_dflash_tree_inputs_args* args, char* error,
                                           size_t error_size);

/* Op "dflash.verify", entry point kprop_dflash_verify. Greedy verification,
 * parent-indexed: the prediction for a root is argmax logits[0] (the context's
 * last row), for a child of node p it is argmax logits[1 + p]; argmax takes
 * the lowest index on exact ties, comparing the f64 values as given (logits
 * rounded to f32 first turn near-ties into exact ties: kprop's model draws
 * rows where two logits differ by a few f64 ulps). Starting above the roots,
 * accept the first child (lowest index) whose token equals the prediction,
 * descend into it and repeat; stop when no child matches. Nodes under a
 * rejected node are never accepted. The bonus token is the prediction at the
 * last accepted node (argmax logits[1 + last]) or, when none is accepted,
 * argmax logits[0]. */
typedef struct kprop_dflash_verify_args {
  kprop_tensor tokens;   /* [N] i32 */
  kprop_tensor parents;  /* [N] i32, -1 for a root */
  kprop_tensor logits;   /* [N + 1, V] f64: row 0 = the context's last token, row 1 + i = node i */
  kprop_tensor accepted; /* out: [N] i32, the accepted nodes root first, then -1 up to N */
  kprop_tensor bonus;    /* out: [1] i32, the bonus token in [0, V) (-1: none, a bug the invariants catch) */
} kprop_dflash_verify_args;
typedef int (*kprop_dflash_verify_fn)(const kprop_dflash_verify_args* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KPROP_ABI_DFLASH_H */
