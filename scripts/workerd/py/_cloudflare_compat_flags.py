"""Stand-in for workerd's internal ``_cloudflare_compat_flags`` module.

In production workerd exposes every compatibility flag as a module attribute. The local
runtime enables none of the Python-specific ones, so every flag reads as False.
"""


def __getattr__(name: str) -> bool:
    if name.startswith("__"):
        raise AttributeError(name)
    return False
