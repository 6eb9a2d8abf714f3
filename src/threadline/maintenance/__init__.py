"""The maintenance pass that one alarm event runs, and the lanes it serves (DESIGN §4)."""

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
