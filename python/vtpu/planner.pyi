from typing import Any, Dict, Optional, Union

__all__ = ["plan"]

def plan(
    model: str,
    *,
    mesh: str = ...,
    axes: Optional[str] = ...,
    hardware: str = ...,
    hbm_bytes: Optional[Union[int, str]] = ...,
    batch: Optional[int] = ...,
    any_strategy: bool = ...,
    pad_arrays: bool = ...,
    strategy: Optional[str] = ...,
    check_fit: bool = ...,
) -> Dict[str, Any]: ...
