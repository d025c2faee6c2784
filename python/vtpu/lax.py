"""Named-axis collectives for functions run by vtpu.shard_map, after jax.lax."""
