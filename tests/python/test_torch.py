"""tensors="torch": inputs as torch tensors (zero-copy from NumPy; CUDA when present)."""
import pytest

import kprop
from conftest import load_example

torch = pytest.importorskip("torch")


def test_torch_softmax_topk_passes(corpus):
    def softmax_topk(logits, k, **_):
        assert isinstance(logits, torch.Tensor)
        x = logits.double()
        probs = torch.softmax(x, dim=-1).to(logits.dtype)
        # Stable ordering: exact logit order, ties by ascending index, as the contract says.
        idx = torch.stack([torch.tensor(sorted(range(x.shape[-1]), key=lambda j: (-float(row[j]), j)))
                           for row in x.cpu()]).to(logits.device)[:, :k]
        return {"probs": torch.gather(probs, -1, idx), "indices": idx}

    result = kprop.check("softmax_topk", softmax_topk, seed=1, trials=20, corpus=corpus, tensors="torch")
    assert result.passed


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
