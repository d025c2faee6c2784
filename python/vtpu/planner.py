"""The auto-sharding planner of ``vtpu plan``.

    import vtpu
    result = vtpu.planner.plan("mlp.json", mesh="2x4")
    result["winner"], result["plan"]   # the chosen strategy and its plan file

``plan`` takes the flags of ``vtpu plan`` as keywords (dashes as underscores) and returns the
dict that ``vtpu plan MODEL --json`` prints.
"""

from vtpu._vtpu import planner as _p

plan = _p.plan

__all__ = ["plan"]
