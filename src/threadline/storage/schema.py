"""The database schema as an append-only list of migrations.

``MIGRATIONS[n]`` takes a database from version ``n`` to ``n + 1``; the version lives in the
one-row table ``tl_meta``. Never edit or reorder a published entry: add a new one. Each entry is
a tuple of single statements, so it runs unchanged on sqlite3 and on workerd, inside one
transaction with the version bump.
"""

from __future__ import annotations

from threadline.errors import SchemaError, StorageError
from threadline.storage.port import Storage

_SCHEDULING = (
    # The due queue: one row per maintenance lane (DESIGN §3).
    """CREATE TABLE tl_lanes (
        id TEXT PRIMARY KEY NOT NULL,
        due_at INTEGER,
        not_before INTEGER NOT NULL DEFAULT 0 CHECK (not_before >= 0),
        revision INTEGER NOT NULL DEFAULT 0 CHECK (revision >= 0),
        stalls INTEGER NOT NULL DEFAULT 0 CHECK (stalls >= 0),
        state TEXT NOT NULL DEFAULT 'idle' CHECK (state IN ('idle', 'due', 'parked')),
        reported INTEGER NOT NULL DEFAULT 0 CHECK (reported IN (0, 1)),
        cursor INTEGER NOT NULL DEFAULT 0 CHECK (cursor >= 0),
        CHECK ((state = 'idle') = (due_at IS NULL))
    ) WITHOUT ROWID""",
    "CREATE INDEX tl_lanes_due ON tl_lanes (due_at) WHERE due_at IS NOT NULL",
    # The generation record: one row (DESIGN §3, "Generations").
    """CREATE TABLE tl_maintenance (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        dirty INTEGER NOT NULL CHECK (dirty >= 0),
        processed INTEGER NOT NULL CHECK (processed >= 0 AND processed <= dirty),
        nonterminal INTEGER NOT NULL DEFAULT 0 CHECK (nonterminal >= 0),
        last_served_thread TEXT,
        last_recovered_thread TEXT,
        last_after_native_lane TEXT,
        binding_registry_key TEXT,
        retry_generation INTEGER CHECK (retry_generation IS NULL OR retry_generation >= 0),
        retry_not_before INTEGER,
        retry_native_only INTEGER CHECK (retry_native_only IS NULL OR retry_native_only IN (0, 1)),
        retry_stalls INTEGER CHECK (retry_stalls IS NULL OR retry_stalls BETWEEN 0 AND 30),
        recovery_event_seq INTEGER NOT NULL DEFAULT 0 CHECK (recovery_event_seq >= 0),
        recovery_event_ack INTEGER NOT NULL DEFAULT 0
            CHECK (recovery_event_ack >= 0 AND recovery_event_ack <= recovery_event_seq),
        CHECK ((retry_generation IS NULL) = (retry_not_before IS NULL)),
        CHECK ((retry_generation IS NULL) = (retry_stalls IS NULL)),
        CHECK ((retry_generation IS NULL) = (retry_native_only IS NULL))
    )""",
    # A new object starts dirty so its first pass classifies any existing work.
    "INSERT INTO tl_maintenance (id, dirty, processed) VALUES (1, 1, 0)",
)

_THREADS = (
    """CREATE TABLE tl_threads (
        id TEXT PRIMARY KEY NOT NULL,
        next_seq INTEGER NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
        history_seq INTEGER NOT NULL DEFAULT 0 CHECK (history_seq >= 0),
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE tl_submissions (
        id TEXT PRIMARY KEY NOT NULL,
        thread_id TEXT NOT NULL REFERENCES tl_threads (id),
        seq INTEGER NOT NULL CHECK (seq >= 1),
        agent TEXT NOT NULL,
        idempotency_key TEXT,
        input_json TEXT NOT NULL,
        input_digest TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN (
            'queued', 'ready', 'running', 'suspended', 'unknown', 'joined',
            'terminalizing', 'settled')),
        outcome TEXT CHECK (outcome IS NULL OR outcome IN ('completed', 'failed', 'aborted')),
        result_json TEXT,
        error_json TEXT,
        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        revision INTEGER NOT NULL DEFAULT 0 CHECK (revision >= 0),
        lease_owner TEXT,
        lease_expires_at INTEGER,
        not_before INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        settled_at INTEGER,
        CHECK ((state = 'settled') = (outcome IS NOT NULL)),
        CHECK ((state = 'settled') = (settled_at IS NOT NULL)),
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
        UNIQUE (thread_id, seq),
        UNIQUE (thread_id, idempotency_key)
    )""",
    # Open work only: cost of a scan follows open submissions, not settled history.
    """CREATE INDEX tl_submissions_open ON tl_submissions (thread_id, seq)
        WHERE state <> 'settled'""",
    """CREATE TABLE tl_journal (
        submission_id TEXT NOT NULL REFERENCES tl_submissions (id),
        step_key TEXT NOT NULL,
        position INTEGER NOT NULL CHECK (position >= 0),
        effect TEXT NOT NULL CHECK (effect IN ('idempotent', 'uncertain')),
        state TEXT NOT NULL CHECK (state IN ('started', 'finished', 'failed')),
        attempt INTEGER NOT NULL CHECK (attempt >= 1),
        value_json TEXT,
        error_json TEXT,
        started_at INTEGER NOT NULL,
        finished_at INTEGER,
        PRIMARY KEY (submission_id, step_key)
    ) WITHOUT ROWID""",
    """CREATE TABLE tl_history (
        thread_id TEXT NOT NULL REFERENCES tl_threads (id),
        seq INTEGER NOT NULL CHECK (seq >= 1),
        record_id TEXT NOT NULL UNIQUE,
        submission_id TEXT,
        kind TEXT NOT NULL,
        body_json TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (thread_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE tl_waits (
        id TEXT PRIMARY KEY NOT NULL,
        submission_id TEXT NOT NULL REFERENCES tl_submissions (id),
        kind TEXT NOT NULL CHECK (kind IN ('approval', 'timer', 'unknown', 'event')),
        wait_key TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'resolved', 'cancelled')),
        payload_json TEXT,
        decision_json TEXT,
        wake_at INTEGER,
        created_at INTEGER NOT NULL,
        resolved_at INTEGER,
        CHECK (kind <> 'timer' OR wake_at IS NOT NULL),
        CHECK ((state = 'open') = (resolved_at IS NULL)),
        UNIQUE (submission_id, kind, wait_key)
    )""",
    "CREATE INDEX tl_waits_open ON tl_waits (wake_at) WHERE state = 'open'",
    """CREATE TABLE tl_abort_intents (
        submission_id TEXT PRIMARY KEY NOT NULL REFERENCES tl_submissions (id),
        state TEXT NOT NULL CHECK (state IN ('requested', 'accepted', 'applied')),
        reason TEXT,
        requested_at INTEGER NOT NULL,
        applied_at INTEGER
    ) WITHOUT ROWID""",
    """CREATE TABLE tl_outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        record_id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body_json TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered')),
        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        created_at INTEGER NOT NULL,
        delivered_at INTEGER,
        CHECK ((state = 'delivered') = (delivered_at IS NOT NULL))
    )""",
    "CREATE INDEX tl_outbox_pending ON tl_outbox (seq) WHERE state = 'pending'",
    """CREATE TABLE tl_messages (
        id TEXT PRIMARY KEY NOT NULL,
        from_thread TEXT NOT NULL,
        from_submission TEXT NOT NULL,
        to_space TEXT NOT NULL,
        to_thread TEXT NOT NULL,
        input_json TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending'
            CHECK (state IN ('pending', 'delivered', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        next_attempt_at INTEGER,
        last_error TEXT,
        created_at INTEGER NOT NULL,
        delivered_at INTEGER,
        CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL))
    ) WITHOUT ROWID""",
    "CREATE INDEX tl_messages_pending ON tl_messages (next_attempt_at) WHERE state = 'pending'",
)

_RECOVERY = (
    # One row per Thread whose recovery is blocked; a successful recovery deletes it.
    """CREATE TABLE tl_recovery_faults (
        thread_id TEXT PRIMARY KEY NOT NULL,
        first_failed_at INTEGER NOT NULL,
        last_failed_at INTEGER NOT NULL CHECK (last_failed_at >= first_failed_at),
        attempts INTEGER NOT NULL CHECK (attempts BETWEEN 1 AND 2147483647),
        retry_at INTEGER NOT NULL,
        failure TEXT NOT NULL,
        error_type TEXT NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX tl_recovery_faults_retry ON tl_recovery_faults (retry_at)",
    # The submissions a fault was reported to, kept until the fault clears even if they settle.
    """CREATE TABLE tl_recovery_recipients (
        thread_id TEXT NOT NULL REFERENCES tl_recovery_faults (thread_id),
        submission_id TEXT NOT NULL,
        position INTEGER NOT NULL CHECK (position >= 0),
        PRIMARY KEY (thread_id, submission_id),
        UNIQUE (thread_id, position)
    ) WITHOUT ROWID""",
    # Appended events awaiting acknowledgement (seq <= tl_maintenance.recovery_event_seq).
    """CREATE TABLE tl_recovery_events (
        seq INTEGER PRIMARY KEY CHECK (seq >= 1),
        kind TEXT NOT NULL CHECK (kind IN ('created', 'changed', 'cleared', 'parked')),
        thread_id TEXT NOT NULL,
        submission_id TEXT,
        body_json TEXT NOT NULL,
        at INTEGER NOT NULL
    )""",
    # Heads parked because this deployment does not register their agent. A row exists only
    # once its parking was reported (logged, and a `parked` event appended with it).
    """CREATE TABLE tl_binding_waits (
        submission_id TEXT PRIMARY KEY NOT NULL,
        thread_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        parked_at INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX tl_binding_waits_thread ON tl_binding_waits (thread_id)",
)

_PASS_REPORTS = (
    # Failed maintenance passes (the others are listed from memory, for this incarnation).
    """CREATE TABLE tl_pass_reports (
        seq INTEGER PRIMARY KEY,
        started_at INTEGER NOT NULL,
        phase TEXT NOT NULL CHECK (phase IN ('caught-up', 'actionable', 'failed')),
        recovered INTEGER NOT NULL CHECK (recovered >= 0),
        settled INTEGER NOT NULL CHECK (settled >= 0),
        dispatched INTEGER NOT NULL CHECK (dispatched >= 0),
        nonterminal INTEGER NOT NULL CHECK (nonterminal >= 0),
        alarm TEXT CHECK (alarm IS NULL OR alarm IN ('rearmed', 'cleared')),
        alarm_at INTEGER,
        rows_read INTEGER NOT NULL CHECK (rows_read >= 0),
        rows_written INTEGER NOT NULL CHECK (rows_written >= 0),
        statements INTEGER NOT NULL CHECK (statements >= 0),
        duration_ms INTEGER NOT NULL CHECK (duration_ms >= 0),
        failure_type TEXT,
        failure_message TEXT,
        CHECK ((phase = 'failed') = (failure_type IS NOT NULL))
    )""",
)

# Threads an actionable pass must visit whatever their timers: a head that can be claimed, is
# running or is settling. Suspended, Unknown and joined submissions stay out, so the pass's
# reads do not grow with the Threads sleeping on a timer or waiting for the outside world.
_LIVE_WORK = (
    """CREATE INDEX tl_submissions_live ON tl_submissions (thread_id, seq)
        WHERE state IN ('queued', 'ready', 'running', 'terminalizing')""",
)

# Fewer billed rows per write: nothing reads tl_outbox_pending, and AUTOINCREMENT costs a
# sqlite_sequence write per insert. The outbox never deletes a row, so the plain rowid stays
# increasing (tl_pass_reports, which trims only its oldest rows, is created without it). SQLite
# cannot drop AUTOINCREMENT in place: the table is renamed, recreated and copied, keeping every
# seq. Nothing references it, so the rename moves no foreign key.
_LEAN_ROWS = (
    "DROP INDEX tl_outbox_pending",
    "ALTER TABLE tl_outbox RENAME TO tl_outbox_old",
    """CREATE TABLE tl_outbox (
        seq INTEGER PRIMARY KEY,
        record_id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body_json TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered')),
        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        created_at INTEGER NOT NULL,
        delivered_at INTEGER,
        CHECK ((state = 'delivered') = (delivered_at IS NOT NULL))
    )""",
    """INSERT INTO tl_outbox (seq, record_id, thread_id, kind, body_json, state, attempts,
        created_at, delivered_at)
    SELECT seq, record_id, thread_id, kind, body_json, state, attempts, created_at, delivered_at
    FROM tl_outbox_old""",
    "DROP TABLE tl_outbox_old",
)

# Retired without a migration: tl_threads.history_seq and tl_threads.next_seq (and the
# updated_at bumps that came with them) are no longer written when a record is appended or a
# submission admitted; a Thread's row is written by its first admission only. The newest
# record's and submission's seq and time are read from the end of the Thread's tl_history and
# UNIQUE (thread_id, seq) keys instead, one row read instead of a row written each time. The
# columns stay, holding whatever they last held, because SQLite drops a column only from 3.35
# on.

# Fewer b-trees per admission and per claim (each entry is a billed row written):
# - WITHOUT ROWID: the row lives in its id's b-tree, instead of a rowid table plus an index
#   on id.
# - The idempotency-key uniqueness holds for keyed submissions only (two NULL keys never
#   collided anyway), so an unkeyed admission writes no entry for it.
# - ``dormant`` is 1 exactly while the submission waits on the outside world (suspended,
#   unknown, joined): a CHECK ties it to state, and a transition sets it only when it crosses
#   that line.
# - One open-work index instead of an open and a live one, naming dormant and settled_at
#   (NULL exactly while open, by a CHECK) instead of state: an UPDATE rewrites an index entry
#   when it sets a column the index names, and every claim and move sets state, while only
#   settling sets settled_at. So a claim (queued or ready -> running) rewrites no index entry
#   at all, and an admission writes one entry for it instead of two. Led by ``dormant``, its
#   live part (dormant = 0) is a contiguous range the pass reads without visiting sleeping
#   Threads, and one Thread's open work is two seeks (dormant 0 and 1).
# SQLite cannot change any of this in place. tl_journal, tl_waits and tl_abort_intents keep
# foreign keys to tl_submissions, which are enforced here and cannot be switched off inside
# the migration's transaction; renaming the table would repoint those keys at the old name.
# So the rows are copied aside, the table dropped and recreated under its own name, and the
# rows copied back, with foreign-key checks deferred while the table is missing. The deferral
# is switched off again before the end: on workerd a transaction is a savepoint of the event's
# implicit transaction, so it would otherwise last to the end of the event, and a violation
# there would reset the object instead of failing the statement. Switching it off also
# forgets the violations it deferred, so each child table is then checked explicitly: setting
# a foreign key to itself makes SQLite look its parent up, at once, so a child the copy-back
# left without its submission fails that statement, and the migration with it.
_LEAN_SUBMISSIONS = (
    "PRAGMA defer_foreign_keys = ON",
    "CREATE TABLE tl_submissions_copy AS SELECT * FROM tl_submissions",
    "DROP TABLE tl_submissions",
    """CREATE TABLE tl_submissions (
        id TEXT PRIMARY KEY NOT NULL,
        thread_id TEXT NOT NULL REFERENCES tl_threads (id),
        seq INTEGER NOT NULL CHECK (seq >= 1),
        agent TEXT NOT NULL,
        idempotency_key TEXT,
        input_json TEXT NOT NULL,
        input_digest TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN (
            'queued', 'ready', 'running', 'suspended', 'unknown', 'joined',
            'terminalizing', 'settled')),
        dormant INTEGER NOT NULL DEFAULT 0
            CHECK (dormant = (state IN ('suspended', 'unknown', 'joined'))),
        outcome TEXT CHECK (outcome IS NULL OR outcome IN ('completed', 'failed', 'aborted')),
        result_json TEXT,
        error_json TEXT,
        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        revision INTEGER NOT NULL DEFAULT 0 CHECK (revision >= 0),
        lease_owner TEXT,
        lease_expires_at INTEGER,
        not_before INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        settled_at INTEGER,
        CHECK ((state = 'settled') = (outcome IS NOT NULL)),
        CHECK ((state = 'settled') = (settled_at IS NOT NULL)),
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
        UNIQUE (thread_id, seq)
    ) WITHOUT ROWID""",
    """INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,
        input_digest, state, dormant, outcome, result_json, error_json, attempts, revision,
        lease_owner, lease_expires_at, not_before, created_at, updated_at, settled_at)
    SELECT id, thread_id, seq, agent, idempotency_key, input_json, input_digest, state,
        state IN ('suspended', 'unknown', 'joined'), outcome, result_json, error_json, attempts,
        revision, lease_owner, lease_expires_at, not_before, created_at, updated_at, settled_at
    FROM tl_submissions_copy""",
    "DROP TABLE tl_submissions_copy",
    """CREATE UNIQUE INDEX tl_submissions_key ON tl_submissions (thread_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL""",
    """CREATE INDEX tl_submissions_open ON tl_submissions (dormant, thread_id, seq)
        WHERE settled_at IS NULL""",
    # Checks are immediate from here on, even where the enclosing transaction outlives this
    # migration (the rest of the workerd event).
    "PRAGMA defer_foreign_keys = OFF",
    # Only orphans match, and rewriting one fails at once: normally these write nothing.
    """UPDATE tl_journal SET submission_id = submission_id
        WHERE submission_id NOT IN (SELECT id FROM tl_submissions)""",
    """UPDATE tl_waits SET submission_id = submission_id
        WHERE submission_id NOT IN (SELECT id FROM tl_submissions)""",
    """UPDATE tl_abort_intents SET submission_id = submission_id
        WHERE submission_id NOT IN (SELECT id FROM tl_submissions)""",
)

# One b-tree per outbox row instead of two: record_id is no longer UNIQUE. Each publisher
# writes a given id once by its own constraint, in the transaction of the fact it reports: a
# history record's id is UNIQUE in tl_history, a settlement is a compare-and-set, an approval
# request comes with its wait, UNIQUE (submission_id, kind, wait_key) in tl_waits. Delivery is
# at least once and deduplicated by id downstream in any case. The table is renamed, recreated
# and copied with every seq kept; nothing references it.
_LEAN_OUTBOX = (
    "ALTER TABLE tl_outbox RENAME TO tl_outbox_old",
    """CREATE TABLE tl_outbox (
        seq INTEGER PRIMARY KEY,
        record_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body_json TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered')),
        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        created_at INTEGER NOT NULL,
        delivered_at INTEGER,
        CHECK ((state = 'delivered') = (delivered_at IS NOT NULL))
    )""",
    """INSERT INTO tl_outbox (seq, record_id, thread_id, kind, body_json, state, attempts,
        created_at, delivered_at)
    SELECT seq, record_id, thread_id, kind, body_json, state, attempts, created_at, delivered_at
    FROM tl_outbox_old""",
    "DROP TABLE tl_outbox_old",
)

# ``dormant`` also holds queued input back: a queued or ready submission behind a suspended
# head may be dormant too (the pass marks it so, and the head's leaving the suspension clears
# it), so a Thread whose head waits on an approval or a far timer leaves the live range with
# its whole queue until that wait can change, instead of being read by every actionable pass.
# The CHECK allows it from here on; running, terminalizing and settled submissions stay live.
# SQLite cannot change a CHECK in place: the table is rebuilt exactly as _LEAN_SUBMISSIONS
# rebuilt it (copied aside, recreated under its own name, copied back with foreign-key checks
# deferred, then each child table checked), for the same reasons; every row keeps its values.
_HELD_FOLLOWERS = (
    "PRAGMA defer_foreign_keys = ON",
    "CREATE TABLE tl_submissions_copy AS SELECT * FROM tl_submissions",
    "DROP TABLE tl_submissions",
    """CREATE TABLE tl_submissions (
        id TEXT PRIMARY KEY NOT NULL,
        thread_id TEXT NOT NULL REFERENCES tl_threads (id),
        seq INTEGER NOT NULL CHECK (seq >= 1),
        agent TEXT NOT NULL,
        idempotency_key TEXT,
        input_json TEXT NOT NULL,
        input_digest TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN (
            'queued', 'ready', 'running', 'suspended', 'unknown', 'joined',
            'terminalizing', 'settled')),
        dormant INTEGER NOT NULL DEFAULT 0
            CHECK (dormant = (state IN ('suspended', 'unknown', 'joined'))
                OR (dormant = 1 AND state IN ('queued', 'ready'))),
        outcome TEXT CHECK (outcome IS NULL OR outcome IN ('completed', 'failed', 'aborted')),
        result_json TEXT,
        error_json TEXT,
        attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        revision INTEGER NOT NULL DEFAULT 0 CHECK (revision >= 0),
        lease_owner TEXT,
        lease_expires_at INTEGER,
        not_before INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        settled_at INTEGER,
        CHECK ((state = 'settled') = (outcome IS NOT NULL)),
        CHECK ((state = 'settled') = (settled_at IS NOT NULL)),
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
        UNIQUE (thread_id, seq)
    ) WITHOUT ROWID""",
    """INSERT INTO tl_submissions (id, thread_id, seq, agent, idempotency_key, input_json,
        input_digest, state, dormant, outcome, result_json, error_json, attempts, revision,
        lease_owner, lease_expires_at, not_before, created_at, updated_at, settled_at)
    SELECT id, thread_id, seq, agent, idempotency_key, input_json, input_digest, state,
        dormant, outcome, result_json, error_json, attempts, revision, lease_owner,
        lease_expires_at, not_before, created_at, updated_at, settled_at
    FROM tl_submissions_copy""",
    "DROP TABLE tl_submissions_copy",
    """CREATE UNIQUE INDEX tl_submissions_key ON tl_submissions (thread_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL""",
    """CREATE INDEX tl_submissions_open ON tl_submissions (dormant, thread_id, seq)
        WHERE settled_at IS NULL""",
    "PRAGMA defer_foreign_keys = OFF",
    """UPDATE tl_journal SET submission_id = submission_id
        WHERE submission_id NOT IN (SELECT id FROM tl_submissions)""",
    """UPDATE tl_waits SET submission_id = submission_id
        WHERE submission_id NOT IN (SELECT id FROM tl_submissions)""",
    """UPDATE tl_abort_intents SET submission_id = submission_id
        WHERE submission_id NOT IN (SELECT id FROM tl_submissions)""",
)

# Attempts lost without failing (the object was reset, or the alarm event ended around them)
# are counted apart from the failures ``attempts`` charges against ``max_attempts``:
# ``losses`` in all, ``loss_streak`` in a row at the journal position ``loss_position`` (a
# step finishing, or an Attempt ending otherwise, starts a new streak), and the cause of the
# latest. Recovery of a lost claim writes them, and any other end of an Attempt sets the
# streak back to 0, each in the UPDATE that ends the claim anyway; no index names them, so
# those writes cost no index entry. Added in place: SQLite appends a column to a WITHOUT ROWID
# table without copying it.
_LOSSES = (
    """ALTER TABLE tl_submissions ADD COLUMN
        losses INTEGER NOT NULL DEFAULT 0 CHECK (losses >= 0)""",
    """ALTER TABLE tl_submissions ADD COLUMN
        loss_streak INTEGER NOT NULL DEFAULT 0 CHECK (loss_streak >= 0)""",
    """ALTER TABLE tl_submissions ADD COLUMN
        loss_position INTEGER CHECK (loss_position IS NULL OR loss_position >= 0)""",
    """ALTER TABLE tl_submissions ADD COLUMN
        loss_cause TEXT CHECK (loss_cause IS NULL
            OR loss_cause IN ('reset', 'interrupted', 'lease-expired'))""",
)

# One row per schedule the application declares (``@app.every``, ``@app.cron``), written at
# start-up and by each run; the schedule's runs are waves of the host lane of the same id.
# ``spec`` names the fire times the stored ones were computed for: a deploy that changes it
# starts the schedule afresh. ``next_fire`` is the durable next fire time. ``pending_fire`` is
# the fire a run was recorded for before the schedule's function was called, until that run's
# completion clears it (a compare-and-set on it, so a fire completes once): a run lost with
# the object, or that failed, runs that fire again, with the same default idempotency keys.
# ``failures`` counts the failed runs of the pending fire; ``last_*`` are for operators.
_SCHEDULES = (
    """CREATE TABLE tl_schedules (
        id TEXT PRIMARY KEY NOT NULL,
        spec TEXT NOT NULL,
        next_fire INTEGER NOT NULL CHECK (next_fire >= 0),
        pending_fire INTEGER CHECK (pending_fire IS NULL OR pending_fire >= 0),
        failures INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
        last_fire INTEGER,
        last_ended_at INTEGER,
        last_error_type TEXT,
        last_error TEXT,
        last_failed_at INTEGER,
        last_failed_fire INTEGER,
        CHECK ((last_error_type IS NULL) = (last_failed_at IS NULL)),
        CHECK ((last_fire IS NULL) = (last_ended_at IS NULL))
    ) WITHOUT ROWID""",
)

# Delayed submissions: input admitted with a due time. A row has no FIFO seq yet: the
# ``threadline:delayed`` lane moves it into tl_submissions (same id, the Thread's next seq)
# when it falls due, so it holds nothing up meanwhile. The rowid ``seq`` orders submissions
# due at the same instant as they were made: a new row's rowid is above every row present.
# ``tl_delayed_due`` (due_at, rowid) gives the lane the due rows and the next due time, one
# seek each, however many are pending; ``tl_delayed_thread`` lists one Thread's; keyed
# submissions are unique per Thread here as in tl_submissions (the ledger checks both tables
# before it writes either, so a key names one submission wherever it is).
_DELAYED = (
    """CREATE TABLE tl_delayed (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        idempotency_key TEXT,
        input_json TEXT NOT NULL,
        input_digest TEXT NOT NULL,
        due_at INTEGER NOT NULL CHECK (due_at >= 0),
        created_at INTEGER NOT NULL
    )""",
    "CREATE INDEX tl_delayed_due ON tl_delayed (due_at)",
    "CREATE INDEX tl_delayed_thread ON tl_delayed (thread_id, due_at)",
    """CREATE UNIQUE INDEX tl_delayed_key ON tl_delayed (thread_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL""",
)

# What the schedules and host lanes of the deployment that last started the object were: a
# digest of each schedule's id and spec and each host lane's id. Start-up compares it with
# its own and reads the schedules' and host lanes' rows only when they differ (a deploy that
# added, changed or removed one), so an unchanged object starts in the same rows with one
# schedule or a hundred.
_LANES_KEY = (
    "ALTER TABLE tl_maintenance ADD COLUMN lanes_key TEXT",
)

# Follow-up input joined into a running head (``turn.followups()``) names that head here, so
# its view says which submission it joined and the head's settlement finds it. Written by
# the move into ``joined``, an UPDATE of the row that move writes anyway; no index names it
# (the head's settlement finds its joined input in its Thread's dormant range of the
# open-work index). Added in place, like the loss columns.
_JOINED_TO = (
    "ALTER TABLE tl_submissions ADD COLUMN joined_to TEXT",
)

# Messages name the agent to run at their target (None: the target Thread's latest, else its
# only one), the submission they became there once delivered, and when they failed for good.
# Nullable columns, so the rows already written stay as they are.
_MESSAGE_ROUTING = (
    "ALTER TABLE tl_messages ADD COLUMN agent TEXT",
    "ALTER TABLE tl_messages ADD COLUMN admitted_as TEXT",
    "ALTER TABLE tl_messages ADD COLUMN failed_at INTEGER",
)

# Subscribers: one durable cursor each over the space's log.
# - tl_history becomes a rowid table whose ``pos`` (the rowid) orders every record of the
#   space as it was appended: a new row's rowid is above every row present, and appends run in
#   the object's synchronous transactions, so a record never commits below a position a
#   cursor has passed. One cursor row per subscriber then finds its next batch with one seek
#   (``pos > cursor``), whatever the number of Threads, and a batch spanning many Threads is
#   still one row written. It costs one more b-tree entry per record (the rowid table beside
#   the unique (thread_id, seq) and record_id keys). History rows are never deleted: a deleted
#   newest row would let its rowid be handed out again (AUTOINCREMENT, which forbids that,
#   writes sqlite_sequence on every append). Existing rows are numbered Thread by Thread, in
#   seq order, which is all a cursor needs: records of different Threads are not ordered.
# - tl_subscribers holds each subscriber's cursor, version, failure streak and parking. It
#   has no secondary index: a delivered batch writes its one row and nothing else.
_SUBSCRIBERS = (
    "ALTER TABLE tl_history RENAME TO tl_history_old",
    """CREATE TABLE tl_history (
        pos INTEGER PRIMARY KEY,
        thread_id TEXT NOT NULL REFERENCES tl_threads (id),
        seq INTEGER NOT NULL CHECK (seq >= 1),
        record_id TEXT NOT NULL UNIQUE,
        submission_id TEXT,
        kind TEXT NOT NULL,
        body_json TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (thread_id, seq)
    )""",
    """INSERT INTO tl_history (thread_id, seq, record_id, submission_id, kind, body_json,
        created_at)
    SELECT thread_id, seq, record_id, submission_id, kind, body_json, created_at
    FROM tl_history_old ORDER BY thread_id, seq""",
    "DROP TABLE tl_history_old",
    """CREATE TABLE tl_subscribers (
        name TEXT PRIMARY KEY NOT NULL,
        version INTEGER NOT NULL CHECK (version >= 1),
        cursor INTEGER NOT NULL CHECK (cursor >= 0),
        state TEXT NOT NULL CHECK (state IN ('active', 'parked')),
        failures INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
        retry_at INTEGER,
        delivered INTEGER NOT NULL DEFAULT 0 CHECK (delivered >= 0),
        delivered_at INTEGER,
        error_type TEXT,
        error TEXT,
        detail TEXT,
        failed_at INTEGER,
        reported INTEGER NOT NULL DEFAULT 0 CHECK (reported IN (0, 1))
    ) WITHOUT ROWID""",
)

# The name of the space the object serves. The platform gives it (``ctx.id.name``) to an
# object a request or an RPC reaches, not to one its alarm starts after an eviction or a
# restart, so the object keeps it here: written once, by the first start or request that
# names the space, and read with the rest of this row at every start.
_SPACE_NAME = (
    "ALTER TABLE tl_maintenance ADD COLUMN space_name TEXT",
)

# One log: the settlement and approval records now go to tl_history with the Thread's other
# records, so tl_outbox (written, never read) goes. Its rows are dropped, not moved. They were
# never delivered to anyone, and they cannot join the log in their places: a Thread's seqs are
# handed out already (clients resume SSE from them), so the rows could only be appended after
# records newer than the facts they report. A consumer reading the log from the beginning
# would then meet old settlements as if they had just happened, out of order. What they said
# stays where it was also kept: the submission (outcome, result, error, settled_at) and its
# waits. The log carries a settlement record for each submission settled from here on.
_ONE_LOG = (
    "DROP TABLE tl_outbox",
)

# One b-tree entry fewer per record: record_id is no longer UNIQUE (an index entry is a
# billed row written per record). Each writer appends an id once by the guard of its own fact;
# an emitted record is found again by its Attempt among the submission's records, which all
# follow the submission's first claim: tl_submissions.history_from, where the Thread's log
# ended then, set by that claim. A submission that may have been claimed before this version
# (open, not queued: a claim never returns one to queued) reads its Thread's log from the start.
# The rebuild keeps every row's ``pos``: subscribers' cursors point at them.
_LEAN_HISTORY = (
    "ALTER TABLE tl_history RENAME TO tl_history_old",
    """CREATE TABLE tl_history (
        pos INTEGER PRIMARY KEY,
        thread_id TEXT NOT NULL REFERENCES tl_threads (id),
        seq INTEGER NOT NULL CHECK (seq >= 1),
        record_id TEXT NOT NULL,
        submission_id TEXT,
        kind TEXT NOT NULL,
        body_json TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (thread_id, seq)
    )""",
    """INSERT INTO tl_history (pos, thread_id, seq, record_id, submission_id, kind, body_json,
        created_at)
    SELECT pos, thread_id, seq, record_id, submission_id, kind, body_json, created_at
    FROM tl_history_old""",
    "DROP TABLE tl_history_old",
    "ALTER TABLE tl_submissions ADD COLUMN history_from INTEGER"
    " CHECK (history_from IS NULL OR history_from >= 0)",
    "UPDATE tl_submissions SET history_from = 0 WHERE settled_at IS NULL AND state <> 'queued'",
)

# Who did it: the subject of the principal that caused a fact (the Worker names it in the
# ``threadline-subject`` header of the request it forwards), kept on the row the fact writes
# anyway: an admission's submission (or its delayed row, carried over when it falls due), an
# abort's intent, an approval decision's or a resolution's wait. NULL: unknown, or caused by
# no principal (a message, a schedule, an agent). No index names them, so recording a subject
# costs no row; added in place, like the loss columns.
_SUBJECTS = (
    "ALTER TABLE tl_submissions ADD COLUMN submitted_by TEXT",
    "ALTER TABLE tl_delayed ADD COLUMN submitted_by TEXT",
    "ALTER TABLE tl_abort_intents ADD COLUMN requested_by TEXT",
    "ALTER TABLE tl_waits ADD COLUMN decided_by TEXT",
)

# The due timers a pass visits are read from the open-wait index alone: it carries each open
# wait's kind and Thread (and its state, which makes it covering), so finding the Threads with
# a due timer reads one index entry per due timer, not the wait's row and its submission's.
# The index still has one entry per open wait, so opening a wait writes no more rows. Only
# open waits are given their Thread: a closed one is never looked up by it.
_WAIT_THREADS = (
    "ALTER TABLE tl_waits ADD COLUMN thread_id TEXT",
    """UPDATE tl_waits SET thread_id = (SELECT s.thread_id FROM tl_submissions s
        WHERE s.id = tl_waits.submission_id) WHERE state = 'open'""",
    "DROP INDEX tl_waits_open",
    """CREATE INDEX tl_waits_open ON tl_waits (wake_at, kind, thread_id, state)
        WHERE state = 'open'""",
)

# Parked subscribers are found without reading the others: every start looks at them (a parking
# for a webhook's secret or a Queue binding ends once the environment has it), and with this
# partial index that reads only the parked rows, so a start reads the same rows with one
# subscriber or twenty. A delivered batch still writes one row: it changes no state, so no
# entry of this index.
_PARKED_SUBSCRIBERS = (
    "CREATE INDEX tl_subscribers_parked ON tl_subscribers (state) WHERE state = 'parked'",
)

# - tl_revocations holds the space's revoked scoped tokens: one token by id (and every token
# minted from it), or every token of one subject whose lineage began before issued_before.
# The object loads them once and checks each forwarded request's token from memory; a row is
# dropped once every token it can refuse has expired.
_REVOCATIONS = (
    """CREATE TABLE tl_revocations (
        id INTEGER PRIMARY KEY,
        token_id TEXT,
        subject TEXT,
        issued_before INTEGER,
        revoked_at INTEGER NOT NULL,
        revoked_by TEXT,
        reason TEXT,
        CHECK ((token_id IS NULL) <> (subject IS NULL)),
        CHECK ((subject IS NULL) = (issued_before IS NULL))
    )""",
)

# Messages are delivered target by target (threadline.maintenance.message_lane). Each space
# messages go to has one tl_message_targets row while some are pending, due when its oldest
# pending message goes next: a target that does not answer backs off on its own row, and the
# messages to other spaces keep their own times (the due index of single messages goes; a wave
# reads the targets' rows). A pending message's ``seq`` orders its target's queue as it was
# sent, so a target that answers again gets its messages in that order; the existing pending
# ones are numbered in the order they were written. ``hops`` counts the messages of a chain up
# to this one (1: sent by input from outside any message), and a submission admitted from a
# message keeps its count in ``message_hops`` (0: not from a message), so what its agent sends
# goes one hop further, after a restart too, and a loop of messages ends at a bound.
_MESSAGE_TARGETS = (
    "ALTER TABLE tl_messages ADD COLUMN seq INTEGER",
    "ALTER TABLE tl_messages ADD COLUMN hops INTEGER NOT NULL DEFAULT 1 CHECK (hops >= 1)",
    "ALTER TABLE tl_submissions ADD COLUMN message_hops INTEGER NOT NULL DEFAULT 0"
    " CHECK (message_hops >= 0)",
    """UPDATE tl_messages SET seq = (SELECT count(*) FROM tl_messages m
        WHERE m.state = 'pending' AND m.to_space = tl_messages.to_space
        AND (m.created_at < tl_messages.created_at
            OR (m.created_at = tl_messages.created_at AND m.id <= tl_messages.id)))
    WHERE state = 'pending'""",
    "DROP INDEX tl_messages_pending",
    "CREATE INDEX tl_messages_queue ON tl_messages (to_space, seq) WHERE state = 'pending'",
    """CREATE TABLE tl_message_targets (
        space TEXT PRIMARY KEY NOT NULL,
        due_at INTEGER NOT NULL,
        failures INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
        last_error TEXT
    ) WITHOUT ROWID""",
    "CREATE INDEX tl_message_targets_due ON tl_message_targets (due_at)",
    """INSERT INTO tl_message_targets (space, due_at)
    SELECT to_space, min(next_attempt_at) FROM tl_messages WHERE state = 'pending'
    GROUP BY to_space""",
)

# A submission admitted from a message keeps where the message came from, as the sending
# object named it ("<space>/<thread>"), so its detail and its settlement record say which
# space and Thread caused it. Ids never hold a "/", so the two parts read back unambiguously.
_MESSAGE_FROM = ("ALTER TABLE tl_submissions ADD COLUMN message_from TEXT",)

# The required gate per Thread: tl_subscriber_holds, the Threads a subscriber failed on. A
#   failed batch is charged to the
#   Thread of its first record: that Thread's records from ``since_seq`` on are delivered on
#   their own, at ``retry_at`` (or never, while it is parked), and the subscriber's cursor goes
#   on past them over every other Thread. So a destination that keeps failing on one Thread's
#   records holds that Thread alone. One row per held Thread, none written while deliveries
#   succeed; its key is the lookup the gate makes, so it needs no other index. (No index is
#   added to tl_history: whether a Thread has a wanted record past a subscriber's position is
#   read from the end of its UNIQUE (thread_id, seq) range, a bounded walk.)
_GATE_HOLDS = (
    """CREATE TABLE tl_subscriber_holds (
        name TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        since_seq INTEGER NOT NULL CHECK (since_seq >= 1),
        state TEXT NOT NULL CHECK (state IN ('backing-off', 'parked')),
        failures INTEGER NOT NULL CHECK (failures >= 1),
        retry_at INTEGER,
        error_type TEXT,
        error TEXT,
        detail TEXT,
        failed_at INTEGER NOT NULL,
        reported INTEGER NOT NULL DEFAULT 0 CHECK (reported IN (0, 1)),
        PRIMARY KEY (name, thread_id)
    ) WITHOUT ROWID""",
)

# A submission an agent makes (``turn.submit``) carries the hop count of the submission that
# made it, so a chain of messages cannot start over by passing through one; a delayed one keeps
# it until it falls due.
_SUBMIT_HOPS = (
    "ALTER TABLE tl_delayed ADD COLUMN message_hops INTEGER NOT NULL DEFAULT 0"
    " CHECK (message_hops >= 0)",
)

# When each rate-limited agent's recent Attempts started (threadline.Rate): the pass keeps at
# most ``limit`` rows per agent, the newest, so an incarnation rebuilt after an eviction knows
# the window it is in. Nothing is written for an agent without a rate.
_AGENT_STARTS = (
    """CREATE TABLE tl_agent_starts (
        agent TEXT NOT NULL,
        started_at INTEGER NOT NULL
    )""",
    "CREATE INDEX tl_agent_starts_window ON tl_agent_starts (agent, started_at)",
)

# A submission keeps the errors of its failed Attempts, not only the latest one in error_json:
# ``failures`` counts the Attempts that failed (lost ones are counted in ``losses``), and
# ``failures_json`` lists the first one's error and the latest ones', a bounded JSON array
# (threadline.threads.failed_attempts). Both are written by the UPDATE that ends the Attempt, so
# keeping them costs no row more, and they go with the submission's row when it is deleted. A
# submission that failed before this version lists none: its latest error stays in error_json.
_FAILED_ATTEMPTS = (
    "ALTER TABLE tl_submissions ADD COLUMN failures INTEGER NOT NULL DEFAULT 0"
    " CHECK (failures >= 0)",
    "ALTER TABLE tl_submissions ADD COLUMN failures_json TEXT",
)

# A stored pass report also names the Attempts that failed while the pass ran (their agents
# raised; the pass itself may have failed for another reason, in failure_type): how many, and
# the latest of them as a bounded JSON array of {submission_id, thread_id, agent, attempt,
# error_type} (threadline.maintenance.report). Reports stored before this version count none.
_PASS_FAILED_ATTEMPTS = (
    "ALTER TABLE tl_pass_reports ADD COLUMN attempts_failed INTEGER NOT NULL DEFAULT 0"
    " CHECK (attempts_failed >= 0)",
    "ALTER TABLE tl_pass_reports ADD COLUMN failed_attempts_json TEXT",
)

#: Append-only. Index ``n`` migrates version ``n`` to ``n + 1``.
MIGRATIONS: list[tuple[str, ...]] = [
    _SCHEDULING, _THREADS, _RECOVERY, _PASS_REPORTS, _LIVE_WORK, _LEAN_ROWS, _LEAN_SUBMISSIONS,
    _LEAN_OUTBOX, _HELD_FOLLOWERS, _LOSSES, _SCHEDULES, _DELAYED, _LANES_KEY,
    _JOINED_TO, _MESSAGE_ROUTING, _SUBSCRIBERS, _SPACE_NAME, _ONE_LOG, _LEAN_HISTORY,
    _SUBJECTS, _WAIT_THREADS, _PARKED_SUBSCRIBERS, _REVOCATIONS, _MESSAGE_TARGETS,
    _MESSAGE_FROM, _GATE_HOLDS, _SUBMIT_HOPS, _AGENT_STARTS, _FAILED_ATTEMPTS,
    _PASS_FAILED_ATTEMPTS,
]

SCHEMA_VERSION = len(MIGRATIONS)

_CREATE_META = (
    "CREATE TABLE IF NOT EXISTS tl_meta ("
    "id INTEGER PRIMARY KEY CHECK (id = 1), schema_version INTEGER NOT NULL)"
)
_READ_VERSION = "SELECT schema_version FROM tl_meta WHERE id = 1"
_FIRST_VERSION = "INSERT INTO tl_meta (id, schema_version) VALUES (1, ?)"
_BUMP_VERSION = "UPDATE tl_meta SET schema_version = ? WHERE id = 1 AND schema_version = ?"


def schema_version(storage: Storage) -> int:
    """The version the database is at (0 for an empty database)."""
    storage.exec(_CREATE_META)
    value = storage.exec(_READ_VERSION).scalar()
    return 0 if value is None else int(value)


def migrate(storage: Storage, *, target: int | None = None) -> int:
    """Bring the database to ``target`` (default: the latest) and return how many steps ran.

    Each step commits with its version bump, so a crash leaves the database at a whole
    version; running it again resumes there, and on an up-to-date database it changes nothing.
    A database newer than this code raises :class:`SchemaError` without touching it.
    """
    goal = SCHEMA_VERSION if target is None else target
    if not 0 <= goal <= SCHEMA_VERSION:
        raise SchemaError(f"unknown schema version {goal}; this code knows 0..{SCHEMA_VERSION}")
    applied = 0
    while True:
        current = schema_version(storage)
        if current > SCHEMA_VERSION:
            raise SchemaError(
                f"database schema version {current} is newer than this code ({SCHEMA_VERSION})"
            )
        if current >= goal:
            return applied
        _apply(storage, current)
        applied += 1


def _apply(storage: Storage, current: int) -> None:
    def step() -> None:
        for statement in MIGRATIONS[current]:
            storage.exec(statement)
        if current == 0:
            storage.exec(_FIRST_VERSION, 1)
        elif storage.exec(_BUMP_VERSION, current + 1, current).changed != 1:
            raise SchemaError(f"schema version moved while migrating from {current}")

    try:
        storage.transaction(step)
    except SchemaError:
        raise
    except StorageError as exc:
        raise SchemaError(f"migration {current} -> {current + 1} failed: {exc}") from exc


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate", "schema_version"]
