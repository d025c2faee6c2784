from typing import Any, Dict, Optional, Sequence, Union

_Size = Union[int, str]

__all__ = ["run", "exit_code", "write_html"]

def run(
    *,
    cores: int = ...,
    workload: Optional[str] = ...,
    trace: Optional[str] = ...,
    allocators: Union[str, Sequence[str]] = ...,
    auto_defragment: Union[str, Sequence[str]] = ...,
    hbm_bytes: _Size = ...,
    seed: Optional[int] = ...,
    events: Optional[int] = ...,
    layers: Optional[int] = ...,
    activation_bytes: Optional[_Size] = ...,
    weight_bytes: Optional[_Size] = ...,
    live: Optional[int] = ...,
    max_requests: Optional[int] = ...,
    kv_block_bytes: Optional[_Size] = ...,
    max_blocks: Optional[int] = ...,
    load: Union[str, bool] = ...,
    collective_rounds: Optional[int] = ...,
    bucket_bytes: Optional[_Size] = ...,
    cross_core_frees: Optional[int] = ...,
    cross_core_free_lag: Optional[int] = ...,
    backing: bool = ...,
    stop_on_oom: bool = ...,
    capacity_search: str = ...,
    capacity_search_max: Optional[_Size] = ...,
) -> Dict[str, Any]: ...
def exit_code(report: Dict[str, Any]) -> int: ...
def write_html(report: Dict[str, Any], path: str) -> None: ...
