"""What makes the test suite itself faster must not change what the tests see (issue 50)."""

import gc
import weakref


class _Node:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it


def test_the_collection_is_frozen_and_the_tests_garbage_is_still_collected():
    # tests/conftest.py freezes what the collection made (pytest_collection_finish)
    assert gc.isenabled() and gc.get_freeze_count() > 10_000
    node = _Node()
    gone = weakref.ref(node)
    del node
    gc.collect()
    assert gone() is None
