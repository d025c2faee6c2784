"""One HBM arena with a chosen allocator policy, and trace replay.

    from vtpu.memory import Arena
    arena = Arena("1K", policy="bfc")
    a, b, c = (arena.alloc(256) for _ in range(3))
    b.free()
    arena.fragmentation        # 1 - largest free block / total free: 1 - 256/512 = 0.5
    arena.stats()["bytes_in_use"]  # 512

An allocation that does not fit raises vtpu.ResourceExhaustedError (a MemoryError) carrying the
out-of-memory report as ``.report`` and as attributes (``requested_bytes``, ``bytes_in_use``,
``largest_free_block_bytes``, ...). ``replay_trace`` replays a vtpu trace (the PyTorch traces of
data/traces) on one arena and returns the stress harness's metrics.
"""

from vtpu._vtpu import memory as _m

Arena = _m.Arena
Buffer = _m.Buffer
POLICIES = _m.POLICIES
replay_trace = _m.replay_trace

__all__ = ["Arena", "Buffer", "POLICIES", "replay_trace"]
