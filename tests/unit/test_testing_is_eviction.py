from threadline.errors import Evicted
from threadline.testing import is_eviction


def test_an_eviction_is_recognised_alone_or_nested_in_groups() -> None:
    assert is_eviction(Evicted("lost"))
    nested = BaseExceptionGroup("outer", [ValueError("x"), ExceptionGroup("inner", [
        KeyError("k")]), BaseExceptionGroup("deep", [Evicted("lost")])])
    assert is_eviction(nested)


def test_other_failures_are_not_evictions() -> None:
    assert not is_eviction(ValueError("x"))
    assert not is_eviction(ExceptionGroup("g", [ValueError("x"), KeyError("k")]))
