"""Named-axis collectives for functions run by vtpu.shard_map, after jax.lax.

Inside a function mapped by ``vtpu.shard_map``, these communicate across the mesh
axes named by ``axis_name`` (a mesh axis name, or a tuple of them flattened
row-major in the given order). Every core of the axis group must call the same
collectives in the same order, as in JAX. Arrays are numpy arrays; the results
are new numpy arrays in the core's HBM. Outside shard_map they raise
``NameError("unbound axis name: ...")``, as JAX does.

dtypes: float32, float16, bfloat16 (as uint16 bit patterns, unless ml_dtypes is
installed), int32 and int64; float64 arrays are converted to float32 (vtpu has
no f64 arrays, as JAX without x64). The GIL is released during every collective.

Memory: psum, pmax and pmin read an operand where it is (a numpy array in host memory, or a
block already on the core) and allocate only their result on the core; the other collectives
copy an operand that is not yet on the core into its HBM first. Results are numpy arrays over
their block in the core's HBM (no copy), which stays allocated while the array lives.
"""

from vtpu._vtpu import _lax

__all__ = [
    "psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all", "ppermute",
    "axis_index", "axis_size",
]


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_tree(x):
    # One isinstance call: collectives are called often, and only the types _tree_map maps (or
    # their subclasses, which it leaves as leaves) pass.
    return isinstance(x, (tuple, list, dict))


def _tree_map(fn, x):
    # tuples, namedtuples, lists and dicts (nested) are pytrees, as in jax.tree_util; a namedtuple
    # keeps its type. Everything else is a leaf.
    t = type(x)
    if t is tuple or t is list:
        return t(_tree_map(fn, v) for v in x)
    if t is dict:
        return {k: _tree_map(fn, v) for k, v in x.items()}
    if _is_namedtuple(x):
        return t(*(_tree_map(fn, v) for v in x))
    return fn(x)


def psum(x, axis_name):
    """Compute an all-reduce sum on ``x`` over the mesh axis ``axis_name``.

    Args:
      x: an array, a Python scalar, or a pytree (tuple, namedtuple, list, dict) of them.
      axis_name: a mesh axis name or a tuple of them.

    Returns:
      Arrays with the same shapes as ``x``, each the sum over the axis group; the
      sums fold in rank order, so every core gets bit-identical results. A Python
      scalar ``c`` is the same on every core: ``psum(c, axis_name)`` is ``c``
      times the axis size (so ``psum(1, "x")`` is the size of axis ``"x"``).
    """
    if _is_tree(x):
        return _tree_map(lambda v: _lax.psum(v, axis_name), x)
    return _lax.psum(x, axis_name)


def pmean(x, axis_name):
    """Compute an all-reduce mean on ``x`` over the mesh axis ``axis_name``.

    ``psum(x, axis_name) / axis_size``. Floating arrays keep their dtype; integer
    arrays give float32 (true division, as JAX). Takes pytrees and Python scalars
    as ``psum``.
    """
    if _is_tree(x):
        return _tree_map(lambda v: _lax.pmean(v, axis_name), x)
    return _lax.pmean(x, axis_name)


def pmax(x, axis_name):
    """Compute an all-reduce max on ``x`` over the mesh axis ``axis_name``.

    Takes pytrees and Python scalars as ``psum``; returns arrays of ``x``'s shapes.
    """
    if _is_tree(x):
        return _tree_map(lambda v: _lax.pmax(v, axis_name), x)
    return _lax.pmax(x, axis_name)


def pmin(x, axis_name):
    """Compute an all-reduce min on ``x`` over the mesh axis ``axis_name``.

    Takes pytrees and Python scalars as ``psum``; returns arrays of ``x``'s shapes.
    """
    if _is_tree(x):
        return _tree_map(lambda v: _lax.pmin(v, axis_name), x)
    return _lax.pmin(x, axis_name)


def all_gather(x, axis_name, *, axis=0, tiled=False):
    """Gather ``x`` from every core of the axis group.

    Args:
      x: an array (or a pytree of arrays).
      axis_name: a mesh axis name or a tuple of them.
      axis: where the gathered dimension goes (negative counts from the end).
      tiled: if False, a new dimension of the axis size is inserted at ``axis``;
        if True, the blocks are concatenated along the existing ``axis``.

    Returns:
      The blocks of every core in axis-index order: shape ``x.shape`` with the
      axis size inserted at ``axis`` (untiled), or ``x.shape[axis]`` multiplied
      by it (tiled).
    """
    return _tree_map(lambda v: _lax.all_gather(v, axis_name, axis, tiled), x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, tiled=False):
    """Sum ``x`` over the axis group and scatter the result along a dimension.

    Core ``i`` (its ``axis_index``) gets the ``i``-th part of the sum along
    ``scatter_dimension``. Untiled, ``x.shape[scatter_dimension]`` must equal the
    axis size and that dimension is removed; tiled, it must be a multiple of the
    axis size and is divided by it.
    """
    return _tree_map(lambda v: _lax.psum_scatter(v, axis_name, scatter_dimension, tiled), x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, tiled=False):
    """Split ``x`` along ``split_axis``, send part ``j`` to core ``j``, and concatenate.

    Untiled, ``x.shape[split_axis]`` must equal the axis size: that dimension is
    removed, and one of the axis size (indexed by source core) is inserted at
    ``concat_axis``. Tiled, ``x.shape[split_axis]`` must be a multiple of the
    axis size: it is divided by it and ``x.shape[concat_axis]`` multiplied.
    """
    return _tree_map(lambda v: _lax.all_to_all(v, axis_name, split_axis, concat_axis, tiled), x)


def ppermute(x, axis_name, perm):
    """Send ``x`` from core to core by a permutation of axis indices.

    Args:
      x: an array (or a pytree of arrays).
      axis_name: a mesh axis name or a tuple of them.
      perm: ``(source, destination)`` pairs of axis indices; each index appears
        at most once as a source and once as a destination.

    Returns:
      On each core, the ``x`` of the core that sends to it, or zeros if none does.
    """
    return _tree_map(lambda v: _lax.ppermute(v, axis_name, perm), x)


def axis_index(axis_name):
    """This core's index along ``axis_name`` (a tuple flattens row-major), an int."""
    return _lax.axis_index(axis_name)


def axis_size(axis_name):
    """The size of the mesh axis ``axis_name`` (the product, for a tuple), an int."""
    return _lax.axis_size(axis_name)
