"""A softmax_topk exec worker that takes 0.1 s a call and notes, in the file
named by argv[1], a reply it could not write (its pipe closed)."""
import os
import sys
import time

sys.path[:0] = [os.environ["KPROP_PYTHON_DIR"], os.environ["KPROP_EXAMPLES_DIR"]]
import kprop_worker  # noqa: E402
import softmax_topk  # noqa: E402

def slow(logits, k, **attrs):
    time.sleep(0.1)
    return softmax_topk.softmax_topk(logits, k, **attrs)

try:
    kprop_worker._serve({"softmax_topk": slow}, sys.stdin.buffer, kprop_worker._wire.protocol_stdout())
except BrokenPipeError:
    with open(sys.argv[1], "a") as f:
        f.write("a reply written to a closed pipe\n")
