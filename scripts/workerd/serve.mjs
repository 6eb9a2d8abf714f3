// This repository's entry to the local runtime's server (src/threadline/devserver/serve.mjs):
//   node scripts/workerd/serve.mjs --bundle DIR [--host H] [--port N] [--persist DIR | --memory]
import "../../src/threadline/devserver/serve.mjs";
