// Benchmark only: bundles worker.js (esbuild) and serves it through miniflare's API, the same
// miniflare that serves threadline. Prints `ready <url>`; stops when stdin closes.
import { build } from "esbuild";
import { Log, LogLevel, Miniflare } from "miniflare";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(here, "dist", "worker.js");
await build({
  entryPoints: [resolve(here, "worker.js")],
  outfile: out,
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  conditions: ["workerd", "worker", "browser"],
  mainFields: ["module", "main"],
  external: ["cloudflare:*", "node:*"],
  alias: { path: "node:path" },
  logLevel: "error",
});

const mf = new Miniflare({
  host: "127.0.0.1",
  port: 0,
  modules: true,
  scriptPath: out,
  modulesRules: [{ type: "ESModule", include: ["**/*.js"] }],
  compatibilityDate: "2026-04-01",
  compatibilityFlags: ["nodejs_compat"],
  durableObjects: {
    BENCH_AGENT: { className: "BenchAgent", useSQLite: true },
    BENCH_CHAT: { className: "BenchChat", useSQLite: true },
  },
  // The fake model provider the chat agent streams from (scenario 10).
  bindings: { MODEL_URL: process.env.MODEL_URL ?? "http://127.0.0.1:9/v1" },
  durableObjectsPersist: false,
  cf: false,
  log: new Log(LogLevel.WARN),
});
const stop = async () => {
  await mf.dispose().catch(() => {});
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
process.stdin.on("end", stop);
process.stdin.resume();
const url = await mf.ready;
process.stdout.write(`ready ${url.origin}\n`);
