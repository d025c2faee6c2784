"""The fragmentation stress harness of ``vtpu stress``.

    import vtpu
    report = vtpu.stress.run(cores=2, allocators="bfc,tlsf", auto_defragment="on",
                             load="off", events=20000, hbm_bytes="1G")
    for r in report["runs"]:
        print(r["allocator"], r["summary"]["peak_reserved_bytes"])

``run`` takes the flags of ``vtpu stress`` as keywords (dashes as underscores) and returns the
dict that ``vtpu stress ... --json FILE`` writes; the policies run side by side on the same
per-core event streams.
"""

from vtpu._vtpu import stress as _s

run = _s.run
exit_code = _s.exit_code
write_html = _s.write_html

__all__ = ["run", "exit_code", "write_html"]
