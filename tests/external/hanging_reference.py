"""A declared op's exec: reference that answers the handshake and then never
replies (tests/families/op/external_test.cpp): each call must end at the
run's case timeout (run.case_timeout_s, --case-timeout), not at the
transport's default."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kprop_worker  # noqa: E402


def sort(x, **_):
    time.sleep(3600)


if __name__ == "__main__":
    kprop_worker.serve({"sort": sort})
