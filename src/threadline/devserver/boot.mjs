// Boots the npm Pyodide build inside workerd and exposes the Worker's Python classes
// as workerd classes. The generated main module (see build.py) imports this file and
// exports one class per Python entrypoint / Durable Object class.
//
// Shims, each for something that breaks when Pyodide runs inside workerd:
// - Pyodide fetches its wasm: it is a CompiledWasm module here, handed over through an
//   `instantiateWasm` hook (which must also define the Jsv error-marker imports).
// - Pyodide fetches python_stdlib.zip: a fetch wrapper answers that one URL during boot.
// - `location` is undefined: a dummy base URL stands in as indexURL.
// - no setImmediate: Emscripten would fall back to addEventListener and throw.
// - compiling wasm from bytes is forbidden: native extensions (.so) are compiled through
//   the unsafe-eval binding (`env.UNSAFE_EVAL.newWasmModule`).
import * as cloudflareWorkers from "cloudflare:workers";
import { DurableObject, WorkerEntrypoint } from "cloudflare:workers";
import { loadPyodide } from "./pyodide.mjs";
import createPyodideModule from "./pyodide.asm.mjs";
import pyodideWasm from "./pyodide.asm.wasm";
import stdlibZip from "./python_stdlib.zip";
import lockFileContents from "./pyodide-lock.json";
import sitePackagesZip from "./site-packages.zip";
import appZip from "./app.zip";

const BASE_URL = "https://pyodide.invalid/";
const APP_DIR = "/app";

let mainModule = "entry";
let bridgePromise;

/** Called by the generated main module: the Python module to import as the Worker's main. */
export function configure(options) {
  mainModule = options.main;
}

function getBridge(env) {
  bridgePromise ??= boot(env).catch((error) => {
    bridgePromise = undefined;
    throw error;
  });
  return bridgePromise;
}

function installGlobals(env) {
  if (globalThis.location === undefined) {
    globalThis.location = new URL(BASE_URL);
  }
  if (typeof globalThis.setImmediate !== "function") {
    globalThis.setImmediate = (fn, ...args) => setTimeout(fn, 0, ...args);
    globalThis.clearImmediate = (id) => clearTimeout(id);
  }
  const unsafeEval = env.UNSAFE_EVAL;
  if (!unsafeEval || WebAssembly.Module.fromBytesPatched) {
    return;
  }
  const NativeModule = WebAssembly.Module;
  const nativeInstantiate = WebAssembly.instantiate.bind(WebAssembly);
  const compile = (bytes) => unsafeEval.newWasmModule(bytes);
  function Module(bytes) {
    return compile(bytes);
  }
  Module.prototype = NativeModule.prototype;
  Module.fromBytesPatched = true;
  Module.exports = NativeModule.exports;
  Module.imports = NativeModule.imports;
  Module.customSections = NativeModule.customSections;
  WebAssembly.Module = Module;
  WebAssembly.compile = async (bytes) => compile(bytes);
  WebAssembly.instantiate = async (source, imports) => {
    if (source instanceof NativeModule) {
      return nativeInstantiate(source, imports);
    }
    const module = compile(source);
    return { module, instance: await nativeInstantiate(module, imports) };
  };
}

function instantiateWasm(imports, receiveInstance) {
  const marker = Symbol("error marker");
  imports.env.Jsv_GetError_import = () => marker;
  imports.env.JsvError_Check = (value) => value === marker;
  WebAssembly.instantiate(pyodideWasm, imports).then(
    (instance) => receiveInstance(instance, pyodideWasm),
    (error) => console.error("pyodide wasm instantiation failed", error),
  );
  return {};
}

async function boot(env) {
  const started = Date.now();
  installGlobals(env);
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const url = typeof input === "string" ? input : input.url ?? String(input);
    if (url.startsWith(BASE_URL)) {
      if (url === `${BASE_URL}python_stdlib.zip`) {
        return new Response(stdlibZip);
      }
      return new Response(null, { status: 404 });
    }
    return realFetch(input, init);
  };
  let pyodide;
  try {
    pyodide = await loadPyodide({
      indexURL: BASE_URL,
      lockFileContents,
      createPyodideModule: (settings) => {
        settings.instantiateWasm = instantiateWasm;
        return createPyodideModule(settings);
      },
      stdout: (line) => console.log(line),
      stderr: (line) => console.error(line),
    });
  } finally {
    globalThis.fetch = realFetch;
  }
  const sitePackages = pyodide.runPython("import sysconfig; sysconfig.get_paths()['purelib']");
  pyodide.unpackArchive(sitePackagesZip, "zip", { extractDir: sitePackages });
  pyodide.FS.mkdirTree(APP_DIR);
  pyodide.unpackArchive(appZip, "zip", { extractDir: APP_DIR });
  pyodide.runPython(`import sys; sys.path.insert(0, ${JSON.stringify(APP_DIR)})`);
  pyodide.pyimport("_pyodide_entrypoint_helper").cloudflareWorkersModule = cloudflareWorkers;
  const bridge = pyodide.pyimport("_workerd_bridge");
  bridge.load_main(mainModule);
  console.log(`[threadline] Python ${pyodide.version} ready in ${Date.now() - started} ms`);
  return bridge;
}

/** Calls a Python handler; a Python exception is logged (with its traceback) and rethrown. */
async function invoke(bridge, instance, label, method, args) {
  try {
    return await bridge.call(instance, method, ...args);
  } catch (error) {
    console.error(`${label}.${method} raised: ${error?.message ?? error}`);
    throw error;
  }
}

/** A workerd entrypoint class (e.g. the default export) backed by a Python class. */
export function makeEntrypoint(className) {
  return class extends WorkerEntrypoint {
    async fetch(request) {
      const bridge = await getBridge(this.env);
      const instance = bridge.construct(className, this.ctx, this.env);
      try {
        return await invoke(bridge, instance, className, "fetch", [request]);
      } finally {
        instance.destroy();
      }
    }
  };
}

/** A workerd Durable Object class backed by a Python class: fetch and alarm handlers, and
 * the RPC methods of ThreadObjectBase. */
export function makeDurableObject(className) {
  return class extends DurableObject {
    constructor(ctx, env) {
      super(ctx, env);
      // Like workerd, no event reaches the object before its Python constructor ran.
      this.instance = ctx.blockConcurrencyWhile(async () => {
        this.bridge = await getBridge(env);
        return this.bridge.construct(className, ctx, env);
      });
    }

    async fetch(request) {
      const instance = await this.instance;
      return await invoke(this.bridge, instance, className, "fetch", [request]);
    }

    async alarm(alarmInfo) {
      const instance = await this.instance;
      return await invoke(this.bridge, instance, className, "alarm", [alarmInfo]);
    }

    // RPC methods of ThreadObjectBase, as workerd exposes a Python Durable Object's methods.
    async wake_lane(...args) {
      const instance = await this.instance;
      return await invoke(this.bridge, instance, className, "wake_lane", args);
    }

    async admit_message(...args) {
      const instance = await this.instance;
      return await invoke(this.bridge, instance, className, "admit_message", args);
    }
  };
}
