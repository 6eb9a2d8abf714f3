"""The begin of a maintenance pass: the read that tells a caught-up pass from an actionable one.

:func:`begin` reads the earliest due lane and, unless that one row settles it, the generation
record (reconciling the agent registry when its key changed) and the lanes due. For an
actionable pass it also sets the native lane's crash fallback. The orchestrator runs it in one
transaction under the gate's snapshot.
"""

from __future__ import annotations

from threadline.maintenance.pass_context import PassContext
from threadline.maintenance.pass_state import _Observed
from threadline.scheduling import NATIVE, Lane, backoff_ms
from threadline.scheduling import state as generation


def begin(ctx: PassContext, now: int, observed: _Observed) -> list[Lane]:
    """Read what the pass begins with into ``observed``; return the lanes due at ``now``."""
    key = ctx._runtime.binding_registry_key
    # One indexed row answers every question while nothing is due and this incarnation
    # knows the generation is processed (no advance since it last read or certified it:
    # only the gate advances it, and counts each advance): the earliest lane is the next
    # due (for the final decision) and, being later than now, says no lane is, the native
    # lane included. The generation record is read otherwise.
    observed.earliest = ctx._queue.next()
    nothing_due = observed.earliest is None or observed.earliest > now
    if (nothing_due and key == ctx._registry_key
            and ctx._processed_at == ctx._gate.generations):
        observed.nonterminal = ctx._nonterminal
        return []
    current = generation.read_state(ctx._storage)
    if current.binding_registry_key != key:
        ctx._bindings.reconcile(key, stored=current.binding_registry_key)
        current = generation.read_state(ctx._storage)
        # The reconcile's own commit is not a producer racing the pass.
        observed.revision = ctx._gate.revision
        observed.earliest = ctx._queue.next()
        nothing_due = observed.earliest is None or observed.earliest > now
    ctx._registry_key = key
    ctx._note_processed(current)
    due = [] if nothing_due else ctx._queue.due(now)
    native = next((lane for lane in due if lane.id == NATIVE), None)
    observed.generation = current.dirty
    observed.retry_found = current.retry
    observed.retry_stale = observed.retry_recorded and not current.retry_defers(now)
    observed.nonterminal = ctx._nonterminal = current.nonterminal
    observed.last_served = current.last_served_thread
    observed.last_recovered = current.last_recovered_thread
    observed.actionable = not current.caught_up(native, now)
    if observed.actionable:
        # Crash fallback: should this incarnation be lost mid-pass, the native lane is
        # due again after a backoff, not at once and forever. The checkpoint replaces it.
        retry = current.pending_retry
        stalls = 0 if retry is None else retry.stalls
        observed.fallback = now + backoff_ms(stalls, ctx._config, ctx._rng)
        ctx._queue.checkpoint_native(observed.fallback)
    return due
