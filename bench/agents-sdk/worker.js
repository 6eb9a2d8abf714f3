// Benchmark only: Agents SDK agents whose storage cost is metered, served side by side with
// threadline in the same miniflare. Never deployed.
//
// BenchAgent (scenarios 3 and 6) meters its SQL and alarm writes with meter.js; alarm()
// records each alarm's delta; the /alarms and /progress routes read the counters without
// running SQL. BenchChat (chat.js, scenario 10) is the SDK's AIChatAgent, metered the same way.
import { Agent, getAgentByName } from "agents";
import { delta, installMeter, snapshot } from "./meter.js";

export { BenchChat } from "./chat.js";

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
    if (parts[0] === "_chat" && parts.length >= 2) {
      // The chat agent's WebSocket (/_chat/{name}) and its routes (/_chat/{name}/{op}).
      const stub = await getAgentByName(env.BENCH_CHAT, parts[1]);
      return stub.fetch(request);
    }
    if (parts[0] !== "_agents" || parts.length < 3) return new Response("not found", { status: 404 });
    const stub = await getAgentByName(env.BENCH_AGENT, parts[1]);
    return stub.fetch(request);
  },
};
