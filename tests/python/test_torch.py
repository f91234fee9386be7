"""tensors="torch": inputs as torch tensors (zero-copy from NumPy; CUDA when present)."""
import pytest

import kprop
from conftest import load_example

torch = pytest.importorskip("torch")


def test_torch_softmax_topk_passes(corpus):
    seen = set()

    def softmax_topk(logits, k, **_):
        assert isinstance(logits, torch.Tensor)
        seen.add(logits.dtype)
        # Halves computed in f32, as the contract's kernels do; an all -inf row gives probabilities 0
        # (torch.softmax's NaN there is what this spec exists to catch).
        x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
        m = x.max(dim=-1, keepdim=True).values
        e = torch.exp(x - torch.where(m == -float("inf"), torch.zeros_like(m), m))
        z = e.sum(dim=-1, keepdim=True)
        probs = torch.where(z > 0, e / torch.where(z > 0, z, torch.ones_like(z)), torch.zeros_like(e))
        # Exact logit order, ties by ascending index (a stable sort), as the contract says.
        idx = torch.sort(-x, dim=-1, stable=True).indices[:, :k]
        return {"probs": torch.gather(probs, -1, idx), "indices": idx}

    result = kprop.check("softmax_topk", softmax_topk, seed=1, trials=100, corpus=corpus, tensors="torch")
    assert result.passed
    # bf16 cases arrive as torch.bfloat16 (a zero-copy view of the raw bits), f16 as torch.float16.
    assert {torch.float32, torch.float64, torch.float16, torch.bfloat16} <= seen


def test_torch_planted_bug_is_caught(corpus):
    def unsorted(logits, k, **_):
        probs = torch.softmax(logits, dim=-1)
        idx = torch.arange(k, device=logits.device).expand(logits.shape[0], k)
        return {"probs": torch.gather(probs, -1, idx), "indices": idx}

    with pytest.raises(kprop.Counterexample):
        kprop.check("softmax_topk", unsorted, seed=1, trials=100, corpus=corpus, tensors="torch")


def test_numpy_example_unchanged_under_torch_import(corpus):
    mod = load_example("softmax_topk")
    assert kprop.check("softmax_topk", mod.softmax_topk, seed=1, trials=5, corpus=corpus).passed


def test_torch_attention_with_torch_reference(corpus):
    """A torch target against a torch reference (reference=, called with float64 tensors)."""

    def attention(q, k, v, scale, mask, key_lengths=None, allowed=None, **_):
        dt = q.dtype
        q, k, v = (t.float() if dt in (torch.float16, torch.bfloat16) else t for t in (q, k, v))
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = (q @ k.transpose(-1, -2)) * scale
        nq, nk = s.shape[-2], s.shape[-1]
        i, j = torch.arange(nq)[:, None], torch.arange(nk)[None, :]
        if mask == kprop.MASK_CAUSAL:
            seen = (j <= i + nk - nq)[None, None]
        elif mask == kprop.MASK_KEY_PADDING:
            seen = (j[None] < key_lengths.long()[:, None, None])[:, None]
        elif mask == kprop.MASK_BOOLEAN:
            seen = (allowed != 0)[:, None]
        else:
            seen = torch.ones(1, 1, nq, nk, dtype=torch.bool)
        s = s.masked_fill(~seen, -float("inf"))
        m = s.amax(dim=-1, keepdim=True)
        empty = m == -float("inf")
        p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
        l = p.sum(dim=-1, keepdim=True)
        o = (p @ v) / torch.where(empty, torch.ones_like(l), l)
        lse = torch.where(empty, torch.full_like(m, -float("inf")), m + torch.log(l))[..., 0]
        return {"o": o, "lse": lse}

    dtypes = set()

    def reference(q, **kw):
        dtypes.add(q.dtype)
        return attention(q, **kw)

    result = kprop.check("attention_fwd", attention, reference=reference, seed=1, trials=60, corpus=corpus,
                         tensors="torch", invariants=["matches_reference", "masked_rows_zero"])
    assert result.passed and dtypes == {torch.float64}
