"""The maintenance pass that one alarm event runs, and the lanes it serves (DESIGN §4).

:class:`Maintenance` (``maintenance_pass.py``) runs a pass through its phases, each a module of
its own (``pass_begin``, ``pass_recovery``, ``native_dispatch``, ``pass_checkpoint``,
``pass_lanes``, ``pass_finish``); the :class:`LaneRunner` gives each due lane one bounded wave, and
every lane's work lives in a module named after it (``publication_lane``, ``message_lane``, ...).
"""

from threadline.maintenance.lane_wave import Wave, current_wave
from threadline.maintenance.lanes import LaneHandler, LaneRunner, WaveOutcome, WaveResult
from threadline.maintenance.maintenance_pass import Maintenance, MaintenanceParts
from threadline.maintenance.report import PassPhase, PassReport, PassReports

__all__ = [
    "LaneHandler",
    "LaneRunner",
    "Maintenance",
    "MaintenanceParts",
    "PassPhase",
    "PassReport",
    "PassReports",
    "Wave",
    "WaveOutcome",
    "WaveResult",
    "current_wave",
]
