"""What lives from start to stop is frozen out of the cyclic collector's walks once ready."""

from __future__ import annotations

import gc

from proxy import server


def test_ready_freezes_the_startup_heap_then_calls_back() -> None:
    gc.unfreeze()
    called = []
    try:
        server._ready("proxy", called.append)  # type: ignore[arg-type]
        assert gc.get_freeze_count() > 0
        assert called == ["proxy"]
    finally:
        gc.unfreeze()  # the test process keeps collecting as before
