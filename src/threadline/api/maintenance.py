"""``GET /v1/spaces/{space}/maintenance``: what the object's single alarm is doing; and
``GET /v1/spaces/{space}/schedules``: its schedules alone.

Lanes and the generation record come from the scheduling tables; faults, binding waits, pass
reports, schedules and host lanes come from :class:`~threadline.api.context.MaintenanceSources`,
which the maintenance package fills in.
"""

from __future__ import annotations

from threadline.api.context import ApiContext
from threadline.api.http import Request, Response, model_response
from threadline.api.models import (
    BindingWaitView,
    FaultView,
    GenerationView,
    HostLaneView,
    LaneView,
    MaintenanceView,
    NativeRetryView,
    PassReportView,
    ScheduleList,
    ScheduleView,
    SubscriberView,
)
from threadline.scheduling import read_state


async def maintenance(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """The maintenance report of this object (a few small reads, nothing written)."""
    state = read_state(ctx.storage)
    retry = state.pending_retry
    generation = GenerationView(
        dirty=state.dirty,
        processed=state.processed,
        caught_up=state.processed >= state.dirty and retry is None,
        nonterminal=state.nonterminal,
        last_served_thread=state.last_served_thread,
        last_recovered_thread=state.last_recovered_thread,
        last_after_native_lane=state.last_after_native_lane,
        binding_registry_key=state.binding_registry_key,
        retry=None if state.retry is None else NativeRetryView(
            generation=state.retry.generation, not_before=state.retry.not_before,
            native_only=state.retry.native_only, stalls=state.retry.stalls,
        ),
        recovery_event_seq=state.recovery_event_seq,
        recovery_event_ack=state.recovery_event_ack,
    )
    lanes = [
        LaneView(
            id=lane.id, state=lane.state.value, due_at=lane.due_at, not_before=lane.not_before,
            stalls=lane.stalls, revision=lane.revision, reported=lane.reported,
            cursor=lane.cursor,
        )
        for lane in ctx.due_queue.lanes()
    ]
    sources = ctx.maintenance
    report = MaintenanceView(
        alarm=await ctx.storage.get_alarm(),
        lanes=lanes,
        generation=generation,
        faults=[FaultView.model_validate(dict(item)) for item in sources.faults()],
        binding_waits=[
            BindingWaitView.model_validate(dict(item)) for item in sources.binding_waits()
        ],
        pass_reports=[
            PassReportView.model_validate(dict(item)) for item in sources.pass_reports()
        ],
        schedules=[ScheduleView.model_validate(dict(item)) for item in sources.schedules()],
        host_lanes=[HostLaneView.model_validate(dict(item)) for item in sources.host_lanes()],
        subscribers=[
            SubscriberView.model_validate(dict(item)) for item in sources.subscribers()
        ],
    )
    return model_response(200, report)


async def schedules(ctx: ApiContext, request: Request, params: dict[str, str]) -> Response:
    """The declared schedules (a row of each and of its lane; nothing written)."""
    listed = ScheduleList(schedules=[
        ScheduleView.model_validate(dict(item)) for item in ctx.maintenance.schedules()
    ])
    return model_response(200, listed)


__all__ = ["maintenance", "schedules"]
