// Benchmark only: an Agents SDK agent whose storage cost is metered, served side by side with
// threadline in the same miniflare. Never deployed.
//
// The SQL meter is a thin wrapper installed on ctx.storage.sql.exec BEFORE the Agent
// constructor runs: it calls the original, reads the whole cursor, adds the cursor's billed
// rowsRead/rowsWritten to the counters and returns a cursor-like object over the rows read.
// Alarm writes (setAlarm/deleteAlarm) are counted too. alarm() records each alarm's delta;
// the /alarms and /progress routes read the counters without running SQL.
import { Agent, getAgentByName } from "agents";

const FIELDS = ["statements", "rowsRead", "rowsWritten", "setAlarm", "deleteAlarm"];

function cursorOver(rows, cursor) {
  const columnNames = cursor.columnNames;
  return {
    columnNames,
    rowsRead: cursor.rowsRead,
    rowsWritten: cursor.rowsWritten,
    toArray: () => rows,
    one: () => {
      if (rows.length !== 1) throw new Error(`Expected exactly one result from SQL query, got ${rows.length}`);
      return rows[0];
    },
    raw: () => rows.map((row) => columnNames.map((name) => row[name]))[Symbol.iterator](),
    next: (() => {
      const it = rows[Symbol.iterator]();
      return () => it.next();
    })(),
    [Symbol.iterator]: () => rows[Symbol.iterator](),
  };
}

function installMeter(ctx) {
  const meter = Object.fromEntries(FIELDS.map((f) => [f, 0]));
  const sql = ctx.storage.sql;
  const exec = sql.exec.bind(sql);
  sql.exec = (query, ...bindings) => {
    const cursor = exec(query, ...bindings);
    const rows = cursor.toArray();
    meter.statements += 1;
    meter.rowsRead += cursor.rowsRead;
    meter.rowsWritten += cursor.rowsWritten;
    return cursorOver(rows, cursor);
  };
  const storage = ctx.storage;
  const setAlarm = storage.setAlarm.bind(storage);
  const deleteAlarm = storage.deleteAlarm.bind(storage);
  const getAlarm = storage.getAlarm.bind(storage);
  storage.setAlarm = (...args) => {
    meter.setAlarm += 1;
    return setAlarm(...args);
  };
  storage.deleteAlarm = (...args) => {
    meter.deleteAlarm += 1;
    return deleteAlarm(...args);
  };
  return { meter, exec, getAlarm };
}

const snapshot = (meter) => ({ ...meter });
const delta = (after, before) => Object.fromEntries(FIELDS.map((f) => [f, after[f] - before[f]]));

export class BenchAgent extends Agent {
  constructor(ctx, env) {
    const raw = installMeter(ctx);
    super(ctx, env);
    this.raw = raw;
    this.meter = raw.meter;
    this.alarmRuns = [];
    this.ticks = [];
    this.done = [];
  }

  async alarm() {
    const before = snapshot(this.meter);
    const started = Date.now();
    await super.alarm();
    this.alarmRuns.push({ ...delta(this.meter, before), wallMs: Date.now() - started });
  }

  /** A schedule's callback. */
  async tick(payload) {
    this.ticks.push(payload);
  }

  /** The unit of work a queue() item runs: it keeps its result, as an agent would. */
  async work(payload) {
    this.sql`CREATE TABLE IF NOT EXISTS bench_results (id INTEGER PRIMARY KEY, body TEXT)`;
    this.sql`INSERT INTO bench_results (body) VALUES (${JSON.stringify({ got: payload })})`;
    this.done.push(payload);
  }

  async onRequest(request) {
    const url = new URL(request.url);
    const op = url.pathname.split("/").pop();
    const q = Object.fromEntries(url.searchParams);
    const measured = async (fn) => {
      const before = snapshot(this.meter);
      const result = await fn();
      return { result, cost: delta(this.meter, before) };
    };
    let body;
    if (op === "seed") {
      const k = Number(q.k);
      for (let i = 0; i < k; i += 1) await this.schedule(Number(q.seconds), "tick", { far: i });
      body = { seeded: k };
    } else if (op === "schedule") {
      body = await measured(() => this.schedule(Number(q.seconds), "tick", { near: q.n }));
      body.result = body.result?.id ?? null;
    } else if (op === "queue") {
      body = await measured(() => this.queue("work", { n: q.n }));
    } else if (op === "status") {
      const alarm = await this.raw.getAlarm();
      const jobs = this.raw.exec("SELECT COUNT(*) AS n FROM cf_agents_jobs").toArray()[0].n;
      body = { alarm, now: Date.now(), jobs, ticks: this.ticks.length, done: this.done.length,
               alarms: this.alarmRuns.length };
    } else if (op === "progress") {
      body = { done: this.done.length, alarms: this.alarmRuns.length };
    } else if (op === "alarms") {
      body = { alarms: this.alarmRuns.slice(Number(q.since ?? 0)), meter: this.meter };
    } else {
      return Response.json({ error: `no op ${op}` }, { status: 404 });
    }
    return Response.json(body);
  }
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const parts = url.pathname.split("/").filter(Boolean);
    if (parts[0] !== "_agents" || parts.length < 3) return new Response("not found", { status: 404 });
    const stub = await getAgentByName(env.BENCH_AGENT, parts[1]);
    return stub.fetch(request);
  },
};
