"""A worker for tests/external/op_copy.yaml whose function is wired wrong:
it names its input `inp`, not `x` (tests/external/worker_wiring_test.sh);
with --import, one that imports a module missing here."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402


def copy(inp):
    return {"y": inp.copy()}


def copy_with_torch(x):
    import kprop_test_no_such_module  # noqa: F401  (a CI image without torch)
    return {"y": x.copy()}


def copy_with_a_missing_name(x):
    from numpy import kprop_test_no_such_name  # noqa: F401  (the code's error, on every machine)
    return {"y": x.copy()}


if __name__ == "__main__":
    kprop_worker.serve({"copy": copy_with_torch if "--import" in sys.argv
                        else copy_with_a_missing_name if "--import-name" in sys.argv else copy})
