// Serves a bundle built by build.py in real workerd, through miniflare's API.
//
//   node scripts/workerd/serve.mjs --bundle DIR [--host H] [--port N] [--persist DIR | --memory]
//                                  [--vars-file FILE] [--var KEY=VALUE ...]
//
// Prints `ready <url>` on stdout once requests are served (port 0 picks a free port).
// Stops workerd cleanly on SIGINT/SIGTERM or when stdin closes with --exit-on-stdin-close.
import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { Log, LogLevel, Miniflare } from "miniflare";

const { values: args } = parseArgs({
  options: {
    bundle: { type: "string" },
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "8787" },
    persist: { type: "string" },
    memory: { type: "boolean", default: false },
    "vars-file": { type: "string" },
    var: { type: "string", multiple: true, default: [] },
    "exit-on-stdin-close": { type: "boolean", default: false },
  },
});

if (!args.bundle) {
  console.error("serve.mjs: --bundle DIR is required");
  process.exit(2);
}

/** Parses a wrangler-style .dev.vars file: KEY=VALUE lines, # comments, optional quotes. */
function parseDevVars(text) {
  const vars = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const eq = line.indexOf("=");
    if (eq <= 0) continue;
    const key = line.slice(0, eq).trim();
    let value = line.slice(eq + 1).trim();
    const quote = value[0];
    if ((quote === '"' || quote === "'") && value.endsWith(quote) && value.length >= 2) {
      value = value.slice(1, -1);
      if (quote === '"') value = value.replace(/\\n/g, "\n");
    }
    vars[key] = value;
  }
  return vars;
}

const bundleDir = resolve(args.bundle);
const manifest = JSON.parse(readFileSync(resolve(bundleDir, "bundle.json"), "utf8"));
const bindings = { ...manifest.vars };
if (args["vars-file"] && existsSync(args["vars-file"])) {
  Object.assign(bindings, parseDevVars(readFileSync(args["vars-file"], "utf8")));
}
for (const item of args.var) {
  const eq = item.indexOf("=");
  if (eq <= 0) {
    console.error(`serve.mjs: --var wants KEY=VALUE, not ${item}`);
    process.exit(2);
  }
  bindings[item.slice(0, eq)] = item.slice(eq + 1);
}

const durableObjects = {};
for (const [binding, className] of Object.entries(manifest.durableObjects)) {
  durableObjects[binding] = { className, useSQLite: true };
}

const mf = new Miniflare({
  name: manifest.name,
  host: args.host,
  port: Number(args.port),
  modulesRoot: bundleDir,
  modules: manifest.modules.map((m) => ({ type: m.type, path: resolve(bundleDir, m.path) })),
  compatibilityDate: manifest.compatibilityDate,
  unsafeEvalBinding: "UNSAFE_EVAL",
  durableObjects,
  durableObjectsPersist: args.memory ? false : resolve(args.persist ?? ".threadline/state"),
  bindings,
  cf: false,
  log: new Log(LogLevel.INFO),
});

let stopping = false;
async function stop(signal) {
  if (stopping) return;
  stopping = true;
  try {
    await mf.dispose();
  } catch (error) {
    console.error(`serve.mjs: error while stopping: ${error}`);
  }
  process.exit(0);
}
process.on("SIGINT", () => stop("SIGINT"));
process.on("SIGTERM", () => stop("SIGTERM"));
if (args["exit-on-stdin-close"]) {
  process.stdin.on("end", () => stop("stdin"));
  process.stdin.resume();
}

try {
  const url = await mf.ready;
  process.stdout.write(`ready ${url.origin}\n`);
} catch (error) {
  console.error(`serve.mjs: workerd failed to start: ${error?.stack ?? error}`);
  await mf.dispose().catch(() => {});
  process.exit(1);
}
