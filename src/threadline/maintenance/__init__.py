"""The maintenance pass that one alarm event runs."""

from threadline.maintenance.maintenance import run_pass

__all__ = ["run_pass"]
